"""pytest plugin that records every collected test with the spec rules it cites (SPEC-3).

``scopecheck rules`` runs ``pytest --collect-only -p scopecheck.tools.rules_plugin`` in a subprocess
with ``SCOPECHECK_COLLECT_OUT`` naming a file; this plugin writes
``{"tests": [{"nodeid", "rules"}], "errors": [...]}`` there when the session ends.  Coverage is
therefore computed from what pytest really collects, never from a hand-kept list.  Without the
environment variable the plugin only registers the ``rule`` marker and records nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

#: Environment variable naming the JSON file the collector writes.
OUT_ENV = "SCOPECHECK_COLLECT_OUT"

_MARKER_HELP = "rule(*ids): the spec rules (spec/rules/*.toml) this test checks"


def marker_rule_ids(item: pytest.Item) -> tuple[str, ...]:
    """The rule ids an item cites through ``@pytest.mark.rule(...)`` on the test, its class or
    its module, deduplicated in first-seen order.  A non-str argument is kept as its ``repr``
    so it is reported as an unknown rule rather than dropped (SPEC-2)."""
    seen: dict[str, None] = {}
    for mark in item.iter_markers("rule"):
        for arg in mark.args:
            seen.setdefault(arg if isinstance(arg, str) else repr(arg), None)
    return tuple(seen)


class _Collector:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.tests: list[dict[str, Any]] = []
        self.errors: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests = [
            {"nodeid": item.nodeid, "rules": list(marker_rule_ids(item))} for item in session.items
        ]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            self.errors.append(f"{report.nodeid or '<session>'}: {lines[-1] if lines else '?'}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        payload = {"tests": self.tests, "errors": self.errors}
        self.out.write_bytes(orjson.dumps(payload))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    out = os.environ.get(OUT_ENV)
    if out:
        config.pluginmanager.register(_Collector(Path(out)), "scopecheck-rules-collector")
