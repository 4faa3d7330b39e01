"""Crash and I/O-error sweeps of the SQLite backend through :mod:`scopecheck.crashsim.sqlite_vfs`.

A sweep records one workload (open, commits, a mid-stream close/reopen, close) on one Session
through the recording VFS, converts its I/O calls into the file operations of the one
persistence model (:mod:`scopecheck.crashsim.vfs_source`, :mod:`scopecheck.crashsim.persistence`)
and knows where in them each commit returned (its acknowledgement).  A recorded workload is a
:class:`SqliteRound` of the one exploration loop (:mod:`scopecheck.crashsim.explore`):

* its crash points are checked in coverage order (:func:`~scopecheck.crashsim.explore.check_passes`,
  CRASH-COV-1): before each mutating operation the process crash and the power-loss images of
  a disk tearing writes at 512-byte sectors (CRASH-SQL-1, CRASH-SQL-2), a bounded number per
  point.  Each image is reopened with a plain repository and must equal the expected state
  after the acknowledged commits, or after those plus the one in flight -- never anything
  else (CRASH-SQL-3);
* images that need recovery (a WAL to replay and checkpoint, a hot journal to roll back) have
  their reopen recorded through the VFS and crashed before its mutating calls (CRASH-SQL-9);
* its fault runs fail call *n* with SQLITE_IOERR once or persistently (:func:`io_error_sweep`):
  each failed commit raises ``io_error`` and leaves the open handle at a model state; after the
  faults end a reopen shows every acknowledged commit and any subset of the failed ones
  (CRASH-SQL-4).

:func:`crash_sweep` checks every crash point of one workload, :func:`explore` spends a time
budget on fresh workloads (``scopecheck fuzz``; CRASH-COV-2, CRASH-COV-4);
:func:`recovery_io_sweep` reopens a crash image needing recovery with call *n* failing
(CRASH-SQL-5), :func:`sigkill_sweep` kills a real writer process (CRASH-SQL-7).  Every failure
is a :class:`~scopecheck.crashsim.failure.CrashFailure` of source ``sqlite`` whose ``target``
says how to rerun it (the layout, and for :func:`explore`'s the workload seed and the I/O-fault
mode); a crash-state failure carries the evidence that rebuilds its image by name
(:func:`replay_record`, CRASH-COV-5).  Expected states are replays on an independent
implementation (:mod:`scopecheck.crashsim.workload`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import apsw
import attrs

from scopecheck.crashsim.coverage import CrashCoverage, bit_reversed, crash_points, ordered_passes
from scopecheck.crashsim.explore import (
    MAX_FAILURES,
    OVERRUN,
    Exploration,
    Findings,
    Images,
    Plan,
    check_passes,
    point_images,
)
from scopecheck.crashsim.explore import explore as explore_rounds
from scopecheck.crashsim.failure import (
    BadReproducer,
    CrashFailure,
    Evidence,
    Run,
    acked_before,
    crash_kind,
    profiles_text,
)
from scopecheck.crashsim.fault_check import FaultProblem, FaultRules, fault_images, judge_images
from scopecheck.crashsim.persistence import PROFILES, Device, FileOp, Image, Volume, power_image
from scopecheck.crashsim.points import Variant, parse_variant
from scopecheck.crashsim.recovery import (
    FS_RULES,
    Broken,
    Expected,
    Extra,
    Recovered,
    image_key,
    judge,
)
from scopecheck.crashsim.shards import Shard
from scopecheck.crashsim.sqlite_vfs import (
    SECTOR_TEARS,
    FaultPlan,
    IOCall,
    RecordingVFS,
    SimulatedCrash,
)
from scopecheck.crashsim.vfs_source import file_ops, materialise, read_image
from scopecheck.crashsim.workload import (
    StepClock,
    Transaction,
    expected_snapshot,
    make_workload,
    prefix_snapshots,
)
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.models.errors import ScopecheckError, UsageError
from scopecheck.models.records import Snapshot

Layout = Literal["per-file", "shared"]
IoMode = Literal["once", "persistent"]
#: What the sweeps open repositories with: ``factory(target, clock, vfs=...)``, where ``target``
#: is the root (per-file) or the container file -- a repository class, or a callable setting its
#: keyword arguments (e.g. ``functools.partial(SqliteRepository, synchronous="OFF")``).
RepositoryFactory = Callable[..., Any]
SESSION_ID = "s"
_names = itertools.count()

#: Torn-write images per crash point (besides the process crash and the other power-loss
#: variants): bounded so a point costs a handful of reopens, whatever it has pending.
TORN_IMAGES = 3
#: Images whose recovery :func:`crash_sweep` crashes (the first ones that need a recovery).
RECOVERIES = 3
#: Distinct failures a sweep of one workload keeps (CRASH-COV-4).
SWEEP_FAILURES = 50


@attrs.define
class SweepReport:
    """What one sweep checked and what failed: ``states`` counts the reopened states
    compared, ``fault_points`` the crash points checked or the fault runs made; ``findings``
    keeps the first failure of each rule and kind, up to its limit (CRASH-COV-4)."""

    sweep: str
    layout: str
    io_calls: int = 0
    fault_points: int = 0
    states: int = 0
    findings: Findings = attrs.field(factory=lambda: Findings(SWEEP_FAILURES))
    seconds: float = 0.0
    #: What the crash states covered (CRASH-COV-2).
    coverage: CrashCoverage = attrs.field(factory=CrashCoverage)

    @property
    def failures(self) -> list[CrashFailure]:
        return self.findings.failures

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (
            f"{self.sweep}[{self.layout}]: {self.fault_points} fault points over "
            f"{self.io_calls} I/O calls, {self.states} states, {len(self.failures)} failures, "
            f"{self.states_per_second:.0f} states/s"
        )


@attrs.frozen
class Origin:
    """What a sweep's failures say about their run: the workload as shown
    (``CrashFailure.workload``), the seed its images were sampled with, and the ``target`` a
    rerun needs (``layout``; for :func:`explore`'s workloads ``workload_seed``)."""

    workload: Any
    seed: int
    target: Mapping[str, Any]

    def failure(
        self, rule: str, problem: str, run: Run, kind: str, *, point: int | None = None,
        variant: str = "", recovery: tuple[int, str] | None = None,
        evidence: Evidence | None = None, acked: int | None = None,
        target: Mapping[str, Any] | None = None,
    ) -> CrashFailure:  # fmt: skip
        return CrashFailure(
            source="sqlite", rule=rule, problem=problem, run=run, kind=kind, seed=self.seed,
            workload=self.workload, point=point, variant=variant, recovery=recovery,
            evidence=evidence, target={**self.target, **(target or {})},
            shown={} if acked is None else {"acked": acked},
        )  # fmt: skip


def repository_class_for(layout: Layout) -> RepositoryFactory:
    return SqliteContainerRepository if layout == "shared" else SqliteRepository


def open_repository(
    layout: Layout,
    root: str,
    cls: RepositoryFactory | None,
    clock: StepClock,
    vfs: str | None = None,
) -> Any:
    cls = cls or repository_class_for(layout)
    target = os.path.join(root, "sessions.sqlite") if layout == "shared" else root
    return cls(target, clock, vfs=vfs)


@attrs.define
class RunOutcome:
    calls: list[IOCall]
    acked: list[int]
    failed: list[int]
    crashed: bool
    #: Number of I/O calls issued before the final close began (power-loss point).
    before_close: int | None
    problems: list[str]
    #: For each acknowledged commit, the number of I/O calls issued when it returned.
    acked_calls: list[int] = attrs.field(factory=list)


def scratch_dir() -> str | None:
    """A RAM-backed temp dir when there is one: crash images are simulated, so the scratch
    files need no real disk (``SCOPECHECK_SCRATCH`` overrides)."""
    chosen = os.environ.get("SCOPECHECK_SCRATCH")
    if chosen:
        return chosen
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class SqliteSandbox:
    """Two temp dirs: ``work`` (the recorded run) and ``check`` (reopened images), and
    ``base``, the image of the freshly created Session every run starts from."""

    def __init__(self, layout: Layout, cls: RepositoryFactory | None, *, ram: bool = True) -> None:
        self.layout = layout
        self.cls = cls
        self.top = tempfile.mkdtemp(prefix="scopecheck-crash-", dir=scratch_dir() if ram else None)
        self.work = os.path.join(self.top, "work")
        self.check = os.path.join(self.top, "check")
        os.mkdir(self.work)
        os.mkdir(self.check)
        repo = open_repository(layout, self.work, cls, StepClock())
        repo.create(SESSION_ID).close()
        repo.close()
        self.base = read_image(self.work)

    def restore(self) -> None:
        materialise(self.base, self.work)

    def cleanup(self) -> None:
        shutil.rmtree(self.top, ignore_errors=True)


@contextlib.contextmanager
def _vfs(count_reads: bool = False) -> Iterator[RecordingVFS]:
    vfs = RecordingVFS(f"crashsim-{os.getpid()}-{next(_names)}", count_reads=count_reads)
    try:
        yield vfs
    finally:
        vfs.unregister()


def _close_quietly(conn: apsw.Connection) -> None:
    with contextlib.suppress(BaseException):
        conn.close()


def run_workload(
    box: SqliteSandbox,
    vfs: RecordingVFS,
    workload: Sequence[Transaction],
    plan: FaultPlan,
    *,
    autocheckpoint: int = 8,
    restart_at: int | None = None,
    check_handle: bool = False,
) -> RunOutcome:
    """Run ``workload`` from the base files with ``plan`` armed; never raises."""
    box.restore()
    vfs.reset(plan)
    clock = StepClock()
    acked: list[int] = []
    acked_calls: list[int] = []
    failed: list[int] = []
    problems: list[str] = []
    connections: list[apsw.Connection] = []
    crashed = False
    before_close: int | None = None
    repo: Any = None
    storage: Any = None

    def open_storage() -> Any:
        opened = repo.open(SESSION_ID)
        connections.append(opened.connection)
        with contextlib.suppress(apsw.Error):
            opened.connection.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
        return opened

    try:
        repo = open_repository(box.layout, box.work, box.cls, clock, vfs.vfs_name)
        if hasattr(repo, "connection"):
            connections.append(repo.connection)
        storage = open_storage()
        for index, writes in enumerate(workload):
            clock.at(index)
            try:
                storage.commit(writes)
            except ScopecheckError as exc:
                if exc.code in ("unknown_reference", "duplicate_id") and failed:
                    continue  # depends on an earlier failed commit: rightly rejected
                if exc.code not in ("io_error", "corrupt"):
                    problems.append(f"commit {index} failed with unexpected code {exc.code}")
                failed.append(index)
                if check_handle:
                    _check_handle(storage, workload, acked, index, problems)
                continue
            acked.append(index)
            acked_calls.append(vfs.next_index)
            if restart_at is not None and index == restart_at:
                storage.close()
                storage = open_storage()
        before_close = vfs.next_index
        storage.close()
        repo.close()
    except SimulatedCrash:
        crashed = True
    except ScopecheckError as exc:
        if exc.code not in ("io_error", "corrupt", "locked"):
            problems.append(f"unexpected {exc.code} outside a commit: {exc}")
    except Exception as exc:  # an uncoded error is a finding, never the sweep's end
        problems.append(f"uncoded {type(exc).__name__}: {exc}")
    finally:
        # Whatever happened, close every connection the run opened, as the death of the
        # process would: the repository and its handles are dropped unclosed (a close could
        # write).  With a crash plan armed nothing more reaches the disk (every call fails).
        for conn in connections:
            _close_quietly(conn)
    return RunOutcome(list(vfs.calls), acked, failed, crashed, before_close, problems, acked_calls)


def _check_handle(
    storage: Any,
    workload: Sequence[Transaction],
    acked: Sequence[int],
    index: int,
    problems: list[str],
) -> None:
    """After a failed commit the same handle reads a model state (acknowledged commits only)."""
    try:
        seen = storage.snapshot()
    except ScopecheckError:
        return  # reads may fail too while the disk is failing
    if seen != expected_snapshot(workload, acked):
        problems.append(f"after failed commit {index} the open handle shows a non-model state")


#: ``check(storage, prefix)``: extra invariants of a reopened state taken as the model after the
#: first ``prefix`` transactions (the lifecycle's, :mod:`scopecheck.crashsim.lifecycle`); problems
#: or ``[]``.
Invariants = Callable[[Any, int], list[str]]


class _Unflushed:
    """A repository over a checked copy of an image, whose close skips the checkpoint a last
    close would run: the copy is thrown away."""

    def __init__(self, repo: Any) -> None:
        self.repo = repo
        if hasattr(repo, "connection"):
            repo.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)

    def list(self) -> list[str]:
        found: list[str] = self.repo.list()
        return found

    def open(self, session_id: str) -> Any:
        storage = self.repo.open(session_id)
        storage.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        return storage

    def close(self) -> None:
        self.repo.close()


