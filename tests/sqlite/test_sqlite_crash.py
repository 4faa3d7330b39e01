"""Crash and I/O-error testing of the SQLite backend through the recording APSW VFS."""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw
import pytest

from scopecheck.crashsim.sqlite_sweep import (
    crash_sweep,
    delete_crash_sweep,
    explore,
    io_error_sweep,
    recovery_io_sweep,
    sigkill_sweep,
)
from scopecheck.crashsim.sqlite_vfs import (
    SECTOR,
    FaultPlan,
    IOCall,
    RecordingVFS,
    SimulatedCrash,
    disk_model,
    post_crash_images,
)
from scopecheck.crashsim.workload import make_workload
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, Allocation
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.models.addresses import value
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.protocols import Clock
from scopecheck.models.records import Committed
from scopecheck.models.writes import set_value
from scopecheck.mutants.seams import WrappedRepository, WrappedSession

WORKLOAD = make_workload(11, transactions=6, big_every=3)


def assert_clean(report: Any) -> None:
    assert report.fault_points > 0 and report.states > 0
    assert report.ok, "\n".join(str(f) for f in report.failures[:10])


@pytest.mark.rule("CRASH-SQL-1", "CRASH-SQL-2", "CRASH-SQL-3", "CRASH-SQL-8", "SQLITE-8")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_crash_at_every_io_call_recovers_a_model_state(layout: Any) -> None:
    """Crash at every I/O call of the workload (open, commits, checkpoints, mid-stream close,
    final close); every post-crash image reopens as the model before or after the in-flight
    commit, with every acknowledged commit present."""
    report = crash_sweep(WORKLOAD, layout=layout, variants=3, seed=1)
    assert report.fault_points >= report.io_calls > 20
    assert_clean(report)


@pytest.mark.rule("CRASH-SQL-2", "CRASH-SQL-3", "SQLITE-8")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_power_loss_without_crash_keeps_every_acknowledged_commit(layout: Any) -> None:
    """No call fails; power is lost after the last acknowledgement (before and after close)."""
    report = crash_sweep(WORKLOAD, layout=layout, variants=8, seed=2, crashes=False)
    assert report.fault_points == 2
    assert_clean(report)


@pytest.mark.rule("CRASH-SQL-4")
@pytest.mark.parametrize("mode", ["once", "persistent"])
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_io_error_at_every_call_fails_the_commit_cleanly(layout: Any, mode: Any) -> None:
    """SQLITE_IOERR at the n-th call (once, or from then on): the commit raises io_error, the
    open handle shows a model state, and a reopen shows every acknowledged commit."""
    report = io_error_sweep(WORKLOAD, layout=layout, mode=mode, stride=2)
    assert_clean(report)


@pytest.mark.rule("CRASH-SQL-5")
@pytest.mark.parametrize("mode", ["once", "persistent"])
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_io_error_during_recovery_on_reopen_loses_nothing(layout: Any, mode: Any) -> None:
    """Reopening a WAL that needs recovery with the n-th call (reads included) failing gives a
    coded error or the right state, and a clean reopen afterwards has every commit."""
    report = recovery_io_sweep(WORKLOAD, layout=layout, mode=mode, stride=3)
    assert report.io_calls > 20
    assert_clean(report)


SyncOff = functools.partial(SqliteRepository, synchronous="OFF")
SyncNormal = functools.partial(SqliteRepository, synchronous="NORMAL")
JournalOff = functools.partial(SqliteRepository, journal_mode="OFF")
SharedJournalOff = functools.partial(SqliteContainerRepository, journal_mode="OFF")


@pytest.mark.rule("CRASH-SQL-6")
@pytest.mark.parametrize(
    ("cls", "layout"),
    [
        (SyncOff, "per-file"),
        (JournalOff, "per-file"),
        (SharedJournalOff, "shared"),
        (SyncNormal, "per-file"),
    ],
    ids=["synchronous-off", "journal-off", "shared-journal-off", "synchronous-normal"],
)
def test_negative_controls_make_the_crash_sweep_fail(cls: Any, layout: Any) -> None:
    """The crash model has teeth: weakening durability is reported as failures."""
    report = crash_sweep(WORKLOAD, layout=layout, repository_class=cls, stride=2, max_failures=5)
    assert report.failures, report.summary()


@pytest.mark.rule("CRASH-SQL-7", "SQLITE-8")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_sigkill_of_a_writer_process_keeps_every_acknowledged_commit(layout: Any) -> None:
    """A real writer process on a real temp dir is SIGKILLed between or during commits."""
    report = sigkill_sweep(layout=layout, trials=2, seed=5, transactions=300)
    assert_clean(report)


