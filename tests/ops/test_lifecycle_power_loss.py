"""Power loss during an operation lifecycle, on SQLite (APSW crash VFS) and JSONL (pyfakefs
disk model): OP-19..OP-21.

The lifecycle program (``crashsim/lifecycle.py``: two lanes, frames, tool batches, checkpoints
with memos, settlement, outcomes, cancellation, terminal cleanup with retirement, a later
operation) is committed with the power cut at every I/O step; every post-crash image must
reopen to an acknowledged prefix and satisfy the lifecycle invariants there.  Bounded by
default (the short program, a few seconds); ``SCOPECHECK_LONG_CRASH=1`` runs the long program
with more images per fault point, JSONL crash-during-recovery states and I/O faults.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from scopecheck.crashsim.lifecycle import LifecycleProgram, lifecycle_problems, lifecycle_program
from scopecheck.crashsim.sqlite_sweep import lifecycle_crash_sweep
from scopecheck.models.lifecycle import Lifecycle
from scopecheck.models.reference import ReferenceRepository

LONG = os.environ.get("SCOPECHECK_LONG_CRASH") == "1"
SIZE: Any = "long" if LONG else "short"


def assert_clean(report: Any) -> None:
    assert report.fault_points > 0 and report.states > 0
    assert report.ok, "\n".join(str(f) for f in report.failures[:5])


def test_the_program_walks_every_lifecycle_step() -> None:
    """The workload is a lifecycle, not a toy: every step kind, two lanes at once, retirement
    of a cancelled and a completed operation, and recovery with work to do at most prefixes."""
    short, long = lifecycle_program("short"), lifecycle_program("long")
    steps = {tx.step for tx in short.txs}
    assert {
        "start",
        "begin_response",
        "frame",
        "settle",
        "start_tool",
        "checkpoint",
        "tool_outcome",
        "cancel",
        "terminal:cancelled",
        "terminal:completed",
    } <= steps
    assert {"supersede", "reset", "recover_unknown", "terminal:interrupted", "terminal:failed"} <= {
        tx.step for tx in long.txs
    }
    assert len(short.terminal_at) == 2 and len(long.terminal_at) == 4
    assert max(len(r) for r in short.recoveries) == 2  # both lanes mid-flight at once
    busy = [r for r in short.recoveries if any(op["frames"] or op["tools"] for op in r.values())]
    assert len(busy) > len(short.txs) // 2


def _model_storage(program: LifecycleProgram, prefix: int) -> Any:
    session = ReferenceRepository().create("s")
    for tx in program.txs[:prefix]:
        session.commit(list(tx.writes), 1000)
    return session


@pytest.mark.rule("OP-20")
def test_the_invariants_hold_on_every_model_prefix_and_fail_on_a_neighbouring_one() -> None:
    """Each prefix of the model satisfies the invariants as itself; read as the prefix before a
    terminal, frame or checkpoint, it does not (the check can fail)."""
    program = lifecycle_program("short")
    for prefix in range(len(program.txs) + 1):
        storage = _model_storage(program, prefix)
        assert lifecycle_problems(program, storage, prefix) == [], prefix
    for op, at in program.terminal_at.items():
        after = _model_storage(program, at)
        problems = lifecycle_problems(program, after, at - 1)
        assert any("recovery after" in p for p in problems), problems
        before = _model_storage(program, at - 1)
        problems = lifecycle_problems(program, before, at)
        assert any(f"terminal of {op} committed" in p for p in problems), problems


# -- SQLite: the APSW crash VFS (crashsim/sqlite_vfs.py) ----------------------------------------


@pytest.mark.rule("OP-19", "OP-20")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_sqlite_lifecycle_survives_power_loss_at_every_io_step(layout: Any) -> None:
    """Power lost at every write/sync (kept: synced data plus random subsets of unsynced
    writes, some torn); every image reopens to an acknowledged prefix whose recovery and
    retirement are the model's."""
    stride = 1 if LONG or layout == "per-file" else 3
    report = lifecycle_crash_sweep(
        SIZE, layout=layout, variants=4 if LONG else 2, seed=7, stride=stride
    )
    assert report.io_calls > 150 and report.fault_points >= report.io_calls // stride
    assert_clean(report)