def _reopen_snapshot(
    box: SqliteSandbox, root: str, inspect: Callable[[Any, Snapshot], str | None] | None = None
) -> tuple[Snapshot | None, str | None]:
    """Reopen ``root`` with a plain repository (default VFS, the real durability settings);
    ``inspect`` looks at the open storage and its snapshot before it is closed."""
    try:
        repo = _Unflushed(open_repository(box.layout, root, None, StepClock()))
    except ScopecheckError as exc:
        return None, f"repository open failed: {exc}"
    try:
        storage = repo.open(SESSION_ID)
        snap = storage.snapshot()
        try:
            finding = None if inspect is None else inspect(storage, snap)
        except ScopecheckError as exc:
            finding = f"reads of the reopened state failed: {exc}"
        storage.close()
        return snap, finding
    except ScopecheckError as exc:
        return None, f"session open failed: {exc}"
    except Exception as exc:  # an uncoded error is a finding too
        return None, f"uncoded {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(ScopecheckError):
            repo.close()


# -- crash states -----------------------------------------------------------------------------


class FaultFreeRunFailed(AssertionError):
    """The workload failed with no fault injected: there is no trace to crash."""


@attrs.frozen
class Recording:
    """One fault-free run of a workload as file operations: ``acked_at[i]`` is where commit
    ``i`` returned among ``ops`` (``None``: it was not acknowledged), ``before_close`` where
    the final close began."""

    ops: tuple[FileOp, ...]
    base: Image
    acked_at: tuple[int | None, ...]
    before_close: int
    io_calls: int

    def acked(self, k: int) -> int:
        """The commits acknowledged before a crash at point ``k`` (a prefix: the run had no
        fault)."""
        return acked_before(self.acked_at, k)

    def evidence(self, recovery_ops: tuple[FileOp, ...] = ()) -> Evidence:
        return Evidence(self.ops, self.base, self.acked_at, recovery_ops)


