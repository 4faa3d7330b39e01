"""pytest plugin used by ``scopecheck validate``: each test's outcome, rules and failure to JSON.

The parent process reads ``$SCOPECHECK_VALIDATE_REPORT`` while the run goes on (it is
rewritten after every test, so a live display can count) and once more at the end.  A failure
carries pytest's one-line summary of the exception (``error``) and the explanation pytest
prints under it, assertion diff included (``message``, INSTALL-7).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

REPORT_ENV = "SCOPECHECK_VALIDATE_REPORT"

_results: dict[str, Any] = {"ran": 0, "skipped": [], "failed": [], "done": False}
_RULES: dict[str, list[tuple[str, ...]]] = {}

#: Lines of the explanation kept per failure (a long diff is cut, never the summary).
MAX_MESSAGE_LINES = 40


def explain_failure(report: pytest.TestReport) -> tuple[str, str]:
    """``(summary, explanation)`` of a failed report: pytest's crash line, and its ``E`` lines
    (the assertion message and its diff) without the ``E`` prefix."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    summary = str(getattr(crash, "message", "") or "").strip()
    text = report.longreprtext or ""
    marked = [line[1:] for line in text.splitlines() if line.startswith("E ") or line == "E"]
    kept = textwrap.dedent("\n".join(marked)).splitlines()
    if not summary:
        summary = kept[0].strip() if kept else (text.strip().splitlines() or [""])[-1]
    if len(kept) > MAX_MESSAGE_LINES:
        kept = [*kept[:MAX_MESSAGE_LINES], f"... ({len(kept) - MAX_MESSAGE_LINES} more lines)"]
    return summary.splitlines()[0] if summary else "", "\n".join(kept)


def _write() -> None:
    target = os.environ.get(REPORT_ENV)
    if target:
        Path(target + ".tmp").write_bytes(orjson.dumps(_results))
        os.replace(target + ".tmp", target)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _RULES[item.nodeid] = [tuple(m.args) for m in item.iter_markers("rule")]
    _results["collected"] = len(items)
    _write()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and not report.skipped:
        _results["ran"] += 1
    if report.skipped and report.when in ("setup", "call"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        _results["skipped"].append({"nodeid": report.nodeid, "reason": str(reason)})
    if report.failed:
        rules = [rule for rules in _RULES.get(report.nodeid, []) for rule in rules]
        summary, message = explain_failure(report)
        _results["failed"].append(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "rules": rules,
                "error": summary,
                "message": message,
            }
        )
    _write()


def pytest_sessionfinish() -> None:
    _results["done"] = True
    _write()