@pytest.mark.rule("OP-19")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_sqlite_lifecycle_power_loss_after_the_last_acknowledgement(layout: Any) -> None:
    report = lifecycle_crash_sweep(SIZE, layout=layout, variants=6, seed=3, crashes=False)
    assert report.fault_points == 2
    assert_clean(report)


def _sqlite_mutant(name: str) -> Any:
    from scopecheck.planted.sqlite import BY_NAME

    return BY_NAME[name]


@pytest.mark.rule("OP-19", "OP-20")
def test_sqlite_sweep_catches_retirement_committed_apart_from_the_terminal_cleanup() -> None:
    """Planted: retirement's scoped DELETEs run in a transaction of their own after the
    terminal siblings; a power cut between the two leaves a finished operation's scope."""
    mutant = _sqlite_mutant("sqlite-retire-separate-transaction")
    report = lifecycle_crash_sweep(
        "short", repository_class=mutant.repository_factory(), variants=2, max_failures=3
    )
    assert report.failures
    assert any("committed but its scope still holds" in f.problem for f in report.failures)
    assert all(f.source == "sqlite" and f.workload["lifecycle"] == "short" for f in report.failures)


@pytest.mark.rule("OP-19")
def test_sqlite_sweep_catches_synchronous_off() -> None:
    """Planted: synchronous=OFF acknowledges commits before the WAL is synced; power loss then
    loses acknowledged lifecycle steps and recovery finds an earlier operation state."""
    mutant = _sqlite_mutant("sqlite-synchronous-off")
    report = lifecycle_crash_sweep(
        "short", repository_class=mutant.repository_factory(), variants=2, max_failures=3
    )
    assert report.failures
    assert any("recovery after" in f.problem for f in report.failures)


def _cancel_without_retirement() -> type[Lifecycle]:
    from scopecheck.planted.ops import CancelWithoutRetirement

    return CancelWithoutRetirement


@pytest.mark.rule("OP-20")
def test_sqlite_sweep_catches_a_harness_that_never_retires_a_cancelled_scope() -> None:
    """Planted harness bug: the backend is right and matches the model, yet the invariants
    fail — the cancelled operation's scope outlives its terminal."""
    report = lifecycle_crash_sweep(
        "short", harness=_cancel_without_retirement(), variants=1, crashes=False
    )
    assert report.failures
    assert all("terminal of b.op2 committed" in f.problem for f in report.failures)


# -- JSONL: the persistence model over the recorded calls (crashsim/jsonl_sweep.py) -------------


@pytest.mark.rule("OP-21", "CRASH-SYS-1")
def test_jsonl_lifecycle_survives_every_crash_and_power_loss_state() -> None:
    """Process crash before every file operation, and power loss (only what was synced, data or
    directory entries kept, one file's unsynced writes kept, torn unsynced writes)."""
    from scopecheck.crashsim.lifecycle import explore_jsonl_lifecycle

    report = explore_jsonl_lifecycle(SIZE, recovery=LONG, faults=LONG, seed=5)
    assert report.states > 300 and report.ops > 50
    assert not report.failures, "\n".join(str(f) for f in report.failures[:3])


@pytest.mark.rule("OP-21")
def test_jsonl_sweep_catches_acknowledgement_before_fsync() -> None:
    """Planted: a commit acknowledged before its line is fsynced; power loss drops it."""
    from scopecheck.crashsim.lifecycle import explore_jsonl_lifecycle
    from scopecheck.planted.jsonl_crash import NEW

    _, repo = NEW["jsonl-ack-before-fsync"]
    report = explore_jsonl_lifecycle(
        "short", repo_class=repo, recovery=False, faults=False, max_failures=2
    )
    assert report.failures
    assert any("recovery after" in f.problem for f in report.failures), report.failures[0]


@pytest.mark.rule("OP-21")
def test_jsonl_sweep_reports_a_broken_lifecycle_invariant_in_its_own_words() -> None:
    from scopecheck.crashsim.lifecycle import explore_jsonl_lifecycle

    report = explore_jsonl_lifecycle(
        "short",
        harness=_cancel_without_retirement(),
        recovery=False,
        faults=False,
        max_failures=2,
    )
    assert report.failures
    assert all(f.rule == "OP-21" and "terminal of b.op2" in f.problem for f in report.failures)
