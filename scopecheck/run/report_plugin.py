"""pytest plugin used by ``scopecheck validate``: each test's outcome, rules and failure to JSON.

The parent process reads ``$SCOPECHECK_VALIDATE_REPORT`` while the run goes on (it is
rewritten after every test, so a live display can count) and once more at the end.  A failure
carries pytest's one-line summary of the exception (``error``) and the explanation pytest
prints under it, assertion diff included (``message``, INSTALL-7).

With ``$SCOPECHECK_VALIDATE_SHARD`` set to ``K/N`` the run keeps only its share of the cases
collected (every N-th in collection order from the K-th, FLEET-4) and deselects the rest; the
report lists the cases kept (``units``: their node ids, how many were collected, and a digest
of every collected id, so ``scopecheck merge`` can tell that N shards made every case once).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.crashsim.shards import Shard, Units, digest

REPORT_ENV = "SCOPECHECK_VALIDATE_REPORT"
#: ``K/N``: run only the K-th of N shares of the collected cases (FLEET-4).
SHARD_ENV = "SCOPECHECK_VALIDATE_SHARD"

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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Note each case's rules; with a shard, keep its share of the cases (after every other
    plugin has ordered and filtered them, so the shares are of the list that runs)."""
    for item in items:
        _RULES[item.nodeid] = [tuple(m.args) for m in item.iter_markers("rule")]
    collected = [item.nodeid for item in items]
    shard_text = os.environ.get(SHARD_ENV)
    if shard_text:
        shard = Shard.parse(shard_text)
        kept = [item for position, item in enumerate(items) if shard.owns(position)]
        dropped = [item for position, item in enumerate(items) if not shard.owns(position)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    units = Units(len(collected), tuple(item.nodeid for item in items), digest(collected))
    _results["collected"] = len(collected)
    _results["units"] = units.to_json()
    _write()


def pytest_runtest_logstart(nodeid: str) -> None:
    """Name the case that is running: a run stopped by the watchdog says which (INSTALL-20)."""
    _results["running"] = nodeid
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