def record_workload(
    box: SqliteSandbox,
    workload: Sequence[Transaction],
    *,
    autocheckpoint: int = 8,
    restart_at: int | None = None,
) -> Recording:
    """Run ``workload`` once through the recording VFS and convert its I/O calls."""
    with _vfs() as vfs:
        clean = run_workload(
            box, vfs, workload, FaultPlan(), autocheckpoint=autocheckpoint, restart_at=restart_at
        )
    if clean.problems or clean.crashed or len(clean.acked) != len(workload):
        raise FaultFreeRunFailed(f"fault-free run failed: {clean.problems}")
    assert clean.before_close is not None
    converted = file_ops(clean.calls, box.work, box.base.files)
    acked_at = tuple(converted.at[n] for n in clean.acked_calls)
    return Recording(
        converted.ops, box.base, acked_at, converted.at[clean.before_close], len(clean.calls)
    )


def needs_recovery(image: Image) -> bool:
    """A WAL with frames to replay, or a rollback journal that may be hot: the reopen of such
    an image writes (a checkpoint, a rollback), so a crash can hit it."""
    return any(
        (name.endswith("-wal") and len(data) > 32) or (name.endswith("-journal") and data)
        for name, data in image.files.items()
    )


def judge_image(
    box: SqliteSandbox,
    image: Image,
    candidates: Sequence[Snapshot],
    invariants: Invariants | None = None,
    prefixes: Sequence[int] = (),
    history: Sequence[Snapshot] | None = None,
) -> tuple[Snapshot | None, str | None]:
    """Reopen ``image`` with a plain repository (default VFS, the real durability settings)
    and judge it with the one recovery checker (:func:`~scopecheck.crashsim.recovery.judge`,
    state only: CRASH-SQL-3): its state must be one of ``candidates`` (the model after
    ``prefixes[i]`` transactions) and, with ``invariants``, satisfy them for at least one
    candidate prefix -- checked on every image, model state or not, so a broken invariant is
    reported in its own words.  With ``history`` (the model after each number of
    transactions) a wrong state says which acknowledged commits it lost.  The reopened state
    and the problem, if any."""

    def broken_invariants(storage: Any) -> str:
        if invariants is None:
            return ""
        found: list[str] = []
        for prefix in prefixes:
            try:
                problems = invariants(storage, prefix)
            except ScopecheckError as exc:
                problems = [f"reads of the reopened state failed: {exc}"]
            if not problems:
                return ""
            found.append(f"as {prefix} transactions: " + "; ".join(problems))
        return "lifecycle invariants broken — " + " | ".join(found)

    def recovered(storage: Any, state: Snapshot, matched: int) -> Broken | None:
        text = broken_invariants(storage)
        return Broken("CRASH-SQL-3", text, state) if text else None

    def mismatched(storage: Any, state: Snapshot | None) -> str:
        text = broken_invariants(storage)
        return f"; {text}" if text else ""

    expected = (
        Expected(candidates, (), (), tuple(range(len(candidates))))
        if history is None
        else Expected(history, (), ("commit",) * len(history), tuple(prefixes))
    )
    materialise(image, box.check)
    verdict = judge(
        lambda: _Unflushed(open_repository(box.layout, box.check, None, StepClock())),
        expected,
        session=SESSION_ID, probe=None, extra=Extra(recovered=recovered, mismatched=mismatched),
        rules=SQL_RULES,
    )  # fmt: skip
    if isinstance(verdict, Recovered):
        return verdict.state, None
    state = verdict.recovered
    return (state if isinstance(state, Snapshot) else None), verdict.problem


#: Every check of the recovery checker enforces CRASH-SQL-3 here: the reopened Session is a
#: model state, whole transactions only, every acknowledged one present.
SQL_RULES = dict.fromkeys(FS_RULES, "CRASH-SQL-3")


def record_recovery(box: SqliteSandbox, image: Image) -> tuple[FileOp, ...] | None:
    """The file operations of the repository under test reopening ``image`` -- open, read
    the Session, close (the close checkpoints a WAL) -- recorded through the VFS over a copy of
    it; ``None`` when that reopen fails with a coded error."""
    materialise(image, box.check)
    connections: list[apsw.Connection] = []
    repo: Any = None
    with _vfs() as vfs:
        try:
            repo = open_repository(box.layout, box.check, box.cls, StepClock(), vfs.vfs_name)
            if hasattr(repo, "connection"):
                connections.append(repo.connection)
            storage = repo.open(SESSION_ID)
            connections.append(storage.connection)
            storage.snapshot()
            storage.close()
            repo.close()
        except ScopecheckError:
            return None
        finally:
            for conn in connections:
                _close_quietly(conn)
        calls = list(vfs.calls)
    return file_ops(calls, box.check, image.files).ops


def _before(ops: Sequence[FileOp], k: int, what: str) -> str:
    if k >= len(ops):
        return f"at the end of the {what} ({len(ops)} operations)"
    return f"before {what} operation {k} of {len(ops)}: {ops[k].describe()}"


