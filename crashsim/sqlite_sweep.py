"""Crash and I/O-error sweeps of the SQLite backend through :mod:`scopecheck.crashsim.sqlite_vfs`.

A sweep records one workload (open, commits, a mid-stream close/reopen, close) on one Session
through the recording VFS, converts its I/O calls into the file operations of the one
persistence model (:mod:`scopecheck.crashsim.vfs_source`, :mod:`scopecheck.crashsim.persistence`)
and knows where in them each commit returned (its acknowledgement):

* :func:`crash_sweep` -- a crash before each mutating operation (CRASH-SQL-1): the process
  crash, and the power-loss images of :meth:`~scopecheck.crashsim.persistence.Volume.power_images`
  on a disk tearing writes at 512-byte sectors (CRASH-SQL-2), a bounded number per crash point.
  Each image is reopened with a plain repository and must equal the expected state after the
  acknowledged commits, or after those plus the one in flight -- never anything else
  (CRASH-SQL-3).  The crash points are taken in coverage order
  (:func:`~scopecheck.crashsim.coverage.ordered_passes`, CRASH-COV-1).  Images that need
  recovery (a WAL to replay and checkpoint, a hot journal to roll back) have their reopen
  recorded through the VFS and crashed before each of its mutating calls (CRASH-SQL-9).
* :func:`io_error_sweep` -- call *n* fails with SQLITE_IOERR once or persistently; each failed
  commit raises ``io_error`` and leaves the open handle at a model state; after the faults end
  a reopen shows every acknowledged commit and any subset of the failed ones (CRASH-SQL-4).
* :func:`recovery_io_sweep` -- a crash image whose WAL holds un-checkpointed commits is reopened
  with call *n* (reads included) failing once or persistently; a clean reopen afterwards must
  still show every commit (CRASH-SQL-5).
* :func:`explore` -- both over fresh workloads for a time budget (``scopecheck fuzz``): coverage
  first, a :class:`~scopecheck.crashsim.coverage.CrashCoverage` of what was checked, and every
  distinct failure kept (CRASH-COV-2, CRASH-COV-4).

A crash-state failure carries what rebuilds its image by name (:func:`replay_record`,
CRASH-COV-5).  Expected states are replays on an independent implementation
(:mod:`scopecheck.crashsim.workload`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import apsw
import attrs

from scopecheck.crashsim.coverage import (
    CrashCoverage,
    acknowledgement_points,
    bit_reversed,
    crash_points,
    ordered_passes,
)
from scopecheck.crashsim.persistence import (
    Device,
    FileOp,
    Image,
    Volume,
    image_from_json,
    image_to_json,
    op_from_json,
    op_to_json,
    power_image,
)
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
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.records import Snapshot

Layout = Literal["per-file", "shared"]
#: What the sweeps open repositories with: ``factory(target, clock, vfs=...)``, where ``target``
#: is the root (per-file) or the container file -- a repository class, or a callable setting its
#: keyword arguments (e.g. ``functools.partial(SqliteRepository, synchronous="OFF")``).
RepositoryFactory = Callable[..., Any]
SESSION_ID = "s"
_names = itertools.count()

#: Distinct failures (by rule and kind of crash point) :func:`explore` keeps.
MAX_FAILURES = 8
#: Torn-write images per crash point (besides the process crash and the other power-loss
#: variants): bounded so a point costs a handful of reopens, whatever it has pending.
TORN_IMAGES = 3
#: Images whose recovery :func:`crash_sweep` crashes (the first ones that need a recovery).
RECOVERIES = 3
#: Crash points of one recorded recovery checked, in coverage order (its end, then around its
#: syncs and unlinks, then spread over it).
RECOVERY_POINTS = 16


@attrs.frozen
class Evidence:
    """What rebuilds a crash-state failure's image by name: the recorded operations and the
    disk they started on, where each commit was acknowledged, and for a crash during
    recovery the recovery's own operations (their starting disk is the crash image)."""

    ops: tuple[FileOp, ...]
    base: Image
    acked_at: tuple[int | None, ...]
    recovery_ops: tuple[FileOp, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": [op_to_json(op) for op in self.ops],
            "base": image_to_json(self.base),
            "acked_at": list(self.acked_at),
            "recovery_ops": [op_to_json(op) for op in self.recovery_ops],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            tuple(op_from_json(op) for op in data["ops"]),
            image_from_json(data["base"]),
            tuple(data["acked_at"]),
            tuple(op_from_json(op) for op in data.get("recovery_ops", ())),
        )


