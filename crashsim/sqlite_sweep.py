"""Crash and I/O-error sweeps of the SQLite backend through :mod:`scopecheck.crashsim.sqlite_vfs`.

A sweep runs one workload (open, commits, a mid-stream close/reopen, close) on one Session
through the recording VFS, once per I/O call, with that call failing:

* :func:`crash_sweep` — the process dies at call *k* (CRASH-SQL-1); every post-crash image
  (durable data plus subsets of unsynced writes, some torn; CRASH-SQL-2) is reopened with a
  plain repository and must equal the expected state after the acknowledged commits, or after
  those plus the one in flight — never anything else (CRASH-SQL-3).  The no-crash power-loss
  case (images drawn after the last acknowledged commit, before and after close) must equal
  the state after every commit.
* :func:`io_error_sweep` — call *n* fails with SQLITE_IOERR once or persistently; each failed
  commit raises ``io_error`` and leaves the open handle at a model state; after the faults end
  a reopen shows every acknowledged commit and any subset of the failed ones (CRASH-SQL-4).
* :func:`recovery_io_sweep` — a crash image whose WAL holds un-checkpointed commits is reopened
  with call *n* (reads included) failing once or persistently; a clean reopen afterwards must
  still show every commit (CRASH-SQL-5).

Expected states are replays on an independent implementation (:mod:`scopecheck.crashsim.workload`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import apsw
import attrs

from scopecheck.crashsim.sqlite_vfs import (
    FaultPlan,
    Image,
    IOCall,
    RecordingVFS,
    SimulatedCrash,
    disk_model,
    materialise,
    post_crash_images,
    read_tree,
)
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


@attrs.frozen
class SweepFailure:
    """One state that broke the contract, with what is needed to reproduce it."""

    sweep: str
    fault_at: int | None
    image: str
    acked: int
    problem: str
    #: A Python expression that reruns exactly this fault point (empty when not replayable).
    reproducer: str = ""

    def __str__(self) -> str:
        text = (
            f"{self.sweep}: fault at I/O call {self.fault_at}, image {self.image!r}, "
            f"{self.acked} commits acknowledged: {self.problem}"
        )
        return text + (f"\n  reproduce: {self.reproducer}" if self.reproducer else "")


@attrs.define
class SweepReport:
    """What a sweep checked and what failed; ``states`` counts reopened states compared."""

    sweep: str
    layout: str
    io_calls: int = 0
    fault_points: int = 0
    states: int = 0
    failures: list[SweepFailure] = attrs.field(factory=list)
    seconds: float = 0.0
    #: :func:`explore` only: the I/O-fault runs (:func:`io_error_sweep`) among ``states``.
    io_fault_runs: int = 0

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


def scratch_dir() -> str | None:
    """A RAM-backed temp dir when there is one: crash images are simulated, so the scratch
    files need no real disk (``SCOPECHECK_SCRATCH`` overrides)."""
    chosen = os.environ.get("SCOPECHECK_SCRATCH")
    if chosen:
        return chosen
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class _Sandbox:
    """Three temp dirs: ``work`` (the recorded run), ``check`` (reopened images), base files."""

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
        self.base = read_tree(self.work)

    def restore(self) -> None:
        for name in os.listdir(self.work):
            os.unlink(os.path.join(self.work, name))
        for path, content in self.base.items():
            with open(path, "wb") as handle:
                handle.write(content)

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
    finally:
        # Whatever happened, release every handle; with a crash plan armed nothing more
        # reaches the disk (every later call fails).
        if repo is not None:
            repo.abandon()
        for conn in connections:
            _close_quietly(conn)
    return RunOutcome(list(vfs.calls), acked, failed, crashed, before_close, problems)


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


def _check_image(
    box: _Sandbox,
    image: Image,
    candidates: Sequence[Snapshot],
    report: SweepReport,
    fault_at: int | None,
    acked: int,
    invariants: Invariants | None = None,
    prefixes: Sequence[int] = (),
) -> None:
    """Reopen ``image``; its state must be one of ``candidates`` (the model after
    ``prefixes[i]`` transactions) and, with ``invariants``, satisfy them for at least one
    candidate prefix — checked on every image, model state or not, so a broken invariant is
    reported in its own words."""

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

    materialise(image, box.work, box.check)
    snap, problem = _reopen_snapshot(box, box.check, inspect if invariants else None)
    report.states += 1
    if problem is None and snap not in candidates:
        problem = "reopened state is not a model state (partial commit or lost acknowledged one)"
    elif problem is not None and snap is not None and snap not in candidates:
        problem = "reopened state is not a model state; " + problem
    if problem is not None:
        report.failures.append(SweepFailure(report.sweep, fault_at, image.label, acked, problem))


def crash_sweep(
    workload: Sequence[Transaction],
    *,
    layout: Layout = "per-file",
    repository_class: RepositoryFactory | None = None,
    variants: int = 3,
    seed: int = 0,
    stride: int = 1,
    autocheckpoint: int = 8,
    max_failures: int = 50,
    crashes: bool = True,
    only: int | None = None,
    workload_label: str = "",
    invariants: Invariants | None = None,
    sweep_name: str | None = None,
) -> SweepReport:
    """Crash at every ``stride``-th I/O call, check every post-crash image (CRASH-SQL-1..3);
    ``crashes=False`` checks only the no-crash power-loss images; ``only=k`` replays the one
    fault point *k* (the images drawn for a point depend only on ``seed`` and *k*).

    ``workload_label`` is a Python expression rebuilding ``workload`` (e.g.
    ``make_workload(3, 6, 3)``); with it every failure carries a one-line reproducer.
    """
    report = SweepReport(sweep_name or ("crash" if crashes else "power-loss"), layout)
    started = time.perf_counter()
    expected = prefix_snapshots(workload)
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
            if clean.problems or clean.crashed or len(clean.acked) != len(workload):
                raise AssertionError(f"fault-free run failed: {clean.problems}")
            report.io_calls = len(clean.calls)
            points = range(0, report.io_calls if crashes else 0, stride)
            for k in points if only is None else [only]:
                outcome = run_workload(
                    box,
                    vfs,
                    workload,
                    FaultPlan(k, "crash"),
                    autocheckpoint=autocheckpoint,
                    restart_at=restart_at,
                )
                report.fault_points += 1
                acked = len(outcome.acked)
                prefixes = [acked] + ([acked + 1] if acked < len(workload) else [])
                candidates = [expected[n] for n in prefixes]
                rng = random.Random(seed * 1_000_003 + k)
                before = len(report.failures)
                for image in post_crash_images(disk_model(box.base, outcome.calls), rng, variants):
                    _check_image(box, image, candidates, report, k, acked, invariants, prefixes)
                if workload_label:
                    replay = (
                        f"crash_sweep({workload_label}, layout={layout!r}, seed={seed}, "
                        f"variants={variants}, autocheckpoint={autocheckpoint}, only={k})"
                    )
                    report.failures[before:] = [
                        attrs.evolve(f, reproducer=replay) for f in report.failures[before:]
                    ]
                if len(report.failures) >= max_failures:
                    break
            if only is not None:
                report.seconds = time.perf_counter() - started
                return report
            # No crash at all: power is lost after the last acknowledged commit (before the
            # final close), and after the close.
            assert clean.before_close is not None
            for cut, label in ((clean.before_close, "power-loss"), (len(clean.calls), "closed")):
                rng = random.Random(seed * 1_000_003 - cut)
                files = disk_model(box.base, clean.calls[:cut])
                report.fault_points += 1
                for image in post_crash_images(files, rng, variants):
                    labelled = Image(image.files, f"{label}/{image.label}")
                    _check_image(
                        box,
                        labelled,
                        [expected[-1]],
                        report,
                        None,
                        len(workload),
                        invariants,
                        [len(workload)],
                    )
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def lifecycle_crash_sweep(
    size: Literal["short", "long"] = "short",
    *,
    layout: Layout = "per-file",
    repository_class: RepositoryFactory | None = None,
    variants: int = 3,
    seed: int = 0,
    stride: int = 1,
    autocheckpoint: int = 8,
    max_failures: int = 50,
    crashes: bool = True,
    only: int | None = None,
    harness: Any = None,
) -> SweepReport:
    """Power loss at every I/O step of an operation lifecycle (OP-19..OP-21): the program of
    :func:`scopecheck.crashsim.lifecycle.lifecycle_program` (two lanes: frames, tool batches,
    checkpoints with memos, settlement, outcomes, cancellation, terminal cleanup with retirement, a
    later operation) crashed at every ``stride``-th write/sync, every post-crash image reopened and
    checked as an acknowledged prefix (:func:`crash_sweep`) and against the lifecycle
    invariants (:func:`scopecheck.crashsim.lifecycle.lifecycle_problems`)."""
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
        invariants=lifecycle_checker(program),
        sweep_name="lifecycle-crash" if crashes else "lifecycle-power-loss",
    )
    report.failures = [
        attrs.evolve(
            f,
            reproducer=(
                f"lifecycle_crash_sweep({size!r}, layout={layout!r}, seed={seed}, "
                f"variants={variants}, autocheckpoint={autocheckpoint}, only={f.fault_at})"
            ),
        )
        if f.fault_at is not None
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
) -> SweepReport:
    """Fail the n-th I/O call once or persistently; commits fail cleanly (CRASH-SQL-4).
    ``only=n`` checks just that fault point (a replay)."""
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
            points = range(0, report.io_calls, stride) if only is None else [only]
            for n in points:
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
                    report.failures.append(
                        SweepFailure(report.sweep, n, "in-process", len(outcome.acked), seen)
                    )
                # The faults are over (the process lives on): reopen the real files.
                snap, reopen_problem = _reopen_snapshot(box, box.work)
                report.states += 1
                problem = reopen_problem
                if problem is None and snap not in _io_candidates(workload, outcome):
                    problem = "after the faults a reopen shows a non-model state"
                if problem is not None:
                    report.failures.append(
                        SweepFailure(report.sweep, n, "reopen", len(outcome.acked), problem)
                    )
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
    failing; a clean reopen afterwards must show every commit (CRASH-SQL-5)."""
    report = SweepReport(f"recovery-{mode}", layout)
    started = time.perf_counter()
    expected = prefix_snapshots(workload)
    box = _Sandbox(layout, None)
    try:
        with _vfs() as vfs:
            clean = run_workload(box, vfs, workload, FaultPlan(), autocheckpoint=0)
            assert clean.before_close is not None
            files = disk_model(box.base, clean.calls[: clean.before_close])
            image = post_crash_images(files, random.Random(0), 0)[-1]  # everything written
        with _vfs(count_reads=True) as vfs:
            materialise(image, box.work, box.check)
            vfs.reset()
            report.io_calls = _attempt_open(box, vfs, expected[-1], report, None)
            for n in range(0, report.io_calls, stride):
                materialise(image, box.work, box.check)
                vfs.reset(FaultPlan(n, mode))
                _attempt_open(box, vfs, expected[-1], report, n)
                report.fault_points += 1
                vfs.reset()
                snap, problem = _reopen_snapshot(box, box.check)
                report.states += 1
                if problem is None and snap != expected[-1]:
                    problem = "after a failed recovery a clean reopen lost commits"
                if problem is not None:
                    report.failures.append(
                        SweepFailure(report.sweep, n, "clean-reopen", len(workload), problem)
                    )
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
                SweepFailure(report.sweep, n, "faulty-reopen", -1, "wrong state read")
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
                    SweepFailure("sigkill", trial, f"trial {trial}", acked, problem)
                )
        finally:
            box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def explore(
    *,
    layout: Layout = "per-file",
    budget: float = 10.0,
    seed: int = 0,
    repository_class: RepositoryFactory | None = None,
) -> SweepReport:
    """Crash sweeps over fresh random workloads until ``budget`` seconds are spent: the SQLite
    half of ``scopecheck fuzz``'s crash injection.  Each workload also gets its single-I/O-fault
    runs (:func:`io_error_sweep`, a call failing once, or persistently on odd rounds), counted
    in ``io_fault_runs``.  Failures name their sweep and the workload seed."""
    total = SweepReport("explore", layout)
    started = time.perf_counter()
    round_number = 0
    while time.perf_counter() - started < budget and not total.failures:
        workload_seed = seed + round_number
        workload = make_workload(workload_seed, transactions=6, big_every=3)
        report = crash_sweep(
            workload,
            layout=layout,
            repository_class=repository_class,
            variants=2,
            seed=workload_seed,
            stride=1 + round_number % 2,
            workload_label=f"make_workload({workload_seed}, transactions=6, big_every=3)",
        )
        _tally(total, report, workload_seed)
        if not total.failures and time.perf_counter() - started < budget:
            mode: Literal["once", "persistent"] = "persistent" if round_number % 2 else "once"
            faults = io_error_sweep(
                workload, layout=layout, mode=mode, repository_class=repository_class
            )
            faults.failures = [
                attrs.evolve(
                    f,
                    reproducer=f"io_error_sweep(make_workload({workload_seed}, transactions=6, "
                    f"big_every=3), layout={layout!r}, mode={mode!r}, only={f.fault_at})",
                )
                for f in faults.failures
            ]
            _tally(total, faults, workload_seed)
            total.io_fault_runs += faults.fault_points
        round_number += 1
    total.seconds = time.perf_counter() - started
    return total