class SqliteRound:
    """One recorded workload of the SQLite backend as a round of the exploration loop
    (:mod:`scopecheck.crashsim.explore`).  Its images are the persistence model's on
    ``device`` (512-byte sector tears, CRASH-SQL-2), at most ``torn`` torn writes a point; each
    is reopened with a plain repository and must be the model after the acknowledged commits
    or after the one in flight too, and satisfy ``invariants`` (CRASH-SQL-3).  The recovery of
    an image that needs one is recorded with the repository under test and crashed
    (CRASH-SQL-9), for at most ``recoveries`` images (``None``: as many as time allows).  Its
    fault runs fail one I/O call ``mode`` (:func:`io_error_sweep`, CRASH-SQL-4)."""

    def __init__(
        self, box: SqliteSandbox, rec: Recording, workload: Sequence[Transaction], origin: Origin,
        *, torn: int = TORN_IMAGES, device: Device = SECTOR_TEARS,
        invariants: Invariants | None = None, recoveries: int | None = None,
        mode: IoMode = "once",
    ) -> None:  # fmt: skip
        self.box = box
        self.rec = rec
        self.workload = workload
        self.origin = origin
        self.ops = rec.ops
        self.acked_at = rec.acked_at
        self.base = rec.base
        self.seed = origin.seed
        self.expected = prefix_snapshots(workload)
        self.device = device
        self.invariants = invariants
        self.recoveries = recoveries
        self.mode = mode
        self.states = 0
        self.recovery_states = 0
        self._images = Images(device=device, torn=torn, call_cuts_of=None)
        #: The last image judged a model state, and what it reopened as.
        self._last: tuple[int, Variant, Snapshot] | None = None
        #: What each image whose recovery is crashed reopened as: the state every crash of
        #: that recovery must still give.
        self._recovered: dict[tuple[int, Variant], Snapshot] = {}
        self._recorded = 0
        #: What the images that passed reopened as, by image and acknowledged commits (see
        #: :meth:`check`); and, by image, what files left by crashes of recoveries reopened
        #: as (see :meth:`check_recovery`).
        self._passed: dict[tuple[Any, int], Snapshot | None] = {}
        self._opened: dict[Any, list[Snapshot]] = {}

    def images(
        self, volume: Volume, ops: Sequence[FileOp], k: int
    ) -> Iterable[tuple[Variant, Image]]:
        return point_images(volume, ops, k, self.seed, self._images)

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | None:
        """Judge one image of crash point ``k`` (CRASH-SQL-3).  Crash points often give an
        image an earlier point with as many acknowledged commits gave (a crash before a sync
        and after it leave the same files): its judgement -- the same reopen of the same
        files against the same model states and invariants -- is the one made already, so an
        image that passed is not reopened again; it counts as a state again and is offered
        again for a crash during its recovery.  A failed image is always judged again (each
        crash point reports its own)."""
        acked = self.rec.acked(k)
        key = (image_key(image), acked)
        self._last = None
        if key in self._passed:
            self.states += 1
            snap = self._passed[key]
            if snap is not None:
                self._last = (k, variant, snap)
            return None
        prefixes = [acked] + ([acked + 1] if acked < len(self.workload) else [])
        allowed = [self.expected[p] for p in prefixes]
        snap, problem = judge_image(
            self.box, image, allowed, self.invariants, prefixes, history=self.expected
        )
        self.states += 1
        if problem is not None:
            return self.origin.failure(
                "CRASH-SQL-3", problem, "crash", crash_kind(variant), point=k, variant=variant.name,
                evidence=self.rec.evidence(), acked=acked,
            )  # fmt: skip
        self._passed[key] = snap
        if snap is not None:
            self._last = (k, variant, snap)
        return None

    def recovers(self, variant: Variant, image: Image) -> bool:
        last = self._last
        if last is None or last[1] != variant or self.recoveries == 0:
            return False
        if not needs_recovery(image):
            return False
        self._recovered[(last[0], variant)] = last[2]
        return True

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        """The recovery of ``image``, recorded.  Only a recovery that writes data (a
        checkpoint, a rollback) counts against ``recoveries``: one that only deletes a WAL
        without valid frames has no crash state besides the image itself."""
        if self.recoveries is not None and self._recorded >= self.recoveries:
            return None
        rops = record_recovery(self.box, image)
        if rops is not None and any(op.kind in ("write", "truncate") for op in rops):
            self._recorded += 1
        return rops

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | None:  # fmt: skip
        """Judge ``image``, left by a crash of the recovery of image ``(k, variant)``: it must
        reopen as that recovery did (CRASH-SQL-9).  Files an earlier crash of a recovery left
        and that reopened as the same state are answered by that reopen (the recoveries of two
        crash points that gave the same image are the same)."""
        want = self._recovered[(k, variant)]
        key = image_key(image)
        self.states += 1
        self.recovery_states += 1
        if want in self._opened.get(key, ()):
            return None
        _, problem = judge_image(self.box, image, [want])
        if problem is None:
            self._opened.setdefault(key, []).append(want)
            return None
        return self.origin.failure(
            "CRASH-SQL-9",
            f"a crash while the backend recovered that image ({during}, "
            f"{_before(recovery_ops, j, 'recovery')}) is not survived: {problem}",
            "recovery", crash_kind(variant, (j, during)), point=k, variant=variant.name,
            recovery=(j, during.name), evidence=self.rec.evidence(tuple(recovery_ops)),
            acked=self.rec.acked(k),
        )  # fmt: skip

    def check_image(
        self, k: int, variant: Variant, recovery: tuple[int, Variant] | None = None,
        recovery_ops: Sequence[FileOp] | None = None, profile: str = "posix",
    ) -> CrashFailure | None:  # fmt: skip
        """Judge the one image ``variant`` of crash point ``k``, rebuilt by its name under the
        file-system ``profile`` (:func:`power_image`, CRASH-SYS-14), and with ``recovery=(j,
        during)`` the image ``during`` of a crash before op ``j`` of its recovery --
        ``recovery_ops``, or the recovery recorded again (CRASH-COV-5)."""
        image = power_image(
            self.ops, k, variant, device=self.device, start=self.base, profile=profile
        )
        failure = self.check(k, variant, image)
        if failure is not None or recovery is None or self._last is None:
            return failure
        self._recovered[(k, variant)] = self._last[2]
        rops = record_recovery(self.box, image) if recovery_ops is None else recovery_ops
        if not rops:
            return None
        j, during = recovery
        crashed = power_image(rops, j, during, device=self.device, start=image)
        return self.check_recovery(k, variant, rops, j, during, crashed)

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        return _io_faults(
            self.box, self.workload, self.rec.io_calls, self.mode, findings, self.origin,
            until=deadline, at_least=at_least, spread=True, start=start, limit=limit,
        )  # fmt: skip

    @property
    def fault_plan_size(self) -> int:
        """One run per recorded I/O call (:func:`_io_faults`)."""
        return self.rec.io_calls


def _strided(passes: list[list[int]], stride: int) -> list[list[int]]:
    """Every crash point after an acknowledgement, and every ``stride``-th of the rest."""
    if stride <= 1:
        return passes
    kept = [passes[0]] + [p[::stride] for p in passes[1:]]
    return [p for p in kept if p]