@attrs.frozen
class SweepFailure:
    """One state that broke the contract, with what is needed to reproduce it.

    ``fault_at`` is the crash point (an operation index) of a crash-state failure, the I/O
    call of an I/O-fault one; ``image`` names the crash image (``process`` or a power-loss
    variant) or what was checked; ``recovery`` is, for a crash during recovery, the point and
    variant of the recovery crash; ``evidence`` rebuilds the image (crash states only)."""

    sweep: str
    fault_at: int | None
    image: str
    acked: int
    problem: str
    #: A Python expression that reruns exactly this fault point (empty when not replayable).
    reproducer: str = ""
    rule: str = "CRASH-SQL-3"
    recovery: tuple[int, str] | None = None
    evidence: Evidence | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def family(self) -> str:
        """The kind of crash point, for telling failures apart (CRASH-COV-4): ``process``,
        ``strict``, ``torn``, ... ``recovery:<kind>`` for a crash during recovery, or the
        I/O-fault sweep."""
        if self.sweep.startswith("io-"):
            return self.sweep.split("(", 1)[0]
        kind = self.image.split(":", 1)[0].split("@", 1)[0]
        if self.recovery is not None:
            return "recovery:" + self.recovery[1].split(":", 1)[0].split("@", 1)[0]
        return kind

    @property
    def key(self) -> tuple[str, str]:
        return self.rule, self.family

    def __str__(self) -> str:
        where = "I/O call" if self.sweep.startswith("io-") else "crash point"
        text = (
            f"{self.rule} {self.sweep}: {where} {self.fault_at}, image {self.image!r}"
            + ("" if self.recovery is None else f", crash during its recovery {self.recovery}")
            + f", {self.acked} commits acknowledged: {self.problem}"
        )
        return text + (f"\n  reproduce: {self.reproducer}" if self.reproducer else "")


@attrs.define
class SweepReport:
    """What a sweep checked and what failed; ``states`` counts reopened states compared.

    Failures beyond ``max_failures`` are not kept; with ``distinct`` only the first of each
    (rule, kind of crash point) is (CRASH-COV-4)."""

    sweep: str
    layout: str
    io_calls: int = 0
    fault_points: int = 0
    states: int = 0
    failures: list[SweepFailure] = attrs.field(factory=list)
    seconds: float = 0.0
    #: :func:`explore` only: the I/O-fault runs (:func:`io_error_sweep`) among ``states``.
    io_fault_runs: int = 0
    #: What the crash states covered (CRASH-COV-2).
    coverage: CrashCoverage = attrs.field(factory=CrashCoverage)
    max_failures: int = 50
    distinct: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def full(self) -> bool:
        return len(self.failures) >= self.max_failures

    def known(self, key: tuple[str, str]) -> bool:
        return self.distinct and any(f.key == key for f in self.failures)

    def add(self, failure: SweepFailure) -> None:
        if not self.full and not self.known(failure.key):
            self.failures.append(failure)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (
            f"{self.sweep}[{self.layout}]: {self.fault_points} fault points over "
            f"{self.io_calls} I/O calls, {self.states} states, {len(self.failures)} failures, "
            f"{self.states_per_second:.0f} states/s"
        )


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


class _Sandbox:
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
    box: _Sandbox,
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
        # Whatever happened, release every handle; with a crash plan armed nothing more
        # reaches the disk (every later call fails).
        if repo is not None:
            repo.abandon()
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


def _reopen_snapshot(
    box: _Sandbox, root: str, inspect: Callable[[Any, Snapshot], str | None] | None = None
) -> tuple[Snapshot | None, str | None]:
    """Reopen ``root`` with a plain repository (default VFS, the real durability settings);
    ``inspect`` looks at the open storage and its snapshot before it is closed."""
    try:
        repo = open_repository(box.layout, root, None, StepClock())
    except ScopecheckError as exc:
        return None, f"repository open failed: {exc}"
    try:
        storage = repo.open(SESSION_ID)
        snap = storage.snapshot()
        try:
            finding = None if inspect is None else inspect(storage, snap)
        except ScopecheckError as exc:
            finding = f"reads of the reopened state failed: {exc}"
        # the checked copy is thrown away: skip the checkpoint a last close would run
        storage.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        if hasattr(repo, "connection"):
            repo.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
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
        return sum(1 for at in self.acked_at if at is not None and at <= k)

    def evidence(self, recovery_ops: tuple[FileOp, ...] = ()) -> Evidence:
        return Evidence(self.ops, self.base, self.acked_at, recovery_ops)