@pytest.mark.rule("CRASH-SQL-1")
def test_simulated_crash_is_a_base_exception_that_escapes_commit(tmp_path: Path) -> None:
    """The crash escapes ``except Exception`` and later calls keep failing."""
    assert not issubclass(SimulatedCrash, Exception)
    SqliteRepository(tmp_path).create("s").close()
    vfs = RecordingVFS("test-crash-escape")
    try:
        repo = SqliteRepository(tmp_path, vfs="test-crash-escape")
        storage = repo.open("s")
        before = len(vfs.calls)
        vfs.plan = FaultPlan(before, "crash")
        with pytest.raises(SimulatedCrash):
            storage.commit([set_value(value("a", "b"), 1)])
        with pytest.raises(SimulatedCrash):
            vfs.call("write", "/nowhere", offset=0, data=b"x")
        repo.abandon()
        vfs.plan = FaultPlan()
        storage.connection.close()
    finally:
        vfs.unregister()


@pytest.mark.rule("CRASH-SQL-2")
def test_disk_model_keeps_synced_data_and_tears_unsynced_writes_at_sectors() -> None:
    """Synced writes are durable; unsynced ones may be kept, dropped or torn by 512-byte
    sector; an unsynced delete may be lost; -shm is never part of an image."""
    path, shm = "/d/x", "/d/x-shm"
    calls = [
        IOCall(0, "write", path, offset=0, data=b"A" * 1024),
        IOCall(1, "sync", path),
        IOCall(2, "write", path, offset=256, data=b"B" * 1024),
        IOCall(3, "write", shm, offset=0, data=b"S" * 10),
        IOCall(4, "delete", "/d/y"),
    ]
    files = disk_model({"/d/y": b"old"}, calls)
    assert files[path].durable == b"A" * 1024 and len(files[path].pending) == 1
    assert files["/d/y"].delete_pending
    images = post_crash_images(files, random.Random(3), 40)
    assert images[0].files == {path: b"A" * 1024, "/d/y": b"old"}
    assert images[1].files[path] == b"A" * 256 + b"B" * 1024
    assert all(shm not in image.files for image in images)
    seen = {image.files[path] for image in images}
    pieces = [(256, SECTOR), (SECTOR, 2 * SECTOR), (2 * SECTOR, 1280)]  # the write's sectors
    for content in seen:
        assert content[:256] == b"A" * 256  # synced data is never lost
        for start, stop in pieces:
            piece = content[start:stop]
            # each sector of the unsynced write is wholly old or wholly new
            assert piece in (
                b"B" * (stop - start),
                b"A" * (stop - start),
                b"\0" * (stop - start),
                b"",
            )
    assert len(seen) > 3  # kept, dropped and several torn variants occur
    assert any("/d/y" not in image.files for image in images)


@pytest.mark.rule("CRASH-SQL-4")
def test_commit_reported_failed_by_checkpoint_io_error_is_acknowledged(tmp_path: Path) -> None:
    """An I/O error in the automatic checkpoint after a durable COMMIT must not turn a
    committed transaction into a reported failure (found by the I/O-error sweep)."""
    SqliteRepository(tmp_path).create("s").close()
    vfs = RecordingVFS("test-ckpt")
    try:
        repo = SqliteRepository(tmp_path, vfs="test-ckpt")
        storage = repo.open("s")
        storage.connection.execute("PRAGMA wal_autocheckpoint=1")
        storage.commit([set_value(value("a", "b"), 1)])
        # fail the first write to the main database file: the checkpoint after the WAL sync
        db_file = str(tmp_path / "s.sqlite")
        vfs.plan = FaultPlan(
            len(vfs.calls), "once", match=lambda c: c.kind == "write" and c.path == db_file
        )
        (committed,) = storage.commit([set_value(value("a", "b"), 2)])
        assert vfs.plan.fired
        record = storage.get_value(value("a", "b"))
        assert record is not None and record.seq == committed.seq
        storage.close()
        repo.close()
    finally:
        vfs.unregister()
    assert os.path.exists(tmp_path / "s.sqlite")
    assert apsw.Connection(str(tmp_path / "s.sqlite")).execute(
        "SELECT next_seq FROM sessions"
    ).fetchone() == (3,)


@pytest.mark.rule("CRASH-SQL-1", "CRASH-SQL-3")
def test_explore_runs_crash_sweeps_over_fresh_workloads_for_a_budget() -> None:
    """The budgeted explorer behind fuzzing finds nothing on the real backend."""
    report = explore(budget=1.0, seed=7, layout="shared")
    assert report.states > 0
    assert report.ok, [str(f) for f in report.failures[:3]]