def crash_sweep(
    workload: Sequence[Transaction],
    *,
    layout: Layout = "per-file",
    repository_class: RepositoryFactory | None = None,
    variants: int = TORN_IMAGES,
    seed: int = 0,
    stride: int = 1,
    autocheckpoint: int = 8,
    max_failures: int = SWEEP_FAILURES,
    crashes: bool = True,
    only: int | None = None,
    variant: str | None = None,
    recovery: tuple[int, str] | None = None,
    recoveries: int = RECOVERIES,
    device: Device = SECTOR_TEARS,
    invariants: Invariants | None = None,
    sweep_name: str | None = None,
    shown_as: Any = None,
) -> SweepReport:
    """Crash before every mutating operation of the recorded workload (CRASH-SQL-1..3) in
    coverage order (CRASH-COV-1), ``stride`` thinning the points that follow no
    acknowledgement; ``variants`` torn-write images per point besides the process crash and
    the other power-loss images; the recovery of ``recoveries`` images that need one is
    crashed (CRASH-SQL-9).  ``crashes=False`` checks only the power loss after the last
    acknowledged commit and after the close.  ``only=k`` checks the one crash point *k*
    (``variant=`` one of its images, ``recovery=(j, variant)`` one crash of that image's
    recovery): a failure's ``point``, ``variant`` and ``recovery`` rerun it.  ``shown_as`` is
    the workload as its failures show it (default: its length)."""
    report = SweepReport(
        sweep_name or ("crash" if crashes else "power-loss"), layout,
        findings=Findings(max_failures),
    )  # fmt: skip
    started = time.perf_counter()
    box = SqliteSandbox(layout, repository_class)
    try:
        rec = record_workload(
            box, workload, autocheckpoint=autocheckpoint, restart_at=len(workload) // 2
        )
        report.io_calls = rec.io_calls
        origin = Origin(
            {"transactions": len(workload)} if shown_as is None else shown_as, seed,
            {"layout": layout},
        )  # fmt: skip
        rnd = SqliteRound(
            box, rec, workload, origin, torn=variants, device=device, invariants=invariants,
            recoveries=recoveries if crashes and only is None else 0,
        )  # fmt: skip
        if variant is not None:
            if only is None:
                raise ValueError("variant= names an image of the crash point only=")
            during = None if recovery is None else (recovery[0], parse_variant(recovery[1]))
            found = rnd.check_image(only, parse_variant(variant), during)
            if found is not None:
                report.findings.add(found)
            report.fault_points = 1
        else:
            if only is not None:
                passes = [[only]]
            elif not crashes:
                passes = [sorted({rec.before_close, len(rec.ops)})]
            else:
                passes = _strided(ordered_passes(rec.ops, rec.acked_at), stride)
            report.coverage = check_passes(
                rnd, report.findings, until=math.inf, first=True, passes=passes,
                profiles=PROFILES,
            )  # fmt: skip
            report.fault_points = report.coverage.points_checked
        report.states = rnd.states
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def lifecycle_crash_sweep(
    size: Literal["short", "long"] = "short",
    *,
    layout: Layout = "per-file",
    repository_class: RepositoryFactory | None = None,
    variants: int = TORN_IMAGES,
    seed: int = 0,
    stride: int = 1,
    autocheckpoint: int = 8,
    max_failures: int = SWEEP_FAILURES,
    crashes: bool = True,
    only: int | None = None,
    variant: str | None = None,
    harness: Any = None,
) -> SweepReport:
    """Power loss at every I/O step of an operation lifecycle (OP-19..OP-21): the program of
    :func:`scopecheck.crashsim.lifecycle.lifecycle_program` (two lanes: frames, tool batches,
    checkpoints with memos, settlement, outcomes, cancellation, terminal cleanup with retirement, a
    later operation) crashed before every ``stride``-th mutating operation, every crash image
    reopened and checked as an acknowledged prefix (:func:`crash_sweep`) and against the
    lifecycle invariants (:func:`scopecheck.crashsim.lifecycle.lifecycle_problems`)."""
    from scopecheck.crashsim.lifecycle import lifecycle_checker, lifecycle_program

    program = lifecycle_program(size) if harness is None else lifecycle_program(size, harness)
    return crash_sweep(
        program.workload,
        layout=layout,
        repository_class=repository_class,
        variants=variants,
        seed=seed,
        stride=stride,
        autocheckpoint=autocheckpoint,
        max_failures=max_failures,
        crashes=crashes,
        only=only,
        variant=variant,
        invariants=lifecycle_checker(program),
        sweep_name="lifecycle-crash" if crashes else "lifecycle-power-loss",
        shown_as={"lifecycle": size, "transactions": len(program.workload)},
    )


# -- single I/O faults ------------------------------------------------------------------------


def io_error_sweep(
    workload: Sequence[Transaction],
    *,
    layout: Layout = "per-file",
    mode: IoMode = "once",
    repository_class: RepositoryFactory | None = None,
    stride: int = 1,
    autocheckpoint: int = 8,
    only: int | None = None,
    until: float | None = None,
    at_least: int = 0,
    spread: bool = False,
    origin: Origin | None = None,
) -> SweepReport:
    """Fail the n-th I/O call once or persistently; commits fail cleanly (CRASH-SQL-4).
    ``only=n`` checks just that fault point (a failure's ``point``: a replay); ``until`` stops
    at that time (after ``at_least`` fault points), ``spread`` takes the calls spread over the
    trace rather than in order, so a stop leaves none of it untried by much."""
    report = SweepReport(f"io-{mode}", layout)
    started = time.perf_counter()
    box = SqliteSandbox(layout, repository_class)
    try:
        with _vfs() as vfs:
            clean = run_workload(
                box, vfs, workload, FaultPlan(), autocheckpoint=autocheckpoint,
                restart_at=len(workload) // 2,
            )  # fmt: skip
        report.io_calls = len(clean.calls)
        runs = _io_faults(
            box, workload, report.io_calls, mode, report.findings,
            origin or Origin({"transactions": len(workload)}, 0, {"layout": layout}),
            stride=stride, only=only, until=until, at_least=at_least, spread=spread,
            autocheckpoint=autocheckpoint,
        )  # fmt: skip
        report.fault_points = report.states = runs
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _io_faults(
    box: SqliteSandbox,
    workload: Sequence[Transaction],
    calls: int,
    mode: IoMode,
    findings: Findings,
    origin: Origin,
    *,
    stride: int = 1,
    only: int | None = None,
    until: float | None = None,
    at_least: int = 0,
    spread: bool = False,
    start: int = 0,
    limit: int | None = None,
    autocheckpoint: int = 8,
) -> int:
    """Run ``workload`` once per I/O call of its ``calls`` (every ``stride``-th, bit-reversed
    with ``spread``, from the ``start``-th, at most ``limit``) with that call failing
    ``mode``, and reopen after each run (CRASH-SQL-4); failures go to ``findings``, keyed by
    the mode.  The runs made."""
    points = list(range(0, calls, stride)) if only is None else [only]
    if spread:
        points = [points[i] for i in bit_reversed(len(points))]
    points = points[start:] if limit is None else points[start : start + limit]
    target = {"mode": mode}
    runs = 0
    with _vfs() as vfs:
        for n in points:
            if findings.full:
                break
            if until is not None and time.perf_counter() >= until and runs >= at_least:
                break
            outcome = run_workload(
                box, vfs, workload, FaultPlan(n, mode), autocheckpoint=autocheckpoint,
                restart_at=len(workload) // 2, check_handle=True,
            )  # fmt: skip
            runs += 1
            acked = len(outcome.acked)
            for seen in outcome.problems:
                findings.add(origin.failure(
                    "CRASH-SQL-4", seen, "fault", f"io-{mode}", point=n, variant="in-process",
                    acked=acked, target=target,
                ))  # fmt: skip
            # The faults are over: the disk as the run left it, and a power loss right then,
            # reopen to the acknowledged commits (the one fault checker, CRASH-SYS-11).
            found = _judge_fault_run(box, workload, outcome, f"io-{mode} at call {n}")
            if found is not None:
                findings.add(origin.failure(
                    "CRASH-SQL-4", found.problem, "fault", f"io-{mode}", point=n,
                    variant="power-loss" if found.power_loss else "reopen", acked=acked,
                    target=target,
                ))  # fmt: skip
    return runs