def record_workload(
    box: _Sandbox,
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


def _rng(seed: int, k: int) -> random.Random:
    """The generator of one crash point's images: seeded by the point alone, so a point's
    images are the same in whatever order the points are visited."""
    return random.Random(f"{seed}:{k}")


def images_at(
    volume: Volume, k: int, seed: int, *, device: Device = SECTOR_TEARS, torn: int = TORN_IMAGES
) -> Iterator[tuple[str, Image]]:
    """The images of a crash at point ``k`` of the volume (its operations applied up to
    ``k``): the process crash, then at most ``torn`` torn writes besides the other
    power-loss variants.  Every name rebuilds its image (:func:`power_image`)."""
    yield "process", volume.process_image()
    yield from volume.power_images(_rng(seed, k), device=device, limit=torn)


def needs_recovery(image: Image) -> bool:
    """A WAL with frames to replay, or a rollback journal that may be hot: the reopen of such
    an image writes (a checkpoint, a rollback), so a crash can hit it."""
    return any(
        (name.endswith("-wal") and len(data) > 32) or (name.endswith("-journal") and data)
        for name, data in image.files.items()
    )


def _judge(
    box: _Sandbox,
    image: Image,
    candidates: Sequence[Snapshot],
    invariants: Invariants | None = None,
    prefixes: Sequence[int] = (),
) -> tuple[Snapshot | None, str | None]:
    """Reopen ``image``; its state must be one of ``candidates`` (the model after
    ``prefixes[i]`` transactions) and, with ``invariants``, satisfy them for at least one
    candidate prefix -- checked on every image, model state or not, so a broken invariant is
    reported in its own words.  The reopened state and the problem, if any."""

    def inspect(storage: Any, snap: Snapshot) -> str | None:
        if invariants is None:
            return None
        found: list[str] = []
        for prefix in prefixes:
            problems = invariants(storage, prefix)
            if not problems:
                return None
            found.append(f"as {prefix} transactions: " + "; ".join(problems))
        return "lifecycle invariants broken — " + " | ".join(found)

    materialise(image, box.check)
    snap, problem = _reopen_snapshot(box, box.check, inspect if invariants else None)
    if problem is None and snap not in candidates:
        problem = "reopened state is not a model state (partial commit or lost acknowledged one)"
    elif problem is not None and snap is not None and snap not in candidates:
        problem = "reopened state is not a model state; " + problem
    return snap, problem


@attrs.frozen
class _Settings:
    """How one sweep checks its crash points."""

    workload: Sequence[Transaction]
    expected: Sequence[Snapshot]
    seed: int
    torn: int
    device: Device
    invariants: Invariants | None
    #: Rebuilds the failure's crash point as a Python expression (``only=k, variant=v``).
    reproducer: Callable[[int, str, tuple[int, str] | None], str]

    def prefixes(self, acked: int) -> list[int]:
        return [acked] + ([acked + 1] if acked < len(self.workload) else [])


def _check_points(
    box: _Sandbox,
    rec: Recording,
    settings: _Settings,
    passes: Sequence[Sequence[int]],
    report: SweepReport,
    *,
    until: float | None = None,
    first: bool = True,
    overrun: float = 30.0,
    recoveries: int = RECOVERIES,
    recovery_share: float = 0.2,
    variant: str | None = None,
    recovery: tuple[int, str] | None = None,
) -> CrashCoverage:
    """Check the crash images at ``passes`` (each sorted) pass by pass, until ``until``;
    after the second pass crash the recovery of images that need one.  The first pass of a
    ``first`` sweep runs to its end however late, unless that takes ``overrun`` seconds more.
    ``variant`` (and ``recovery``) check that one image only (a replay).  What was covered."""
    points = crash_points(rec.ops)
    after_ack = acknowledgement_points(points, rec.acked_at)
    checked: set[int] = set()
    states_before = report.states
    recovery_states = 0
    candidates: list[tuple[int, str, Image, Snapshot]] = []
    stopped = priority_done = False
    recover_after = min(2, len(passes) - 1)  # after, before and around: the priority passes
    for number, pass_points in enumerate(passes):
        stop_at = None if until is None else until + (overrun if first and number == 0 else 0)
        volume = Volume(rec.base)
        done = 0
        for k in pass_points:
            if report.full or (stop_at is not None and time.perf_counter() >= stop_at):
                stopped = True
                break
            while done < k:
                volume.apply(rec.ops[done])
                done += 1
            report.fault_points += 1
            acked = rec.acked(k)
            prefixes = settings.prefixes(acked)
            allowed = [settings.expected[p] for p in prefixes]
            if variant is None:
                here = images_at(volume, k, settings.seed, device=settings.device,
                                 torn=settings.torn)  # fmt: skip
            else:
                built = (
                    volume.process_image()
                    if variant == "process"
                    else volume.power_image(variant, settings.device)
                )
                here = iter([(variant, built)])
            for name, image in here:
                snap, problem = _judge(box, image, allowed, settings.invariants, prefixes)
                report.states += 1
                if problem is not None:
                    if recovery is None:
                        report.add(
                            SweepFailure(
                                report.sweep, k, name, acked, problem,
                                settings.reproducer(k, name, None),
                                evidence=rec.evidence(),
                            )
                        )  # fmt: skip
                elif (
                    snap is not None
                    and needs_recovery(image)
                    and (recovery is not None or number <= recover_after)
                ):
                    candidates.append((k, name, image, snap))
            checked.add(k)
        if stopped:
            break
        priority_done = True
        if (number == recover_after or recovery is not None) and candidates:
            if recovery is not None:
                chosen = candidates[:1]
                recovery_until = None
            else:
                chosen = _recovery_order(candidates, settings.seed)
                recovery_until = None
                if until is not None:
                    now = time.perf_counter()
                    recovery_until = now + max(0.0, until - now) * recovery_share
            recovery_states += _crash_recoveries(
                box, rec, settings, chosen, report, until=recovery_until,
                at_least=1 if first else 0, count=recoveries, only=recovery,
            )  # fmt: skip
            candidates = []
    counted = first or priority_done
    return CrashCoverage(
        points_checked=len(checked) if counted else 0,
        points_total=len(points) if counted else 0,
        states_checked=report.states - states_before,
        acked_covered=sum(1 for k in after_ack if k in checked) if counted else 0,
        acked_total=len(after_ack) if counted else 0,
        recovery_states=recovery_states,
    )


def _recovery_order(
    candidates: list[tuple[int, str, Image, Snapshot]], seed: int
) -> list[tuple[int, str, Image, Snapshot]]:
    """Torn images first (their recovery repairs the most), then power loss, then process
    crashes, each in a seeded random order."""
    rng = random.Random(seed)
    rank = {"torn": 0, "only": 1, "data-kept": 1, "entries-kept": 1, "strict": 1}

    def key(c: tuple[int, str, Image, Snapshot]) -> tuple[int, float]:
        return rank.get(c[1].split(":", 1)[0].split("@", 1)[0], 2), rng.random()

    return sorted(candidates, key=key)


def record_recovery(box: _Sandbox, image: Image) -> tuple[FileOp, ...] | None:
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
            if repo is not None:
                repo.abandon()
            for conn in connections:
                _close_quietly(conn)
        calls = list(vfs.calls)
    return file_ops(calls, box.check, image.files).ops


def _crash_recoveries(
    box: _Sandbox,
    rec: Recording,
    settings: _Settings,
    chosen: Sequence[tuple[int, str, Image, Snapshot]],
    report: SweepReport,
    *,
    until: float | None,
    at_least: int,
    count: int,
    only: tuple[int, str] | None = None,
) -> int:
    """Record the recovery of each chosen image and crash it at :data:`RECOVERY_POINTS` of its
    crash points in coverage order -- the process crash and the power-loss images
    (CRASH-SQL-9): the next open must give the state the uninterrupted recovery gave.
    ``count`` bounds the images when there is no ``until``.  The states checked."""
    states = 0
    for done, (k, name, image, recovered) in enumerate(chosen):
        if report.full:
            break
        if until is None and only is None and done >= count:
            break
        if until is not None and time.perf_counter() >= until and done >= at_least:
            break
        rops = record_recovery(box, image)
        if rops is None:
            continue  # a coded error: the plain reopen of the same image was judged already
        if only is not None:
            mutating = [only[0]]
        else:  # coverage order: the end, then around syncs and unlinks, then spread
            order = itertools.chain.from_iterable(ordered_passes(rops, ()))
            mutating = sorted(itertools.islice(order, RECOVERY_POINTS))
        volume = Volume(image)
        applied = 0
        acked = rec.acked(k)
        for j in mutating:
            while applied < j:
                volume.apply(rops[applied])
                applied += 1
            if only is None:
                during = images_at(volume, j, settings.seed, device=settings.device,
                                   torn=settings.torn)  # fmt: skip
            else:
                built = (
                    volume.process_image()
                    if only[1] == "process"
                    else volume.power_image(only[1], settings.device)
                )
                during = iter([(only[1], built)])
            for variant, crashed in during:
                _, problem = _judge(box, crashed, [recovered])
                states += 1
                report.states += 1
                if problem is None:
                    continue
                report.add(
                    SweepFailure(
                        report.sweep, k, name, acked,
                        f"a crash while the backend recovered that image ({variant}, "
                        f"{_before(rops, j, 'recovery')}) is not survived: {problem}",
                        settings.reproducer(k, name, (j, variant)),
                        rule="CRASH-SQL-9",
                        recovery=(j, variant),
                        evidence=rec.evidence(rops),
                    )
                )  # fmt: skip
    return states


def _before(ops: Sequence[FileOp], k: int, what: str) -> str:
    if k >= len(ops):
        return f"at the end of the {what} ({len(ops)} operations)"
    return f"before {what} operation {k} of {len(ops)}: {ops[k].describe()}"


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
    max_failures: int = 50,
    crashes: bool = True,
    only: int | None = None,
    variant: str | None = None,
    recovery: tuple[int, str] | None = None,
    recoveries: int = RECOVERIES,
    device: Device = SECTOR_TEARS,
    workload_label: str = "",
    invariants: Invariants | None = None,
    sweep_name: str | None = None,
) -> SweepReport:
    """Crash before every mutating operation of the recorded workload (CRASH-SQL-1..3) in
    coverage order (CRASH-COV-1), ``stride`` thinning the points that follow no
    acknowledgement; ``variants`` torn-write images per point besides the process crash and
    the other power-loss images; the recovery of ``recoveries`` images that need one is
    crashed (CRASH-SQL-9).  ``crashes=False`` checks only the power loss after the last
    acknowledged commit and after the close.  ``only=k`` checks the one crash point *k*
    (``variant=`` one of its images, ``recovery=(j, variant)`` one crash of that image's
    recovery): a replay.

    ``workload_label`` is a Python expression rebuilding ``workload`` (e.g.
    ``make_workload(3, 6, 3)``); with it every failure carries a one-line reproducer.
    """
    report = SweepReport(
        sweep_name or ("crash" if crashes else "power-loss"), layout, max_failures=max_failures
    )
    started = time.perf_counter()
    box = _Sandbox(layout, repository_class)
    try:
        rec = record_workload(
            box, workload, autocheckpoint=autocheckpoint, restart_at=len(workload) // 2
        )
        report.io_calls = rec.io_calls

        def reproducer(k: int, name: str, during: tuple[int, str] | None) -> str:
            if not workload_label:
                return ""
            return (
                f"crash_sweep({workload_label}, layout={layout!r}, seed={seed}, "
                f"variants={variants}, autocheckpoint={autocheckpoint}, only={k}, "
                f"variant={name!r}" + ("" if during is None else f", recovery={during!r}") + ")"
            )

        settings = _Settings(
            workload, prefix_snapshots(workload), seed, variants, device, invariants, reproducer
        )
        if only is not None:
            passes = [[only]]
        elif not crashes:
            passes = [sorted({rec.before_close, len(rec.ops)})]
        else:
            passes = _strided(ordered_passes(rec.ops, rec.acked_at), stride)
        report.coverage = _check_points(
            box, rec, settings, passes, report, variant=variant, recovery=recovery,
            recoveries=recoveries if crashes and only is None else 0,
        )  # fmt: skip
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
    max_failures: int = 50,
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
    report = crash_sweep(
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
    )
    report.failures = [
        attrs.evolve(
            f,
            reproducer=(
                f"lifecycle_crash_sweep({size!r}, layout={layout!r}, seed={seed}, "
                f"variants={variants}, autocheckpoint={autocheckpoint}, only={f.fault_at}, "
                f"variant={f.image!r})"
            ),
        )
        if f.fault_at is not None and f.recovery is None
        else f
        for f in report.failures
    ]
    return report


