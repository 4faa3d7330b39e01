"""SQLite benchmarks: commit throughput against raw APSW, crash/I/O states per second, and
stateful-machine steps per second (measured, never asserted by tests).

``bench_sqlite()`` returns a flat dict of figures.  The commit comparison runs in the same
process and the same temp filesystem: the backend commits a mixed workload, then a raw APSW
loop executes the very same row inserts/deletes with the same pragmas, one ``BEGIN IMMEDIATE``
transaction per commit, without validation, reference checks or stats.  It is done twice: with
``synchronous=FULL`` (the shipped setting, fsync-bound) and with ``synchronous=OFF`` (so the
ratio shows the backend's CPU overhead), in three interleaved rounds keeping the best time of
each side.  Run it with ``python -m scopecheck.bench.sqlite [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import apsw

from scopecheck.crashsim.sqlite_sweep import Layout, crash_sweep, io_error_sweep, recovery_io_sweep
from scopecheck.crashsim.workload import StepClock, Transaction, make_workload
from scopecheck.impl.sqlite import SqliteRepository
from scopecheck.impl.sqlite.schema import initialise
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)

Statement = tuple[str, tuple[Any, ...]]


def _raw_statements(workload: Sequence[Transaction]) -> list[list[Statement]]:
    """The row operations of each transaction, precomputed (the raw loop only executes)."""
    result: list[list[Statement]] = []
    seq = 1
    for index, writes in enumerate(workload):
        stamp = StepClock().at(index).now
        stmts: list[Statement] = []
        for write in writes:
            if isinstance(write, SetValue):
                a = write.address
                stmts.append(
                    (
                        "INSERT OR REPLACE INTO scalar_values VALUES (?, ?, ?, ?, ?, ?)",
                        ("s", a.scope_id or "", a.namespace, a.key, seq, write.value_json.decode()),
                    )
                )
            elif isinstance(write, DeleteValue):
                a = write.address
                stmts.append(
                    (
                        "DELETE FROM scalar_values WHERE session_id = ? AND scope_id = ? "
                        "AND namespace = ? AND key = ?",
                        ("s", a.scope_id or "", a.namespace, a.key),
                    )
                )
            elif isinstance(write, AppendList):
                la = write.address
                stmts.append(
                    (
                        "INSERT INTO list_values VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            "s",
                            la.scope_id or "",
                            la.namespace,
                            la.key,
                            seq,
                            write.element_json.decode(),
                            write.tag,
                        ),
                    )
                )
            elif isinstance(write, DeleteList):
                la = write.address
                stmts.append(
                    (
                        "DELETE FROM list_values WHERE session_id = ? AND scope_id = ? "
                        "AND namespace = ? AND key = ?",
                        ("s", la.scope_id or "", la.namespace, la.key),
                    )
                )
            elif isinstance(write, InsertEntry):
                stmts.append(
                    (
                        "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            "s",
                            write.id,
                            write.parent_id,
                            write.type,
                            write.payload_json.decode(),
                            seq,
                            stamp,
                        ),
                    )
                )
            elif isinstance(write, InsertUsage):
                stmts.append(
                    (
                        "INSERT INTO usage_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            "s",
                            write.id,
                            write.usage_json.decode(),
                            write.entry_id,
                            0,
                            None,
                            seq,
                            stamp,
                        ),
                    )
                )
            elif isinstance(write, RetireScope):
                for table in ("scalar_values", "list_values"):
                    stmts.append(
                        (
                            f"DELETE FROM {table} WHERE session_id = ? AND scope_id = ?",
                            ("s", write.retired.id),
                        )
                    )
            seq += 1
        stmts.append(("UPDATE sessions SET next_seq = ? WHERE session_id = ?", (seq, "s")))
        result.append(stmts)
    return result


def _raw_commits(root: str, statements: list[list[Statement]], synchronous: str) -> float:
    """Seconds for the raw APSW loop over ``statements``."""
    path = os.path.join(root, "raw.sqlite")
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("BEGIN")
    initialise(conn)
    conn.execute(
        "INSERT INTO sessions VALUES ('s', 1, 0, 1, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)"
    )
    conn.execute("COMMIT")
    started = time.perf_counter()
    for stmts in statements:
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in stmts:
            conn.execute(sql, params)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def _backend_commits(root: str, workload: Sequence[Transaction], synchronous: str) -> float:
    clock = StepClock()
    repo = SqliteRepository(
        os.path.join(root, f"backend-{synchronous}"), clock, synchronous=synchronous
    )
    storage = repo.create("s")
    started = time.perf_counter()
    for index, writes in enumerate(workload):
        clock.at(index)
        storage.commit(writes)
    elapsed = time.perf_counter() - started
    repo.close()
    return float(elapsed)


def _machine_steps(backend_name: str, examples: int) -> float:
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from scopecheck.backends.registry import BUNDLED
    from scopecheck.machines.storage import make_machine

    machine = make_machine(BUNDLED[backend_name])
    machine.steps_run = 0
    chosen = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        stateful_step_count=40,
    )
    started = time.perf_counter()
    run_state_machine_as_test(machine, settings=chosen)  # type: ignore[no-untyped-call]
    elapsed = time.perf_counter() - started
    return machine.steps_run / elapsed


def bench_sqlite(quick: bool = False) -> dict[str, Any]:
    """Measure and return the SQLite figures (see the module docstring)."""
    commits = 150 if quick else 600
    workload = make_workload(42, transactions=commits, big_every=0)
    statements = _raw_statements(workload)
    result: dict[str, Any] = {"commits": commits}
    root = tempfile.mkdtemp(prefix="scopecheck-bench-")
    try:
        for synchronous in ("FULL", "OFF"):
            # Interleaved rounds, best of each: the box is shared, so take the least disturbed.
            backend_times, raw_times = [], []
            for round_number in range(3):
                run_root = os.path.join(root, f"{synchronous}-{round_number}")
                os.makedirs(os.path.join(run_root, "raw"))
                backend_times.append(_backend_commits(run_root, workload, synchronous))
                raw_times.append(
                    _raw_commits(os.path.join(run_root, "raw"), statements, synchronous)
                )
            backend, raw = min(backend_times), min(raw_times)
            key = synchronous.lower()
            result[f"commits_per_s_{key}"] = round(commits / backend, 1)
            result[f"raw_apsw_commits_per_s_{key}"] = round(commits / raw, 1)
            result[f"ratio_{key}"] = round(raw / backend, 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    sweep_workload = make_workload(1, transactions=6 if quick else 8, big_every=3)
    stride = 3 if quick else 1
    states = 0
    seconds = 0.0
    layouts: tuple[Layout, ...] = ("per-file", "shared")
    for layout in layouts:
        for report in (
            crash_sweep(sweep_workload, layout=layout, stride=stride),
            io_error_sweep(sweep_workload, layout=layout, mode="once", stride=stride),
            io_error_sweep(sweep_workload, layout=layout, mode="persistent", stride=stride),
            recovery_io_sweep(sweep_workload, layout=layout, mode="once", stride=stride),
        ):
            name = f"{report.sweep}_{layout}"
            result[f"{name}_states"] = report.states
            result[f"{name}_states_per_s"] = round(report.states_per_second, 1)
            result[f"{name}_failures"] = len(report.failures)
            states += report.states
            seconds += report.seconds
    result["crash_io_states_per_s"] = round(states / seconds, 1)

    examples = 10 if quick else 40
    for name in ("sqlite", "sqlite-shared", "memory"):
        result[f"machine_steps_per_s_{name}"] = round(_machine_steps(name, examples), 1)
    if os.path.isdir("/dev/shm") and "SCOPECHECK_SCRATCH" not in os.environ:
        os.environ["SCOPECHECK_SCRATCH"] = "/dev/shm"  # worlds on a RAM disk
        try:
            for name in ("sqlite", "sqlite-shared"):
                result[f"machine_steps_per_s_{name}_ram"] = round(_machine_steps(name, examples), 1)
        finally:
            del os.environ["SCOPECHECK_SCRATCH"]
    result.update(_mutant_catch_seconds())
    return result


def _mutant_catch_seconds() -> dict[str, Any]:
    """Seconds until each planted SQLite bug is caught (None if it was not)."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from scopecheck.machines.storage import make_machine
    from scopecheck.planted.sqlite import MUTANTS, crash_check

    figures: dict[str, Any] = {}
    chosen = settings(
        max_examples=1000,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        stateful_step_count=40,
    )
    for mutant in MUTANTS:
        started = time.perf_counter()
        caught = False
        if mutant.caught_by == "crash":
            caught = bool(crash_check(mutant).failures)
        else:
            try:
                run_state_machine_as_test(make_machine(mutant.backend()), settings=chosen)  # type: ignore[no-untyped-call]
            except AssertionError:
                caught = True
        elapsed = time.perf_counter() - started
        figures[f"catch_s_{mutant.name}"] = round(elapsed, 2) if caught else None
    return figures


if __name__ == "__main__":  # pragma: no cover - manual run
    import sys

    for key, figure in bench_sqlite(quick="--quick" in sys.argv).items():
        print(f"{key:45} {figure}")