def _judge_fault_run(
    box: SqliteSandbox, workload: Sequence[Transaction], outcome: RunOutcome, what: str
) -> FaultProblem | None:
    """The disk a fault run left in ``box.work``, and the power-loss images of its
    operations (on :data:`SECTOR_TEARS`), each reopened with a plain repository from a copy:
    every acknowledged commit, and of the failed ones any subset (:func:`_io_candidates`).
    """
    ops = file_ops(outcome.calls, box.work, box.base.files).ops
    images = fault_images(
        read_image(box.work), ops, initial=box.base, seed=what, device=SECTOR_TEARS,
        disk_label="the disk",
    )  # fmt: skip

    def reopen(image: Image) -> Snapshot | str | None:
        materialise(image, box.check)
        snap, problem = _reopen_snapshot(box, box.check)
        return snap if problem is None else problem

    return judge_images(
        reopen, images, _io_candidates(workload, outcome),
        FaultRules.one("CRASH-SQL-4"), f"the run with {what}",
        errors=(),
    )  # fmt: skip


def _io_candidates(workload: Sequence[Transaction], outcome: RunOutcome) -> list[Snapshot]:
    """Every acknowledged commit, plus any subset (up to two) of the failed ones: a commit
    whose WAL sync failed may still be found by recovery, and that is allowed because it was
    never acknowledged; a partial one never is."""
    failed = outcome.failed
    subsets: list[tuple[int, ...]] = [()]
    subsets += [(f,) for f in failed]
    subsets += list(itertools.combinations(failed, 2)) if len(failed) <= 6 else []
    return [expected_snapshot(workload, sorted(outcome.acked + list(s))) for s in subsets]


def recovery_io_sweep(
    workload: Sequence[Transaction],
    *,
    layout: Layout = "per-file",
    mode: IoMode = "once",
    stride: int = 1,
) -> SweepReport:
    """Reopen a crash image whose WAL needs recovery with the n-th call (reads included)
    failing; a clean reopen afterwards must show every commit (CRASH-SQL-5).  The image is
    the process crash just before the final close: every commit in the WAL, none
    checkpointed since the last automatic checkpoint (there is none: ``autocheckpoint=0``)."""
    report = SweepReport(f"recovery-{mode}", layout)
    started = time.perf_counter()
    expected = prefix_snapshots(workload)
    origin = Origin({"transactions": len(workload)}, 0, {"layout": layout, "mode": mode})
    box = SqliteSandbox(layout, None)
    try:
        rec = record_workload(box, workload, autocheckpoint=0)
        image = power_image(rec.ops, rec.before_close, "process", start=rec.base)
        with _vfs(count_reads=True) as vfs:
            materialise(image, box.check)
            vfs.reset()
            report.io_calls = len(_attempt_open(box, vfs, expected[-1], report, origin, None))
            for n in range(0, report.io_calls, stride):
                materialise(image, box.check)
                vfs.reset(FaultPlan(n, mode))
                calls = _attempt_open(box, vfs, expected[-1], report, origin, n)
                report.fault_points += 1
                vfs.reset()
                # What the failed recovery left, and a power loss right after it, reopen
                # cleanly to every commit (the one fault checker).
                images = fault_images(
                    read_image(box.check), file_ops(calls, box.check, image.files).ops,
                    initial=image, seed=f"recovery:{n}", device=SECTOR_TEARS,
                    disk_label="a clean reopen",
                )  # fmt: skip
                report.states += len(images)

                def reopen(found: Image) -> Snapshot | str | None:
                    materialise(found, box.check)
                    snap, problem = _reopen_snapshot(box, box.check)
                    return snap if problem is None else problem

                found = judge_images(
                    reopen, images, [expected[-1]], FaultRules.one("CRASH-SQL-5"),
                    f"a recovery that failed at I/O call {n} ({mode})", errors=(),
                )  # fmt: skip
                if found is not None:
                    report.findings.add(origin.failure(
                        "CRASH-SQL-5", found.problem, "fault", "clean-reopen", point=n,
                        variant="power-loss" if found.power_loss else "clean-reopen",
                        acked=len(workload),
                    ))  # fmt: skip
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _attempt_open(
    box: SqliteSandbox,
    vfs: RecordingVFS,
    want: Snapshot,
    report: SweepReport,
    origin: Origin,
    n: int | None,
) -> list[IOCall]:
    """Open, read and close through the faulty VFS: a stable error or the right state.
    Returns the I/O calls issued."""
    connections: list[apsw.Connection] = []
    repo: Any = None
    issued: list[IOCall] = []
    try:
        repo = open_repository(box.layout, box.check, None, StepClock(), vfs.vfs_name)
        storage = repo.open(SESSION_ID)
        connections.append(storage.connection)
        snap = storage.snapshot()
        report.states += 1
        if snap != want:
            report.findings.add(origin.failure(
                "CRASH-SQL-5", "wrong state read", "fault", "faulty-reopen", point=n,
                variant="faulty-reopen",
            ))  # fmt: skip
        storage.close()
        repo.close()
    except ScopecheckError:
        pass  # a clean, coded failure is allowed while the disk fails
    finally:
        issued = list(vfs.calls)
        if repo is not None and hasattr(repo, "connection"):
            connections.append(repo.connection)
        vfs.reset()
        for conn in connections:
            _close_quietly(conn)
    return issued