def io_error_sweep(
    workload: Sequence[Transaction],
    *,
    layout: Layout = "per-file",
    mode: Literal["once", "persistent"] = "once",
    repository_class: RepositoryFactory | None = None,
    stride: int = 1,
    autocheckpoint: int = 8,
    only: int | None = None,
    until: float | None = None,
    at_least: int = 0,
    spread: bool = False,
) -> SweepReport:
    """Fail the n-th I/O call once or persistently; commits fail cleanly (CRASH-SQL-4).
    ``only=n`` checks just that fault point (a replay); ``until`` stops at that time (after
    ``at_least`` fault points), ``spread`` takes the calls spread over the trace rather than in
    order, so a stop leaves none of it untried by much."""
    report = SweepReport(f"io-{mode}", layout)
    started = time.perf_counter()
    restart_at = len(workload) // 2
    box = _Sandbox(layout, repository_class)
    try:
        with _vfs() as vfs:
            clean = run_workload(
                box,
                vfs,
                workload,
                FaultPlan(),
                autocheckpoint=autocheckpoint,
                restart_at=restart_at,
            )
            report.io_calls = len(clean.calls)
            points = list(range(0, report.io_calls, stride)) if only is None else [only]
            if spread:
                points = [points[i] for i in bit_reversed(len(points))]
            for n in points:
                late = until is not None and time.perf_counter() >= until
                if late and report.fault_points >= at_least:
                    break
                outcome = run_workload(
                    box,
                    vfs,
                    workload,
                    FaultPlan(n, mode),
                    autocheckpoint=autocheckpoint,
                    restart_at=restart_at,
                    check_handle=True,
                )
                report.fault_points += 1
                for seen in outcome.problems:
                    report.add(
                        SweepFailure(
                            report.sweep, n, "in-process", len(outcome.acked), seen,
                            rule="CRASH-SQL-4",
                        )
                    )  # fmt: skip
                # The faults are over (the process lives on): reopen the real files.
                snap, reopen_problem = _reopen_snapshot(box, box.work)
                report.states += 1
                problem = reopen_problem
                if problem is None and snap not in _io_candidates(workload, outcome):
                    problem = "after the faults a reopen shows a non-model state"
                if problem is not None:
                    report.add(
                        SweepFailure(
                            report.sweep, n, "reopen", len(outcome.acked), problem,
                            rule="CRASH-SQL-4",
                        )
                    )  # fmt: skip
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


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
    mode: Literal["once", "persistent"] = "once",
    stride: int = 1,
) -> SweepReport:
    """Reopen a crash image whose WAL needs recovery with the n-th call (reads included)
    failing; a clean reopen afterwards must show every commit (CRASH-SQL-5).  The image is
    the process crash just before the final close: every commit in the WAL, none
    checkpointed since the last automatic checkpoint (there is none: ``autocheckpoint=0``)."""
    report = SweepReport(f"recovery-{mode}", layout)
    started = time.perf_counter()
    expected = prefix_snapshots(workload)
    box = _Sandbox(layout, None)
    try:
        rec = record_workload(box, workload, autocheckpoint=0)
        image = power_image(rec.ops, rec.before_close, "process", start=rec.base)
        with _vfs(count_reads=True) as vfs:
            materialise(image, box.check)
            vfs.reset()
            report.io_calls = _attempt_open(box, vfs, expected[-1], report, None)
            for n in range(0, report.io_calls, stride):
                materialise(image, box.check)
                vfs.reset(FaultPlan(n, mode))
                _attempt_open(box, vfs, expected[-1], report, n)
                report.fault_points += 1
                vfs.reset()
                snap, problem = _reopen_snapshot(box, box.check)
                report.states += 1
                if problem is None and snap != expected[-1]:
                    problem = "after a failed recovery a clean reopen lost commits"
                if problem is not None:
                    report.add(
                        SweepFailure(
                            report.sweep, n, "clean-reopen", len(workload), problem,
                            rule="CRASH-SQL-5",
                        )
                    )  # fmt: skip
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _attempt_open(
    box: _Sandbox, vfs: RecordingVFS, want: Snapshot, report: SweepReport, n: int | None
) -> int:
    """Open, read and close through the faulty VFS: a stable error or the right state.
    Returns the number of I/O calls issued."""
    connections: list[apsw.Connection] = []
    repo: Any = None
    issued = 0
    try:
        repo = open_repository(box.layout, box.check, None, StepClock(), vfs.vfs_name)
        storage = repo.open(SESSION_ID)
        connections.append(storage.connection)
        snap = storage.snapshot()
        report.states += 1
        if snap != want:
            report.failures.append(
                SweepFailure(
                    report.sweep, n, "faulty-reopen", -1, "wrong state read", rule="CRASH-SQL-5"
                )
            )
        storage.close()
        repo.close()
    except ScopecheckError:
        pass  # a clean, coded failure is allowed while the disk fails
    finally:
        issued = len(vfs.calls)
        if repo is not None:
            repo.abandon()
            if hasattr(repo, "connection"):
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
    for trial in range(trials):
        box = _Sandbox(layout, None, ram=False)  # a real disk directory
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
                report.failures.append(
                    SweepFailure(
                        "sigkill", trial, f"trial {trial}", acked, problem, rule="CRASH-SQL-7"
                    )
                )
        finally:
            box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


