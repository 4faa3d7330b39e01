"""``scopecheck bench syscall``: crash exploration of backend processes from their system calls
-- figures, never assertions.

For the sqlite3 example (a Python factory behind ``scopecheck serve``) and the Node.js example,
per run: the seeded workload without strace and under strace (the tracing overhead), the
crash images of the recording, how fast one checker child reopens and checks them, the
end-to-end rate (recording plus checking), and the seconds of one fault run.  The crash images
are built and checked twice, with the file-system profiles off (``posix`` alone) and on (every
profile, each distinct image once, CRASH-SYS-14): the crash states per second of each, images
built and checked by a fresh checker child, and what the profiles cost.  Medians over
``runs`` runs, all in one process, one after the other.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Fault runs timed per run.
FAULT_RUNS = 4


def _backends() -> dict[str, list[str]]:
    import scopecheck.examples

    found = {
        "sqlite3 (Python)": [
            sys.executable, "-m", "scopecheck", "serve",
            "scopecheck.examples.sqlite3_backend:make_backend",
        ],
    }  # fmt: skip
    node = shutil.which("node")
    script = Path(scopecheck.examples.__file__).resolve().parent / "node" / "backend.js"
    if node is not None and script.is_file():
        found["Node.js"] = [node, str(script)]
    return found


def _timed_run(command: list[str], seed: int, *, traced: bool) -> tuple[float, Any]:
    from scopecheck.crashsim.generic_sweep import workload
    from scopecheck.process.syscall_crash import run_workload, scratch_base

    base = tempfile.mkdtemp(prefix="scopecheck-bench-", dir=scratch_base())
    try:
        root = tempfile.mkdtemp(prefix="root-", dir=base)
        traces = tempfile.mkdtemp(prefix="traces-", dir=base)
        started = time.perf_counter()
        recording = run_workload(command, workload(seed, 6), root, base, traces, traced=traced)
        return time.perf_counter() - started, recording
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _build_and_check(
    command: list[str], cwd: str, recording: Any, seed: int, profiles: Any
) -> tuple[int, float, float]:
    """``(images, seconds building them, seconds checking them)`` of every crash point of
    ``recording`` under ``profiles``, on a fresh checker child."""
    from scopecheck.process.syscall_crash import ImageChecker, crash_images

    started = time.perf_counter()
    found = list(crash_images(recording.ops, seed, profiles=profiles))
    built = time.perf_counter() - started
    with ImageChecker(command, cwd, recording) as checker:
        started = time.perf_counter()
        for k, variant, image in found:
            checker.check(k, variant, image, recording.allowed(k))
        checked = time.perf_counter() - started
    return len(found), built, checked


def bench_syscall(runs: int) -> dict[str, Any]:
    import os
    import random

    from scopecheck.crashsim.persistence import POSIX, PROFILES
    from scopecheck.crashsim.strace import unavailable
    from scopecheck.process.syscall_crash import (
        ImageChecker,
        crash_images,
        run_workload,
        scratch_base,
    )

    why = unavailable()
    if why is not None:
        return {"skipped": why}
    results: dict[str, Any] = {}
    cwd = os.getcwd()
    for name, command in _backends().items():
        plain, traced, images, check_rates, overall, fault_seconds = [], [], [], [], [], []
        off_rates: list[float] = []
        on_rates: list[float] = []
        on_images: list[int] = []
        for run in range(runs):
            seconds, _ = _timed_run(command, run, traced=False)
            plain.append(seconds)
            record_seconds, recording = _timed_run(command, run, traced=True)
            traced.append(record_seconds)
            found = list(crash_images(recording.ops, run))
            images.append(len(found))
            with ImageChecker(command, cwd, recording) as checker:
                started = time.perf_counter()
                for k, variant, image in found:
                    checker.check(k, variant, image, recording.allowed(k))
                check_seconds = time.perf_counter() - started
            check_rates.append(len(found) / check_seconds)
            overall.append(len(found) / (record_seconds + check_seconds))
            for profiles, rates in (((POSIX,), off_rates), (PROFILES, on_rates)):
                count, built, checked = _build_and_check(command, cwd, recording, run, profiles)
                rates.append(count / (built + checked))
                if profiles is PROFILES:
                    on_images.append(count)
            calls = list(recording.calls)
            random.Random(run).shuffle(calls)
            base = tempfile.mkdtemp(prefix="scopecheck-bench-", dir=scratch_base())
            try:
                for child, _, call, ordinal in calls[:FAULT_RUNS]:
                    root = tempfile.mkdtemp(prefix="root-", dir=base)
                    started = time.perf_counter()
                    run_workload(
                        command, recording.workload, root, cwd, base,
                        inject=(child, f"{call}:error=EIO:when={ordinal + 1}"),
                    )  # fmt: skip
                    fault_seconds.append(time.perf_counter() - started)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        median = statistics.median
        results[name] = {
            "workload_plain_s": round(median(plain), 3),
            "workload_traced_s": round(median(traced), 3),
            "strace_overhead": round(median(traced) / median(plain), 2),
            "operations": len(recording.ops),
            "crash_images": int(median(images)),
            "check_states_per_s": round(median(check_rates), 1),
            "states_per_s": round(median(overall), 1),
            "fault_run_s": round(median(fault_seconds), 3) if fault_seconds else None,
            "profiles_off_states_per_s": round(median(off_rates), 1),
            "profiles_on_states_per_s": round(median(on_rates), 1),
            "profiles_on_images": int(median(on_images)),
            "profiles_cost": round(1 - median(on_rates) / median(off_rates), 3),
            "runs": runs,
        }
    return results