def sigkill_sweep(
    *,
    layout: Layout = "per-file",
    trials: int = 4,
    seed: int = 0,
    transactions: int = 400,
    python: str | None = None,
) -> SweepReport:
    """Kill a real writer process with SIGKILL at random moments (CRASH-SQL-7).

    Each trial starts ``scopecheck.crashsim.sqlite_writer`` on a fresh Session in a real temp
    directory, waits for a random number of acknowledged commits, kills it, reopens and checks that
    the state is the model after the acknowledged commits or after one more (the one in flight).
    """
    import signal
    import subprocess
    import sys

    report = SweepReport("sigkill", layout)
    started = time.perf_counter()
    workload = make_workload(seed, transactions, big_every=5)
    expected = prefix_snapshots(workload)
    rng = random.Random(seed)
    origin = Origin({"transactions": transactions}, seed, {"layout": layout})
    for trial in range(trials):
        box = SqliteSandbox(layout, None, ram=False)  # a real disk directory
        try:
            env = dict(os.environ)
            proc = subprocess.Popen(
                [
                    python or sys.executable,
                    "-m",
                    "scopecheck.crashsim.sqlite_writer",
                    layout,
                    box.work,
                    str(seed),
                    str(transactions),
                ],
                stdout=subprocess.PIPE,
                cwd=box.work,
                env=env,
                text=True,
            )
            assert proc.stdout is not None
            target = rng.randint(1, transactions - 1)
            acked = 0
            line = proc.stdout.readline()
            while line:
                if line.strip().isdigit():
                    acked = int(line) + 1
                    if acked >= target:
                        break
                line = proc.stdout.readline()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # Acknowledgements written before the kill but not yet read still count.
            for rest in proc.stdout.read().split():
                if rest.isdigit():
                    acked = int(rest) + 1
            proc.stdout.close()
            report.fault_points += 1
            candidates = [expected[acked]] + ([expected[acked + 1]] if acked < transactions else [])
            snap, problem = _reopen_snapshot(box, box.work)
            report.states += 1
            if problem is None and snap not in candidates:
                problem = "state after SIGKILL is not the model before/after the in-flight commit"
            if problem is not None:
                report.findings.add(origin.failure(
                    "CRASH-SQL-7", problem, "kill", "sigkill", point=trial,
                    variant=f"trial {trial}", acked=acked,
                ))  # fmt: skip
        finally:
            box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


# -- the budgeted exploration behind ``scopecheck fuzz`` ------------------------------------------

#: The share of what is left of the budget that a round's crash states get (the rest: its
#: I/O-fault runs, then the next rounds).
STATE_SHARE = 0.5
#: The workloads :func:`explore` generates (and a replay rebuilds from the seed).
EXPLORE_TRANSACTIONS = 6
EXPLORE_BIG_EVERY = 3


def explore_workload(workload_seed: int) -> list[Transaction]:
    return make_workload(
        workload_seed, transactions=EXPLORE_TRANSACTIONS, big_every=EXPLORE_BIG_EVERY
    )


def _explore_origin(layout: Layout, workload_seed: int) -> Origin:
    shown = {
        "seed": workload_seed,
        "transactions": EXPLORE_TRANSACTIONS,
        "big_every": EXPLORE_BIG_EVERY,
    }
    return Origin(shown, workload_seed, {"layout": layout, "workload_seed": workload_seed})