# -- the budgeted exploration behind ``scopecheck fuzz`` ------------------------------------------

#: The share of what is left of the budget that a round's crash states get, and then its
#: I/O-fault runs (the rest: the next rounds).
STATE_SHARE = 0.5
#: The workloads :func:`explore` generates (and a replay rebuilds from the seed).
EXPLORE_TRANSACTIONS = 6
EXPLORE_BIG_EVERY = 3


def explore_workload(workload_seed: int) -> list[Transaction]:
    return make_workload(
        workload_seed, transactions=EXPLORE_TRANSACTIONS, big_every=EXPLORE_BIG_EVERY
    )


def explore(
    *,
    layout: Layout = "per-file",
    budget: float = 10.0,
    seed: int = 0,
    repository_class: RepositoryFactory | None = None,
    max_failures: int = MAX_FAILURES,
    overrun: float = 30.0,
) -> SweepReport:
    """Crash states and single I/O faults over fresh random workloads until ``budget``
    seconds are spent: the SQLite half of ``scopecheck fuzz``'s crash injection.

    Each round records a workload and checks its crash points in coverage order
    (CRASH-COV-1), crashing the recovery of some images after the second pass (CRASH-SQL-9),
    for half of what is left of the budget; the first round's crash points after every
    acknowledgement are checked even past the budget, by at most ``overrun`` seconds, and
    ``coverage`` says what was covered (CRASH-COV-2).  Then the round's single-I/O-fault runs
    (:func:`io_error_sweep`, a call failing once, or persistently on odd rounds), spread over
    the trace, for half of what is left again, counted in ``io_fault_runs``.  A failure does
    not end the exploration: the first of each rule and kind of crash point is kept, up to
    ``max_failures`` (CRASH-COV-4)."""
    total = SweepReport("explore", layout, max_failures=max_failures, distinct=True)
    started = time.perf_counter()
    deadline = started + budget
    round_number = 0
    while time.perf_counter() < deadline and not total.full:
        first = round_number == 0
        workload_seed = seed + round_number
        workload = explore_workload(workload_seed)
        label = (
            f"make_workload({workload_seed}, transactions={EXPLORE_TRANSACTIONS}, "
            f"big_every={EXPLORE_BIG_EVERY})"
        )
        now = time.perf_counter()
        crashes = SweepReport(
            f"crash(workload seed {workload_seed})", layout, failures=total.failures,
            max_failures=max_failures, distinct=True,
        )  # fmt: skip
        total.coverage += _explore_round(
            crashes, workload, workload_seed, label, repository_class,
            until=now + (deadline - now) * STATE_SHARE, first=first, overrun=overrun,
        )  # fmt: skip
        total.io_calls += crashes.io_calls
        total.fault_points += crashes.fault_points
        total.states += crashes.states
        now = time.perf_counter()
        if not total.full and now < deadline:
            mode: Literal["once", "persistent"] = "persistent" if round_number % 2 else "once"
            faults = io_error_sweep(
                workload, layout=layout, mode=mode, repository_class=repository_class,
                until=now + (deadline - now) * STATE_SHARE, at_least=2 if first else 0,
                spread=True,
            )  # fmt: skip
            for failure in faults.failures:
                total.add(
                    attrs.evolve(
                        failure,
                        sweep=f"{faults.sweep}(workload seed {workload_seed})",
                        reproducer=f"io_error_sweep({label}, layout={layout!r}, mode={mode!r}, "
                        f"only={failure.fault_at})",
                    )
                )
            total.io_calls += faults.io_calls
            total.fault_points += faults.fault_points
            total.states += faults.states
            total.io_fault_runs += faults.fault_points
        round_number += 1
    total.seconds = time.perf_counter() - started
    return total


