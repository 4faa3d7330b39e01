"""``scopecheck fuzz --workers N``: one pytest-xdist run whose items fuzz one backend each."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from scopecheck.run.fuzz import BackendReport, report_file_name


def fuzz_in_workers(
    names: list[str],
    budget: float,
    seed: int,
    profile: str,
    failures_dir: Path,
    workers: int,
    progress: Any,
) -> dict[str, BackendReport]:
    """Run ``scopecheck.run.fuzz_items`` under ``pytest -n workers`` and collect the reports."""
    import scopecheck.run.fuzz_items as worker_module

    tasks = {n: progress.add_task("", total=budget, name=n, steps=0, failures=0) for n in names}
    with tempfile.TemporaryDirectory(prefix="scopecheck-fuzz-") as scratch:
        env = {
            **os.environ,
            "SCOPECHECK_FUZZ_BACKENDS": ",".join(names),
            "SCOPECHECK_FUZZ_DIR": scratch,
            "SCOPECHECK_FUZZ_CWD": os.getcwd(),  # relative backend paths are the user's
            "SCOPECHECK_FUZZ_BUDGET": str(budget),
            "SCOPECHECK_FUZZ_SEED": str(seed),
            "SCOPECHECK_FUZZ_FAILURES": str(failures_dir.resolve()),
            "SCOPECHECK_PROFILE": profile,
        }
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            str(workers),
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--rootdir",
            scratch,
            "--pyargs",
            worker_module.__name__,
        ]
        log = Path(scratch) / "pytest.log"  # a file, not a pipe: a long report cannot block
        with (
            log.open("wb") as sink,
            subprocess.Popen(
                command, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=scratch
            ) as child,
        ):
            while child.poll() is None:
                time.sleep(0.5)
                _refresh(Path(scratch), tasks, progress, budget)
        output = log.read_text(encoding="utf-8", errors="replace")
        reports = _refresh(Path(scratch), tasks, progress, budget)
    missing = [n for n in names if n not in reports]
    if missing:
        raise RuntimeError(f"workers produced no report for {missing}: {output[-2000:]}")
    return reports


def _refresh(
    scratch: Path, tasks: dict[str, Any], progress: Any, budget: float
) -> dict[str, BackendReport]:
    reports: dict[str, BackendReport] = {}
    for name, task in tasks.items():
        path = scratch / report_file_name(name)
        try:
            data = orjson.loads(path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            continue
        report = BackendReport(
            examples=data["examples"],
            steps=data["steps"],
            crash_states=data["crash_states"],
            crash_fault_runs=data["crash_fault_runs"],
            failures=data["failures"],
            seconds=data["seconds"],
            reproducers=list(data["reproducers"]),
        )
        reports[name] = report
        progress.update(
            task,
            completed=budget if data["done"] else min(data["seconds"], budget),
            steps=report.steps,
            failures=report.failures,
        )
    return reports
