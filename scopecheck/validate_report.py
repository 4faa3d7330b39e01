"""pytest plugin used by ``scopecheck validate``: write each test's outcome and rules to JSON."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

_results: dict[str, Any] = {"ran": 0, "failed": []}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.failed:
        if report.when == "call":
            _results["ran"] += 1
        if report.failed:
            rules = [rule for rules in _RULES.get(report.nodeid, []) for rule in rules]
            message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""
            _results["failed"].append({"nodeid": report.nodeid, "rules": rules, "error": message})


_RULES: dict[str, list[tuple[str, ...]]] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _RULES[item.nodeid] = [tuple(m.args) for m in item.iter_markers("rule")]


def pytest_sessionfinish() -> None:
    target = os.environ.get("SCOPECHECK_VALIDATE_REPORT")
    if target:
        Path(target).write_bytes(orjson.dumps(_results))