@attrs.define
class SqliteSource:
    """The rounds of :func:`explore`: the workload of each seed (:func:`explore_workload`)
    recorded through the VFS on a fresh sandbox.  Its fault runs fail a call once on even
    rounds and persistently on odd ones (CRASH-SQL-4); a workload that fails with no fault
    at all is a failure of run ``workload`` and ends the exploration."""

    layout: Layout = "per-file"
    repository_class: RepositoryFactory | None = None
    rounds: int = 0

    @contextlib.contextmanager
    def round(self, seed: int, findings: Findings) -> Iterator[SqliteRound | None]:
        mode: IoMode = "persistent" if self.rounds % 2 else "once"
        self.rounds += 1
        workload = explore_workload(seed)
        origin = _explore_origin(self.layout, seed)
        box = SqliteSandbox(self.layout, self.repository_class)
        try:
            try:
                rec = record_workload(box, workload, restart_at=len(workload) // 2)
            except FaultFreeRunFailed as exc:
                findings.add(origin.failure(
                    "CRASH-SQL-3", str(exc), "workload", "workload", variant="no-crash"
                ))  # fmt: skip
                yield None
                return
            yield SqliteRound(box, rec, workload, origin, mode=mode)
        finally:
            box.cleanup()


def explore(
    *,
    layout: Layout = "per-file",
    budget: float = 10.0,
    seed: int = 0,
    repository_class: RepositoryFactory | None = None,
    max_failures: int = MAX_FAILURES,
    overrun: float = OVERRUN,
    shard: Shard | None = None,
) -> Exploration:
    """Crash states and single I/O faults over fresh random workloads until ``budget``
    seconds are spent: the SQLite half of ``scopecheck fuzz``'s crash injection, through the
    exploration loop (:func:`scopecheck.crashsim.explore.explore`).  Each round's crash points
    are checked in coverage order (CRASH-COV-1), the recovery of images needing one crashed
    after the priority passes (CRASH-SQL-9), for :data:`STATE_SHARE` of what is left; the
    first round's crash points after every acknowledgement even past the budget, by at most
    ``overrun`` seconds (CRASH-COV-2).  Its single-I/O-fault runs (a few right after the
    priority passes, the rest after its crash states) get the rest.  A failure does not end
    the exploration: the first of each rule and kind is kept, up to ``max_failures``
    (CRASH-COV-4).  ``shard``: its share of a fixed exploration (FLEET-4)."""
    return explore_rounds(
        SqliteSource(layout, repository_class), budget=budget, seed=seed,
        plan=Plan(state_share=STATE_SHARE, overrun=overrun, profiles=PROFILES, shard=shard),
        max_failures=max_failures,
    )  # fmt: skip


def replay_record(
    record: Mapping[str, Any], repository_class: RepositoryFactory | None = None
) -> tuple[bool, str]:
    """Check a reproducer of :func:`explore` again: ``(still failing, what was checked)``.  A
    crash image is rebuilt by its variant's name from the recorded operations
    (:func:`power_image`), and for a crash during recovery so is the recovery's image -- byte
    for byte, nothing rerun -- and reopened on a fresh sandbox (CRASH-COV-5); an I/O-fault
    failure reruns the workload with that call failing in the recorded mode
    (:func:`io_error_sweep`, CRASH-SQL-4); a workload failure reruns the workload."""
    try:
        failure = CrashFailure.from_json(record)
    except BadReproducer as exc:
        raise UsageError("invalid_payload", str(exc)) from None
    if failure.source != "sqlite":
        raise UsageError(
            "invalid_payload", f"a crash reproducer of source {failure.source!r}, not sqlite"
        )
    target = failure.target
    layout: Layout = "shared" if target.get("layout") == "shared" else "per-file"
    try:
        workload_seed = int(target["workload_seed"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            "invalid_payload",
            "a SQLite crash reproducer without its workload seed: rerun the exploration",
        ) from None
    workload = explore_workload(workload_seed)
    if failure.run == "fault":
        mode = target.get("mode")
        if mode not in ("once", "persistent") or failure.point is None:
            raise UsageError("invalid_payload", f"an I/O-fault reproducer with mode {mode!r}")
        report = io_error_sweep(
            workload, layout=layout, mode=mode, repository_class=repository_class,
            only=failure.point, origin=_explore_origin(layout, workload_seed),
        )  # fmt: skip
        lines = [report.summary(), *(str(f) for f in report.failures)]
        return bool(report.failures), "\n".join(lines)
    box = SqliteSandbox(layout, repository_class)
    try:
        if failure.run == "workload":
            try:
                record_workload(box, workload, restart_at=len(workload) // 2)
            except FaultFreeRunFailed as exc:
                return True, f"workload seed {workload_seed}: {exc}"
            return False, f"workload seed {workload_seed}: the workload now runs with no fault"
        evidence = failure.evidence
        if failure.run not in ("crash", "recovery") or evidence is None or failure.point is None:
            raise UsageError(
                "invalid_payload", "a SQLite crash reproducer without its recorded operations"
            )
        k, variant = failure.point, failure.variant
        image = power_image(
            evidence.ops, k, variant, device=SECTOR_TEARS, start=evidence.base,
            profile=failure.built_under,
        )  # fmt: skip
        acked = evidence.acked(k)
        lines = [
            f"workload seed {workload_seed} ({len(workload)} commits, {acked} "
            f"acknowledged), crash {_before(evidence.ops, k, 'workload')}, image {variant}",
            f"file-system profiles: fails {profiles_text(failure.profiles)} (the image is "
            f"rebuilt under {failure.built_under}; CRASH-SYS-15)",
            "files after the crash: "
            + ", ".join(
                f"{name} ({len(data)} bytes)" for name, data in sorted(image.files.items())
            ),
        ]
        if failure.recovery is not None:
            j, during = failure.recovery
            lines.append(
                f"crash during its recovery {_before(evidence.recovery_ops, j, 'recovery')}, "
                f"image {during}"
            )
        rec = Recording(evidence.ops, evidence.base, evidence.acked_at, len(evidence.ops), 0)
        rnd = SqliteRound(box, rec, workload, _explore_origin(layout, workload_seed))
        inner = failure.recovery_point
        found = rnd.check_image(
            k, parse_variant(variant), None if inner is None else (inner.op, inner.variant),
            evidence.recovery_ops, failure.built_under,
        )  # fmt: skip
    finally:
        box.cleanup()
    lines.append(found.problem if found is not None else "the reopened state is a model state now")
    return found is not None, "\n".join(lines)


# -- deleting a Session in the container layout -----------------------------------------------


class _DeleteRound(SqliteRound):
    """The crash points of deleting the Session ``victim``: after a crash it is listed with
    its whole state (never once the delete was acknowledged, ``acked_at[0]``) or gone with
    no row left, and the other Session is untouched (SQLITE-12, CRASH-SQL-3)."""

    def __init__(
        self, box: SqliteSandbox, rec: Recording, origin: Origin, victim: Snapshot, empty: Snapshot,
        *, torn: int, device: Device,
    ) -> None:  # fmt: skip
        super().__init__(box, rec, (), origin, torn=torn, device=device, recoveries=0)
        self.victim = victim
        self.empty = empty

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | None:
        self.states += 1
        acked = int(self.rec.acked(k) > 0)
        problem = _check_delete_image(self.box, image, bool(acked), self.victim, self.empty)
        if problem is None:
            return None
        return self.origin.failure(
            "CRASH-SQL-3", problem, "crash", crash_kind(variant), point=k, variant=variant.name,
            evidence=self.rec.evidence(), acked=acked,
        )  # fmt: skip


def delete_crash_sweep(
    *,
    variants: int = TORN_IMAGES,
    seed: int = 0,
    repository_class: RepositoryFactory | None = None,
    device: Device = SECTOR_TEARS,
) -> SweepReport:
    """Container layout: crash before every mutating operation of ``delete`` of a Session
    holding session and scoped rows (SQLITE-12, CRASH-SQL-3), one pass over the crash points
    in trace order.  After any crash the victim is either listed with its whole state (never
    after an acknowledged delete) or gone with no row left in any table, and the other
    Session is untouched."""
    report = SweepReport("delete-crash", "shared")
    started = time.perf_counter()
    victim_workload = make_workload(seed, transactions=5, big_every=2)
    victim_state = prefix_snapshots(victim_workload)[-1]
    empty_state = prefix_snapshots([])[0]
    box = SqliteSandbox("shared", None)
    try:
        clock = StepClock()
        repo = open_repository("shared", box.work, None, clock)
        victim = repo.create("victim")
        for index, writes in enumerate(victim_workload):
            clock.at(index)
            victim.commit(writes)
        repo.close()
        box.base = read_image(box.work)
        with _vfs() as vfs:
            deleting = open_repository(
                "shared", box.work, repository_class, StepClock(), vfs.vfs_name
            )
            try:
                deleting.delete("victim")
                acked_call = vfs.next_index
                deleting.close()
            finally:
                _close_quietly(deleting.connection)
            calls = list(vfs.calls)
        report.io_calls = len(calls)
        converted = file_ops(calls, box.work, box.base.files)
        rec = Recording(
            converted.ops, box.base, (converted.at[acked_call],), len(converted.ops), len(calls)
        )
        origin = Origin({"delete": "victim", "transactions": 5}, seed, {"layout": "shared"})
        rnd = _DeleteRound(
            box, rec, origin, victim_state, empty_state, torn=variants, device=device
        )
        report.coverage = check_passes(
            rnd, report.findings, until=math.inf, first=True, passes=[crash_points(rec.ops)],
            profiles=PROFILES,
        )  # fmt: skip
        report.fault_points = report.coverage.points_checked
        report.states = rnd.states
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _check_delete_image(
    box: SqliteSandbox, image: Image, acked: bool, victim_state: Snapshot, empty_state: Snapshot
) -> str | None:
    materialise(image, box.check)
    try:
        repo = open_repository("shared", box.check, None, StepClock())
    except ScopecheckError as exc:
        return f"container open failed: {exc}"
    try:
        listed = repo.list()
        survivor = repo.open(SESSION_ID)
        if survivor.snapshot() != empty_state:
            return "the other Session changed"
        survivor.close()
        if "victim" in listed:
            if acked:
                return "an acknowledged delete came back"
            victim = repo.open("victim")
            if victim.snapshot() != victim_state:
                return "the victim survived with part of its rows"
            victim.close()
            return None
        leftovers = [
            table
            for table in ("entries", "usage_ledger", "scalar_values", "list_values")
            if repo.connection.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = 'victim'"
            ).fetchone()
            != (0,)
        ]
        return f"deleted victim left rows in {leftovers}" if leftovers else None
    except ScopecheckError as exc:
        return f"reopen failed: {exc}"
    finally:
        with contextlib.suppress(ScopecheckError):
            repo.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            repo.close()