def _tally(total: SweepReport, report: SweepReport, workload_seed: int) -> None:
    total.io_calls += report.io_calls
    total.fault_points += report.fault_points
    total.states += report.states
    total.failures.extend(
        attrs.evolve(f, sweep=f"{report.sweep}(workload seed {workload_seed})")
        for f in report.failures
    )


def delete_crash_sweep(
    *, variants: int = 3, seed: int = 0, repository_class: RepositoryFactory | None = None
) -> SweepReport:
    """Container layout: crash at every I/O call of ``delete`` of a Session holding session
    and scoped rows (SQLITE-12, CRASH-SQL-3).  After any crash the victim is either listed
    with its whole state (never after an acknowledged delete) or gone with no row left in any
    table, and the other Session is untouched."""
    report = SweepReport("delete-crash", "shared")
    started = time.perf_counter()
    victim_workload = make_workload(seed, transactions=5, big_every=2)
    victim_state = prefix_snapshots(victim_workload)[-1]
    empty_state = prefix_snapshots([])[0]
    rng = random.Random(seed)
    box = _Sandbox("shared", None)
    try:
        clock = StepClock()
        repo = open_repository("shared", box.work, None, clock)
        victim = repo.create("victim")
        for index, writes in enumerate(victim_workload):
            clock.at(index)
            victim.commit(writes)
        repo.close()
        box.base = read_tree(box.work)
        with _vfs() as vfs:
            plan_count = None
            k = 0
            while plan_count is None or k < plan_count:
                box.restore()
                vfs.reset(FaultPlan(k if plan_count is not None else None, "crash"))
                acked = False
                deleting: Any = None
                try:
                    deleting = open_repository(
                        "shared", box.work, repository_class, StepClock(), vfs.vfs_name
                    )
                    deleting.delete("victim")
                    acked = True
                    deleting.close()
                except SimulatedCrash:
                    pass
                finally:
                    if deleting is not None:
                        deleting.abandon()
                        _close_quietly(deleting.connection)
                if plan_count is None:
                    plan_count = len(vfs.calls)
                    report.io_calls = plan_count
                    continue
                report.fault_points += 1
                files = disk_model(box.base, vfs.calls)
                for image in post_crash_images(files, rng, variants):
                    report.states += 1
                    problem = _check_delete_image(box, image, acked, victim_state, empty_state)
                    if problem is not None:
                        report.failures.append(
                            SweepFailure(report.sweep, k, image.label, int(acked), problem)
                        )
                k += 1
    finally:
        box.cleanup()
    report.seconds = time.perf_counter() - started
    return report


def _check_delete_image(
    box: _Sandbox, image: Image, acked: bool, victim_state: Snapshot, empty_state: Snapshot
) -> str | None:
    materialise(image, box.work, box.check)
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