class DeleteTableByTable(SqliteContainerRepository):
    """Negative control: each table's rows deleted in its own autocommit statement."""

    def delete(self, session_id: str) -> None:
        for table in ("list_values", "scalar_values", "usage_ledger", "entries", "sessions"):
            self.connection.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))


@pytest.mark.rule("SQLITE-12", "CRASH-SQL-3")
def test_crash_during_container_delete_leaves_all_or_nothing() -> None:
    """A crash at any I/O call of deleting a Session with scoped rows leaves it whole or gone
    (never listed after an acknowledged delete, no orphan rows), the other Session intact."""
    assert_clean(delete_crash_sweep(seed=3))


@pytest.mark.rule("CRASH-SQL-6", "SQLITE-12")
def test_delete_crash_sweep_catches_a_non_atomic_delete() -> None:
    report = delete_crash_sweep(seed=3, repository_class=DeleteTableByTable)
    assert report.failures, report.summary()


@pytest.mark.rule("CRASH-SQL-1", "CRASH-SQL-6")
def test_a_crash_failure_carries_a_reproducer_that_replays_the_same_images() -> None:
    """A failure names its fault point, and ``only=k`` redraws exactly the same images."""
    first = crash_sweep(
        WORKLOAD,
        repository_class=SyncOff,
        seed=4,
        max_failures=1,
        workload_label="make_workload(11, transactions=6, big_every=3)",
    )
    failure = first.failures[0]
    assert f"only={failure.fault_at}" in failure.reproducer
    again = crash_sweep(WORKLOAD, repository_class=SyncOff, seed=4, only=failure.fault_at)
    assert again.fault_points == 1
    assert [f.image for f in again.failures] == [
        f.image for f in first.failures if f.fault_at == failure.fault_at
    ]


class AllocationLog:
    """The contract's sequence policy, remembering each Session's latest allocation."""

    def __init__(self) -> None:
        self.latest: dict[str, Allocation] = {}

    def allocate(
        self, session_id: str, next_seq: int, scope_id: str | None, writes: Sequence[Any]
    ) -> Allocation:
        allocation = GLOBAL_SEQUENCE.allocate(session_id, next_seq, scope_id, writes)
        self.latest[session_id] = allocation
        return allocation


class AckFailedCommit(WrappedSession):
    """Planted bug: a commit that failed after its transaction drew its seqs -- in practice its
    COMMIT statement -- is acknowledged with the seqs it drew, without checking that it
    committed (the real backend acknowledges only a COMMIT whose ``next_seq`` is on disk)."""

    def commit(self, writes: Any) -> tuple[Committed, ...]:
        log: AllocationLog = self._shared["log"]
        log.latest.pop(self.session_id, None)
        try:
            committed: tuple[Committed, ...] = self._inner.commit(writes)
        except ScopecheckError:
            allocation = log.latest.get(self.session_id)
            if allocation is None:  # refused or failed before it drew a seq
                raise
            timestamp = self._shared["clock"]()
            return tuple(
                Committed(allocation.first + index, timestamp, write)
                for index, write in enumerate(writes)
            )
        return committed


def ack_failed_commit_repository(target: str, clock: Clock, **settings: Any) -> Any:
    """The real per-file repository with :class:`AckFailedCommit` over its Sessions."""
    log = AllocationLog()
    real = SqliteRepository(target, clock, sequence=log, **settings)
    return WrappedRepository(real, AckFailedCommit, {"log": log, "clock": clock})


@pytest.mark.rule("CRASH-SQL-4")
def test_fuzz_crash_injection_runs_io_faults_and_replays_what_they_catch() -> None:
    """``scopecheck fuzz``'s SQLite explorer also fails single I/O calls without a crash: the
    real backend passes and the runs are counted; a backend acknowledging a failed COMMIT is
    caught only there (its crash states are fine), and the reproducer replays to it."""
    from scopecheck.crash_explorers import SqliteCrashExplorer

    states, faults, records = SqliteCrashExplorer().explore_with_faults(1.0, seed=5)
    assert states > faults > 0 and records == []
    planted = SqliteCrashExplorer(repository=ack_failed_commit_repository, backend="planted")
    assert not crash_sweep(  # its crash states are fine: only the I/O-fault runs can see it
        make_workload(5, transactions=6, big_every=3),
        repository_class=ack_failed_commit_repository,
        variants=2,
        seed=5,
    ).failures
    _, _, records = planted.explore_with_faults(20.0, seed=5)
    assert records and records[0]["sweep"].startswith("io-"), records
    still_failing, text = planted.replay(records[0])
    assert still_failing, text
    real_fails, text = SqliteCrashExplorer().replay(records[0])
    assert not real_fails, text  # the real backend passes the same fault point
