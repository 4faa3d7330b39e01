"""Fuzzing rounds as pytest items, so ``scopecheck fuzz --workers N`` spreads backends over
pytest-xdist workers.  Each item fuzzes one backend for the budget and writes its report (and
progress while it runs) to ``$SCOPECHECK_FUZZ_DIR/<backend>.json``; the parent process shows the
progress and prints the table.  Not collected by the test suite (no ``test_`` prefix).
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from scopecheck.backends.adapters import anchored
from scopecheck.backends.registry import is_user_spec
from scopecheck.backends.resolve import resolve_backend
from scopecheck.run.fuzz import BackendReport, fuzz_backend, report_file_name
from scopecheck.run.profiles import get_profile

BACKENDS = [b for b in os.environ.get("SCOPECHECK_FUZZ_BACKENDS", "").split(",") if b]


@pytest.mark.parametrize("name", BACKENDS)
def test_fuzz(name: str) -> None:
    out = Path(os.environ["SCOPECHECK_FUZZ_DIR"]) / report_file_name(name)
    profile = os.environ.get("SCOPECHECK_PROFILE", "dev")

    def progress(report: BackendReport) -> None:
        out.write_bytes(
            orjson.dumps({**report.as_json(), "seconds": report.seconds, "done": False})
        )

    cwd = os.environ.get("SCOPECHECK_FUZZ_CWD", os.getcwd())
    report = fuzz_backend(
        resolve_backend(anchored(name, cwd) if is_user_spec(name) else name),
        budget=float(os.environ["SCOPECHECK_FUZZ_BUDGET"]),
        seed=int(os.environ["SCOPECHECK_FUZZ_SEED"]),
        settings=get_profile(profile),
        failures_dir=Path(os.environ["SCOPECHECK_FUZZ_FAILURES"]),
        profile=profile,
        on_progress=progress,
        spec=name if is_user_spec(name) else None,
    )
    out.write_bytes(orjson.dumps({**report.as_json(), "seconds": report.seconds, "done": True}))