def _explore_round(
    report: SweepReport,
    workload: Sequence[Transaction],
    workload_seed: int,
    label: str,
    repository_class: RepositoryFactory | None,
    *,
    until: float,
    first: bool,
    overrun: float,
) -> CrashCoverage:
    layout: Layout = "shared" if report.layout == "shared" else "per-file"
    box = _Sandbox(layout, repository_class)
    try:
        try:
            rec = record_workload(box, workload, restart_at=len(workload) // 2)
        except FaultFreeRunFailed as exc:
            report.add(SweepFailure(report.sweep, None, "no crash", 0, str(exc), label))
            return CrashCoverage()
        report.io_calls = rec.io_calls

        def reproducer(k: int, name: str, during: tuple[int, str] | None) -> str:
            return (
                f"crash_sweep({label}, layout={layout!r}, seed={workload_seed}, only={k}, "
                f"variant={name!r}" + ("" if during is None else f", recovery={during!r}") + ")"
            )

        settings = _Settings(
            workload, prefix_snapshots(workload), workload_seed, TORN_IMAGES, SECTOR_TEARS,
            None, reproducer,
        )  # fmt: skip
        passes = ordered_passes(rec.ops, rec.acked_at)
        return _check_points(
            box, rec, settings, passes, report, until=until, first=first, overrun=overrun
        )
    finally:
        box.cleanup()


def replay_record(
    record: Mapping[str, Any], repository_class: RepositoryFactory | None = None
) -> tuple[bool, str]:
    """Check a crash-state reproducer of :func:`explore` again: its image is rebuilt by its
    variant's name from the recorded operations (:func:`power_image`), and for a crash during
    recovery so is the recovery's image -- byte for byte, nothing rerun -- and reopened on a
    fresh sandbox (CRASH-COV-5).  ``(still failing, what was checked)``."""
    layout: Layout = "shared" if record.get("layout") == "shared" else "per-file"
    evidence = Evidence.from_json(record["evidence"])
    workload = explore_workload(int(record["workload_seed"]))
    k, variant = int(record["op_index"]), str(record["fault"])
    image = power_image(evidence.ops, k, variant, device=SECTOR_TEARS, start=evidence.base)
    acked = sum(1 for at in evidence.acked_at if at is not None and at <= k)
    expected = prefix_snapshots(workload)
    prefixes = [acked] + ([acked + 1] if acked < len(workload) else [])
    lines = [
        f"workload seed {record['workload_seed']} ({len(workload)} commits, {acked} "
        f"acknowledged), crash {_before(evidence.ops, k, 'workload')}, image {variant}",
        "files after the crash: "
        + ", ".join(f"{name} ({len(data)} bytes)" for name, data in sorted(image.files.items())),
    ]
    box = _Sandbox(layout, repository_class)
    try:
        snap, problem = _judge(box, image, [expected[p] for p in prefixes])
        recovery = record.get("recovery")
        if recovery is not None and problem is None and snap is not None:
            j, during = int(recovery[0]), str(recovery[1])
            crashed = power_image(
                evidence.recovery_ops, j, during, device=SECTOR_TEARS, start=image
            )
            lines.append(
                f"crash during its recovery {_before(evidence.recovery_ops, j, 'recovery')}, "
                f"image {during}"
            )
            _, problem = _judge(box, crashed, [snap])
    finally:
        box.cleanup()
    lines.append(problem or "the reopened state is a model state now")
    return problem is not None, "\n".join(lines)


# -- deleting a Session in the container layout -----------------------------------------------


def delete_crash_sweep(
    *,
    variants: int = TORN_IMAGES,
    seed: int = 0,
    repository_class: RepositoryFactory | None = None,
    device: Device = SECTOR_TEARS,
) -> SweepReport:
    """Container layout: crash before every mutating operation of ``delete`` of a Session
    holding session and scoped rows (SQLITE-12, CRASH-SQL-3).  After any crash the victim is
    either listed with its whole state (never after an acknowledged delete) or gone with no
    row left in any table, and the other Session is untouched."""
    report = SweepReport("delete-crash", "shared")
    started = time.perf_counter()
    victim_workload = make_workload(seed, transactions=5, big_every=2)
    victim_state = prefix_snapshots(victim_workload)[-1]
    empty_state = prefix_snapshots([])[0]
    box = _Sandbox("shared", None)
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
                deleting.abandon()
                _close_quietly(deleting.connection)
            calls = list(vfs.calls)
        report.io_calls = len(calls)
        converted = file_ops(calls, box.work, box.base.files)
        acked_at = converted.at[acked_call]
        volume = Volume(box.base)
        done = 0
        for k in crash_points(converted.ops):
            while done < k:
                volume.apply(converted.ops[done])
                done += 1
            report.fault_points += 1
            acked = k >= acked_at
            for name, image in images_at(volume, k, seed, device=device, torn=variants):
                report.states += 1
                problem = _check_delete_image(box, image, acked, victim_state, empty_state)
                if problem is not None:
                    report.add(SweepFailure(report.sweep, k, name, int(acked), problem))
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _check_delete_image(
    box: _Sandbox, image: Image, acked: bool, victim_state: Snapshot, empty_state: Snapshot
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
