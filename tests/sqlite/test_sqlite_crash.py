"""Crash and I/O-error testing of the SQLite backend through the recording APSW VFS."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw
import pytest

from scopecheck.crashsim.explore import Images, point_images
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.persistence import FileOp, Image, Volume
from scopecheck.crashsim.points import Variant
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
    SECTOR_TEARS,
    FaultPlan,
    RecordingVFS,
    SimulatedCrash,
)
from scopecheck.crashsim.vfs_source import file_ops
from scopecheck.crashsim.workload import make_workload
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, Allocation
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.models.addresses import value
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.protocols import Clock
from scopecheck.models.records import Committed
from scopecheck.models.writes import set_value
from scopecheck.planted.seams import WrappedRepository, WrappedSession

WORKLOAD = make_workload(11, transactions=6, big_every=3)


def assert_clean(report: Any) -> None:
    assert report.fault_points > 0 and report.states > 0
    assert report.ok, "\n".join(str(f) for f in report.failures[:10])


@pytest.mark.rule(
    "CRASH-SQL-1", "CRASH-SQL-2", "CRASH-SQL-3", "CRASH-SQL-8", "SQLITE-8", "CRASH-COV-1",
    "CRASH-COV-2",
)  # fmt: skip
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_crash_at_every_io_call_recovers_a_model_state(layout: Any) -> None:
    """Crash before every mutating operation of the workload (open, commits, checkpoints,
    mid-stream close, final close); every crash image reopens as the model before or after
    the in-flight commit, with every acknowledged commit present, and every crash point and
    acknowledged commit is covered."""
    report = crash_sweep(WORKLOAD, layout=layout, variants=3, seed=1)
    assert report.fault_points >= report.io_calls > 20
    assert report.coverage.complete and report.coverage.acked_total == len(WORKLOAD)
    assert report.coverage.points_checked == report.coverage.points_total == report.fault_points
    assert_clean(report)


@pytest.mark.rule("CRASH-SQL-9", "CRASH-FS-5")
@pytest.mark.parametrize("layout", ["per-file", "shared"])
def test_a_crash_while_recovering_a_crash_image_is_survived(layout: Any) -> None:
    """Images with a WAL to replay have their reopen (open, read, the close's checkpoint)
    recorded through the VFS and crashed -- process crash and power loss -- at its crash
    points: the next open gives the state the uninterrupted recovery gave."""
    report = crash_sweep(WORKLOAD, layout=layout, seed=1, recoveries=6, stride=4)
    assert report.coverage.recovery_states > 20
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


@pytest.mark.rule("CRASH-SQL-4", "CRASH-SYS-11")
def test_a_power_loss_after_an_io_error_is_judged_too() -> None:
    """The fault runs judge the power-loss images of the run, not only the disk it left (the
    one fault checker): with ``synchronous=OFF`` no commit is durable, so a power loss right
    after the faulted run loses acknowledged commits."""
    report = io_error_sweep(WORKLOAD, layout="per-file", repository_class=SyncOff, stride=3)
    assert [f.variant for f in report.failures] == ["power-loss"], report.summary()
    assert report.failures[0].problem.startswith("power loss (")


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
        vfs.plan = FaultPlan()
        storage.connection.close()
    finally:
        vfs.unregister()


def _record_through_the_vfs(root: Path) -> list[Any]:
    """Writes, syncs, a truncate and deletes made through the recording VFS's own methods
    (no SQLite): a database, its WAL (opened with ``SQLITE_OPEN_CREATE``, so its first sync
    also syncs the directory), a journal deleted without and with a directory sync, and
    shared memory."""
    (root / "x.sqlite").write_bytes(b"D" * 1024)
    vfs = RecordingVFS("test-vfs-source")
    rw = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        db = vfs.xOpen(str(root / "x.sqlite"), [apsw.SQLITE_OPEN_MAIN_DB | rw, 0])
        wal = vfs.xOpen(str(root / "x.sqlite-wal"), [apsw.SQLITE_OPEN_WAL | rw, 0])
        wal.xWrite(b"W" * 1500, 0)
        wal.xSync(apsw.SQLITE_SYNC_NORMAL)  # first sync after a create: the directory too
        db.xWrite(b"A" * 1024, 0)
        db.xSync(apsw.SQLITE_SYNC_NORMAL)
        db.xWrite(b"B" * 1024, 256)  # unsynced: may be lost or torn at a sector
        wal.xWrite(b"V" * 700, 1500)
        wal.xSync(apsw.SQLITE_SYNC_NORMAL)  # no directory sync this time
        wal.xTruncate(32)  # unsynced truncate
        shm = vfs.xOpen(str(root / "x.sqlite-shm"), [apsw.SQLITE_OPEN_MAIN_DB | rw, 0])
        shm.xWrite(b"S" * 10, 0)  # shared memory: never part of an image
        shm.xClose()
        journal = vfs.xOpen(str(root / "x.sqlite-journal"), [apsw.SQLITE_OPEN_MAIN_JOURNAL | rw, 0])
        journal.xWrite(b"J" * 512, 0)
        journal.xSync(apsw.SQLITE_SYNC_NORMAL)
        journal.xClose()
        vfs.xDelete(str(root / "x.sqlite-journal"), False)  # the name may come back
        wal.xClose()
        db.xClose()
        return list(vfs.calls)
    finally:
        vfs.unregister()


def _by_hand() -> list[FileOp]:
    """The same operations written as the persistence model's file operations."""
    return [
        FileOp("open", "", handle=0, flags=frozenset({"directory"})),
        FileOp("open", "x.sqlite-wal", handle=2, flags=frozenset({"create"})),
        FileOp("write", "x.sqlite-wal", handle=2, offset=0, data=b"W" * 1500),
        FileOp("sync", "x.sqlite-wal", handle=2),
        FileOp("sync", "", handle=0),
        FileOp("open", "x.sqlite", handle=1),
        FileOp("write", "x.sqlite", handle=1, offset=0, data=b"A" * 1024),
        FileOp("sync", "x.sqlite", handle=1),
        FileOp("write", "x.sqlite", handle=1, offset=256, data=b"B" * 1024),
        FileOp("write", "x.sqlite-wal", handle=2, offset=1500, data=b"V" * 700),
        FileOp("sync", "x.sqlite-wal", handle=2),
        FileOp("truncate", "x.sqlite-wal", handle=2, size=32),
        FileOp("open", "x.sqlite-journal", handle=3, flags=frozenset({"create"})),
        FileOp("write", "x.sqlite-journal", handle=3, offset=0, data=b"J" * 512),
        FileOp("sync", "x.sqlite-journal", handle=3),
        FileOp("sync", "", handle=0),
        FileOp("unlink", "x.sqlite-journal"),
    ]


def _every_image(ops: Sequence[FileOp], base: Image) -> list[list[tuple[Variant, Image]]]:
    """The process crash and every power-loss image (sector tearing) at the end of ``ops``
    and before each of its last operations."""
    found = []
    for cut in range(len(ops) - 6, len(ops) + 1):
        volume = Volume(base)
        for op in ops[:cut]:
            volume.apply(op)
        images = Images(device=SECTOR_TEARS, torn=64, call_cuts_of=None)
        found.append(list(point_images(volume, ops, 0, 0, images)))
    return found


@pytest.mark.rule("CRASH-SQL-2", "CRASH-SYS-1")
def test_the_vfs_trace_and_hand_built_file_ops_give_identical_images(tmp_path: Path) -> None:
    """Every recorder is judged by the same model: writes, syncs, a truncate and deletes
    recorded through the VFS and converted give, at every crash point, the very images the
    same operations built by hand give -- and those are the model's: synced data kept,
    unsynced writes kept, lost or torn at 512-byte sectors, an undurable delete undone, the
    WAL's name durable from its first sync, -shm never there."""
    base = Image({"x.sqlite": b"D" * 1024})
    converted = file_ops(_record_through_the_vfs(tmp_path), str(tmp_path), base.files).ops
    assert all("shm" not in op.path for op in converted)
    assert _every_image(converted, base) == _every_image(_by_hand(), base)
    images = {variant.name: image for variant, image in _every_image(converted, base)[-1]}
    assert images["process"].files == {
        "x.sqlite": b"A" * 256 + b"B" * 1024,
        "x.sqlite-wal": b"W" * 32,
    }
    assert images["strict"].files == {
        "x.sqlite": b"A" * 1024,  # synced data is never lost
        "x.sqlite-wal": b"W" * 1500 + b"V" * 700,  # the unsynced truncate is
        "x.sqlite-journal": b"J" * 512,  # the delete was not made durable
    }
    torn = [name for name in images if name.startswith("torn@512:x.sqlite:")]
    assert torn
    for name in torn:
        content = images[name].files["x.sqlite"]
        end = 256 + int(name.rsplit(":", 1)[1])  # the write kept up to a sector boundary
        assert end % SECTOR == 0
        assert content == b"A" * 256 + b"B" * (end - 256) + b"A" * max(0, 1024 - end)


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


@pytest.mark.rule("CRASH-SQL-1", "CRASH-SQL-3", "CRASH-COV-1", "CRASH-COV-2")
def test_explore_runs_crash_sweeps_over_fresh_workloads_for_a_budget() -> None:
    """The budgeted explorer behind fuzzing finds nothing on the real backend, and even on a
    tiny budget it covers a crash state after every acknowledged commit of its first workload
    before anything else (its first pass runs past the budget)."""
    found = explore(budget=0.05, seed=7, layout="shared")
    assert found.states > 0
    assert not found.failures, [str(f) for f in found.failures[:3]]
    assert found.coverage.complete
    assert found.coverage.acked_total == 6 and found.coverage.points_checked >= 7


@pytest.mark.rule("CRASH-COV-2")
def test_the_sqlite_explorer_exposes_what_it_covered() -> None:
    """``SqliteCrashExplorer.coverage``, read by ``scopecheck validate`` like the syscall
    explorer's, is what the last exploration covered."""
    from scopecheck.backends.crash_explorers import SqliteCrashExplorer

    explorer = SqliteCrashExplorer()
    assert explorer.coverage is None
    states, _, records = explorer.explore_with_faults(0.5, seed=3)
    assert records == [] and explorer.coverage is not None
    assert explorer.coverage.complete and 0 < explorer.coverage.states_checked <= states
    assert "acknowledged steps" in explorer.coverage.describe()


@pytest.mark.rule("CRASH-COV-4", "CRASH-COV-5", "CRASH-SQL-6")
def test_a_failure_does_not_end_the_exploration_and_each_distinct_one_replays() -> None:
    """With synchronous=OFF the explorer keeps going after the first failure: every distinct
    (rule, kind of crash point) failure gets its own record, up to eight, and each record's
    image is rebuilt by its variant's name from the recorded operations and fails again."""
    from scopecheck.backends.crash_explorers import SqliteCrashExplorer

    planted = SqliteCrashExplorer(repository=SyncOff, backend="planted")
    _, _, records = planted.explore_with_faults(3.0, seed=2)
    keys = [CrashFailure.from_json(r).key for r in records]
    assert 1 < len(records) <= 8 and len(set(keys)) == len(keys), keys
    assert all(r["source"] == "sqlite" and r["backend"] == "planted" for r in records)
    assert planted.coverage is not None and planted.coverage.acked_total > 0
    for record in records:
        if record["evidence"] is None:
            continue
        assert record["target"] == {"layout": "per-file", "workload_seed": record["seed"]}
        still_failing, text = planted.replay(record)
        assert still_failing, text
        assert f"image {record['variant']}" in text


@pytest.mark.rule("CRASH-COV-5")
def test_a_reproducer_of_an_older_format_asks_for_a_new_exploration() -> None:
    """A SQLite crash record without format 3 is refused with a usage error saying to rerun
    the exploration, through the explorer and through ``scopecheck replay``'s dispatch."""
    from scopecheck.backends.crash_explorers import SqliteCrashExplorer
    from scopecheck.models.errors import UsageError
    from scopecheck.run.replay import replay_crash

    old = {
        "kind": "crash", "engine": "sqlite", "backend": "sqlite", "layout": "per-file",
        "sweep": "crash", "workload_seed": 1, "op_index": 3, "fault": "process",
        "rule": "CRASH-SQL-3", "error": "lost",
    }  # fmt: skip
    for replay in (SqliteCrashExplorer().replay, replay_crash):
        with pytest.raises(UsageError, match="rerun the exploration") as raised:
            replay(old)
        assert raised.value.code == "invalid_payload"


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


@pytest.mark.rule("CRASH-SQL-1", "CRASH-SQL-6", "CRASH-COV-5")
def test_a_crash_failure_names_the_crash_point_and_image_that_rerun_it() -> None:
    """A failure names its crash point and image: ``only=k`` rebuilds the same images (the
    failure's among them) and ``only=k, variant=v`` that one image, by its name."""
    first = crash_sweep(WORKLOAD, repository_class=SyncOff, seed=4)
    failure = first.failures[0]
    assert failure.source == "sqlite" and failure.run == "crash" and failure.point is not None
    assert failure.target == {"layout": "per-file"} and failure.evidence is not None
    again = crash_sweep(WORKLOAD, repository_class=SyncOff, seed=4, only=failure.point)
    assert again.fault_points == 1
    assert failure.variant in [f.variant for f in again.failures]
    one = crash_sweep(
        WORKLOAD, repository_class=SyncOff, seed=4, only=failure.point, variant=failure.variant
    )
    assert one.states == 1 and one.failures == [failure]


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
    caught only there (its crash states are fine), and the reproducer replays to it.  The
    exploration runs until its budget is spent, failures or not; 5 s is ten times what the
    first failing fault run takes on an idle machine."""
    from scopecheck.backends.crash_explorers import SqliteCrashExplorer

    states, faults, records = SqliteCrashExplorer().explore_with_faults(1.0, seed=5)
    assert states > faults > 0 and records == []
    planted = SqliteCrashExplorer(repository=ack_failed_commit_repository, backend="planted")
    assert not crash_sweep(  # its crash states are fine: only the I/O-fault runs can see it
        make_workload(5, transactions=6, big_every=3),
        repository_class=ack_failed_commit_repository,
        variants=2,
        seed=5,
    ).failures
    _, _, records = planted.explore_with_faults(5.0, seed=5)
    assert records and records[0]["run"] == "fault", records
    assert records[0]["failure_kind"] in ("io-once", "io-persistent")
    assert records[0]["target"]["mode"] == records[0]["failure_kind"].removeprefix("io-")
    still_failing, text = planted.replay(records[0])
    assert still_failing, text
    real_fails, text = SqliteCrashExplorer().replay(records[0])
    assert not real_fails, text  # the real backend passes the same fault point
