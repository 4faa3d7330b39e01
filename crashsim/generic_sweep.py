"""Crash exploration of *any* backend that does its file I/O through :mod:`scopecheck.impl.fs`.

The JSONL sweep (:mod:`scopecheck.crashsim.jsonl_sweep`) knows the JSONL format (sidecars, headers,
``nextSeq``); this one knows nothing about the files.  It needs only a factory
``factory(clock, *, fs, root) -> Repository`` that keeps every file under ``root``, does every
file operation through ``fs`` (a :class:`~scopecheck.impl.fs.FileSystem`) and, called again over the
same ``root``, reopens what is there (rules CRASH-FS-1..8 in ``spec/rules/crash_fs.toml``).

How: a seeded workload of creates, commits (retirements included), restarts and a delete
runs once through :class:`~scopecheck.crashsim.fs_recorder.RecordingFs` on a pyfakefs
sandbox, recording every mutating operation with the workload step it ran in; the reference
model (``scopecheck.models.reference``) runs beside it.  :mod:`scopecheck.crashsim.fs_source`
turns the recorded calls into the persistence model's operations, and the exploration loop
(:mod:`scopecheck.crashsim.explore`, the one every source runs through) builds the images of
the one persistence model before each of them (:mod:`scopecheck.crashsim.persistence`,
CRASH-SYS-1): the process crash, a write torn in flight, and -- in ``unsynced`` mode -- power
loss.  Each image is loaded into one reused sandbox, the user's factory reopens it, and
:class:`Checker` compares with the model:

* reopening must not raise — not even ``corrupt``: every image is one a real disk can hold
  after a crash, so a backend that cannot open it loses the Session (CRASH-FS-1);
* the recovered Session equals the model after the step the crash hit or the one before it —
  every acknowledged transaction present, none partly visible, an acknowledged create still
  there and an acknowledged delete still gone (CRASH-FS-2; CRASH-FS-6 for power-loss images);
* the next commit gets sequences above every acknowledged write (SEQ-7) (CRASH-FS-3);
* a second reopen gives the same state, probe commit included (CRASH-FS-4);
* a crash at any mutating operation of the recovery itself is survived (CRASH-FS-5): a
  process crash there for every image (the checker's own), and -- in ``unsynced`` mode, for
  an image whose reopen repaired something -- a power loss there (the loop's recovery
  crashes), where a repair made durable in the wrong order shows.

:func:`sweep` checks every crash state of one workload, then runs it once per single I/O
fault without a crash (:mod:`scopecheck.crashsim.generic_faults`, CRASH-FS-9..11).
:func:`explore` -- what ``scopecheck validate`` and ``fuzz`` run for an ``fs``+``root``
factory -- gives :class:`FsSource` to the exploration loop: a workload per round, crash points
in coverage order, fault runs with their share, distinct failures kept (CRASH-COV-1..5).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import orjson
from pyfakefs.fake_file import FakeDirectory

from scopecheck.crashsim.coverage import crash_points
from scopecheck.crashsim.explore import (
    MAX_FAILURES,
    OVERRUN,
    Exploration,
    Findings,
    Images,
    Plan,
    check_passes,
)
from scopecheck.crashsim.explore import explore as explore_rounds
from scopecheck.crashsim.failure import BadReproducer, CrashFailure, profiles_text
from scopecheck.crashsim.fault_check import FaultRerun
from scopecheck.crashsim.fs_recorder import FSYNCS, Op, RecordingFs, SimulatedCrash
from scopecheck.crashsim.fs_session import EMPTY, ROOT, SESSION, Factory, read_session
from scopecheck.crashsim.fs_source import absolute, acknowledged_at, file_ops
from scopecheck.crashsim.jsonl_sweep import (
    MODES,
    CrashState,
    Mode,
    ModelStates,
    SandboxRound,
    allowed_for,
    drive_steps,
    model_states,
    replay_verdict,
    trace_failure,
)
from scopecheck.crashsim.jsonl_workloads import Step, Workload, generated, workload_from_json
from scopecheck.crashsim.persistence import PROFILES, FileOp, Image, Profile, power_image
from scopecheck.crashsim.points import Variant, parse_variant
from scopecheck.crashsim.recovery import (
    Broken,
    Expected,
    Extra,
    after_power_loss,
    close,
    error_text,
    image_key,
    judge,
    read_again,
)
from scopecheck.crashsim.sandbox import Sandbox, StepClock, describe, render_files, show_files
from scopecheck.crashsim.shards import Shard
from scopecheck.models.addresses import value
from scopecheck.models.errors import UsageError
from scopecheck.models.records import Snapshot
from scopecheck.models.writes import set_value

#: A crash during recovery is tried before each of the recovery's first this many mutating
#: calls (CRASH-FS-5): a repair is done in its first few; a long start-up is not a repair.
RECOVERY_CRASHES = 16

SKIPPED = "skipped (backend does not take a FileSystem)"


def workload(seed: int, transactions: int = 6) -> Workload:
    """A seeded workload: ``create``, ``transactions`` random commits (entries, usage, values,
    lists, retirements) with a restart every third, and for odd seeds a delete, a new create
    under the same id and one commit (so a resurrected or merged old Session shows)."""
    base = generated(seed, transactions, reopen_every=3)
    steps = list(base.steps)
    if seed % 2:
        steps += [
            Step("delete"),
            Step("create"),
            Step("commit", (set_value(value("app", "a"), "after delete"),)),
        ]
    return Workload(
        f"fs-{transactions}-seed{seed}",
        tuple(steps),
        f"{base.description}{', then delete and create again' if seed % 2 else ''}",
    )


# -- running a workload --------------------------------------------------------------------------


def run_steps(
    factory: Factory,
    fs: Any,
    steps: tuple[Step, ...],
    clock: StepClock,
    on_step: Callable[[int], None] | None = None,
) -> None:
    """Run ``steps`` through ``factory`` over ``fs``; ``reopen`` is a restart: close the
    handle and the repository, then call the factory again over the same root."""
    repo, storage = drive_steps(
        lambda: factory(clock, fs=fs, root=ROOT), steps, clock, on_step, restart_on_reopen=True
    )
    if storage is not None:
        storage.close()
    close(repo)


@attrs.frozen
class Trace:
    """A workload's recorded calls (``ops``), the same as the persistence model's operations
    (``file_ops``, CRASH-SYS-1), and ``acked_at[i]``: how many of those had completed when
    step ``i`` was acknowledged (CRASH-SYS-2)."""

    workload: Workload
    ops: tuple[Op, ...]
    model: ModelStates
    initial: Image
    file_ops: tuple[FileOp, ...] = ()
    acked_at: tuple[int | None, ...] = ()


class WorkloadFailed(Exception):
    """The backend failed the workload without any crash (CRASH-FS-7)."""


def trace(factory: Factory, wl: Workload) -> Trace:
    box = Sandbox()
    initial = box.state()
    recorder = RecordingFs(box.fs)

    def on_step(index: int) -> None:
        recorder.step = index

    model = model_states(wl)
    existed = os.path.lexists(ROOT)  # on the real disk, where ROOT has no business
    try:
        run_steps(factory, recorder, wl.steps, StepClock(), on_step)
    except Exception as exc:
        _bypassed(existed)
        raise WorkloadFailed(
            f"step {recorder.step} ({wl.steps[recorder.step].op}) raised {exc!r} with no crash"
        ) from exc
    _bypassed(existed)
    outside = [op for op in recorder.ops if not _under_root(op.path, op.target)]
    if outside:
        raise WorkloadFailed(
            f"{outside[0].describe()} is outside the root {ROOT!r}: keep every file under root, "
            "or the crash images cannot hold it"
        )
    try:
        final = read_session(factory, box, StepClock())
    except Exception as exc:
        raise WorkloadFailed(
            f"after the workload, with no crash, reopening raised {exc!r}"
        ) from exc
    if final != model.snapshots[-1]:
        raise WorkloadFailed(
            "after the workload, with no crash, a restart does not give the model's Session: "
            f"got {orjson.dumps(describe(final)).decode()}"
        )
    ops = tuple(recorder.ops)
    converted = file_ops(ops, ROOT, initial)
    return Trace(wl, ops, model, initial, converted, acknowledged_at(converted, len(wl.steps)))


def _bypassed(existed: bool) -> None:
    """A backend that takes ``fs`` but does its own I/O writes the *real* disk at the sweep's
    root: refuse the run (CRASH-FS-7) and remove what it made there, never check it."""
    if existed or not os.path.lexists(ROOT):
        return
    shutil.rmtree(ROOT, ignore_errors=True)
    raise WorkloadFailed(
        f"the backend wrote the real disk at {ROOT!r} instead of going through fs: its file "
        "operations bypass the FileSystem it was given, so no crash state of it can be built. "
        "Give it every file operation through fs, or let the factory take only root "
        "(make_backend(clock, *, root)) to have its system calls traced instead"
    )


def _under_root(*paths: str) -> bool:
    return all(not p or p == ROOT or p.startswith(ROOT + "/") for p in paths)


# -- checking ----------------------------------------------------------------------------------


_PROBE = value("scopecheck.probe", "after-crash")


class Checker:
    """Reopens crash states with the user's factory on one sandbox and checks them."""

    def __init__(
        self, factory: Factory, tr: Trace, mode: Mode, *, recovery: bool = True, seed: int = 0
    ) -> None:
        self.factory = factory
        self.seed = seed
        self.trace = tr
        self.mode = mode
        self.recovery = recovery
        self.box = Sandbox()
        self.clock = StepClock()
        self.clock.at(len(tr.workload.steps) + 1)
        self.states = 0
        self.recovery_states = 0
        #: The last image checked whose reopen wrote, renamed or removed something (a
        #: repair) -- the kind worth crashing the recovery of at power loss -- with that
        #: reopen's recorded calls and the Session it gave.
        self.repaired: tuple[Image, tuple[Op, ...], Snapshot] | None = None
        #: The checks that passed, by image and the model states they allowed: the states
        #: each counted and the repair it found, if any (see :meth:`check`).
        self._passed: dict[Any, tuple[int, tuple[tuple[Op, ...], Snapshot] | None]] = {}
        #: The Sessions power-loss images of recoveries opened to, by image (see
        #: :meth:`check_power_loss_in_recovery`).
        self._opened: dict[Any, list[Snapshot | None]] = {}

    def failure(
        self, k: int, variant: str, rule: str, problem: str, *,
        recovery: tuple[int, str] | None = None, shown: dict[str, Any] | None = None,
        recovery_ops: Sequence[FileOp] = (),
    ) -> CrashFailure:  # fmt: skip
        """A failure of the crash image ``(k, variant)`` of this trace (with the operations
        of its recovery, for a power loss during that recovery)."""
        return trace_failure("fs", self.trace, self.mode, self.seed, k, variant, rule, problem,
                             recovery=recovery, shown=shown, recovery_ops=recovery_ops)  # fmt: skip

    def check(self, crash: CrashState) -> CrashFailure | None:
        """Reopen the crash image with the user's factory and judge it with the one recovery
        checker (:func:`~scopecheck.crashsim.recovery.judge`, CRASH-FS-1..4, 6), then crash
        the recovery it made at each of its first operations (CRASH-FS-5).

        Crash points often give an image an earlier point gave (a process crash before an
        fsync and after it leave the same files), allowing the same model states: the check
        of such an image is the one made already -- the same reopen of the same files judged
        against the same states, and the same crashes of the same recovery -- so a passed
        check is not made again; its states count again, and its repair is offered again
        for a power loss during it.  A failed check is always made again (each crash point
        reports its own)."""
        key = (image_key(crash.state), crash.allowed)
        passed = self._passed.get(key)
        if passed is not None:
            self.states += passed[0]
            self.recovery_states += passed[0] - 1
            if passed[1] is not None:
                self.repaired = (crash.state, *passed[1])
            return None
        counted = self.states
        failure = self._check(crash)
        if failure is None:
            repaired = self.repaired
            repair = repaired[1:] if repaired is not None and repaired[0] is crash.state else None
            self._passed[key] = (self.states - counted, repair)
        return failure

    def _check(self, crash: CrashState) -> CrashFailure | None:
        self.states += 1
        box = self.box
        box.load(crash.state)
        tr = self.trace
        expected = Expected(
            tr.model.snapshots, tr.model.next_seqs, [s.op for s in tr.workload.steps],
            crash.allowed,
        )  # fmt: skip
        recorders: list[RecordingFs] = []

        def reopen() -> Any:
            recorders.append(RecordingFs(box.fs))
            return self.factory(self.clock, fs=recorders[-1], root=ROOT)

        before_probe: list[int] = []

        def recovered(storage: Any, state: Snapshot, matched: int) -> None:
            before_probe.append(len(recorders[0].ops))  # the recovery ends here
            return None

        verdict = judge(
            reopen, expected, session=SESSION, probe=set_value(_PROBE, self.states),
            recreate=EMPTY, extra=Extra(recovered=recovered),
        )  # fmt: skip
        if isinstance(verdict, Broken):
            broken = after_power_loss(verdict, crash.variant, crash.power_loss)
            return self._failure(crash, expected, broken.rule, broken.problem, broken.recovered)
        # What the first reopen did before the probe commit: the recovery (CRASH-FS-5).
        recovery_ops = recorders[0].ops[: before_probe[0]] if before_probe else []
        if verdict.state is not None and any(op.kind not in FSYNCS for op in recovery_ops):
            self.repaired = (crash.state, tuple(recovery_ops), verdict.state)
        if self.recovery and recovery_ops and verdict.state is not None:
            reopened = [crash.state]  # the disks known to reopen to verdict.state
            for index, op in enumerate(recovery_ops[:RECOVERY_CRASHES]):
                torn = len(op.data) // 2 if op.kind in ("write", "append") else 0
                for partial in (0, torn) if torn else (0,):
                    self.states += 1
                    self.recovery_states += 1
                    problem = self._crash_in_recovery(
                        crash.state, index, partial, verdict.state, reopened
                    )
                    if problem is not None:
                        where = f" after {partial} of its {len(op.data)} bytes" if partial else ""
                        return self._failure(
                            crash, expected, "CRASH-FS-5",
                            f"crash at op {index} of the recovery ({op.describe()}){where}: "
                            f"{problem}",
                            recovery=(index, f"torn-call::{partial}" if partial else "process"),
                        )  # fmt: skip
        return None

    def _failure(
        self,
        crash: CrashState,
        expected: Expected,
        rule: str,
        problem: str,
        recovered: Snapshot | str | None = None,
        recovery: tuple[int, str] | None = None,
    ) -> CrashFailure:
        return self.failure(
            crash.op_index, crash.variant, rule, problem, recovery=recovery,
            shown={
                "expected": [describe(s) for s in expected.states],
                "recovered": recovered if isinstance(recovered, str) else describe(recovered),
                "files_before": show_files(absolute(crash.state, ROOT)),
                "files_after": show_files(self.box.tree()),
            },
        )  # fmt: skip

    def _reopen(self) -> Snapshot | str | None:
        return read_again(lambda: self.factory(self.clock, fs=self.box.fs, root=ROOT), SESSION)[0]

    def record_recovery(self, state: Image) -> tuple[tuple[FileOp, ...], Snapshot | None]:
        """Reopen ``state`` once under the recorder: the calls of the factory, ``list``,
        ``open`` and reading the Session -- what :meth:`check` records of it -- as the
        persistence model's operations (they start on ``state``), and the Session it gives."""
        self.box.load(state)
        recorder = RecordingFs(self.box.fs)
        repo = self.factory(self.clock, fs=recorder, root=ROOT)
        storage: Any = None
        got: Snapshot | None = None
        try:
            if SESSION in repo.list():
                storage = repo.open(SESSION)
                got = storage.snapshot()
            ops = tuple(recorder.ops)
        finally:
            for thing in (storage, repo):
                with contextlib.suppress(Exception):
                    close(thing)
        return file_ops(ops, ROOT, state), got

    def check_power_loss_in_recovery(
        self, k: int, variant: str, recovery_ops: Sequence[FileOp], j: int, during: str,
        crashed: Image, want: Snapshot | None,
    ) -> CrashFailure | None:  # fmt: skip
        """Power loss (``during``) before operation ``j`` of the recovery of image ``(k,
        variant)``, leaving ``crashed``: the next open must give ``want``, the state the
        uninterrupted recovery gave (CRASH-FS-5) -- a repair made durable in the wrong order
        (a rename before the data it names) shows only here.  Files an earlier power loss
        of this kind left, whose open gave ``want`` already, are answered by that open (the
        same reopen of the same files: the recoveries of two crash points that gave the same
        image are the same)."""
        self.states += 1
        self.recovery_states += 1
        key = image_key(crashed)
        if want in self._opened.get(key, ()):
            return None
        self.box.load(crashed)
        got = self._reopen()
        if got == want:
            self._opened.setdefault(key, []).append(want)
            return None
        shown = got if isinstance(got, str) else orjson.dumps(describe(got)).decode()
        op = recovery_ops[j].describe()
        return self.failure(
            k, variant, "CRASH-FS-5",
            f"power loss during the recovery of that image ({during}, before recovery "
            f"operation {j}: {op}): the next open gives {shown}, not the state of the "
            "uninterrupted recovery: make a repair durable in order (fsync rewritten data "
            "before the rename that puts it in place)",
            recovery=(j, during), recovery_ops=recovery_ops,
            shown={
                "expected": [describe(want)],
                "recovered": got if isinstance(got, str) else describe(got),
                "files_before": show_files(absolute(crashed, ROOT)),
                "files_after": show_files(self.box.tree()),
            },
        )  # fmt: skip

    def _disk(self) -> Image:
        """The sandbox's files and directories now, as an image: what :meth:`Sandbox.state`
        gives, read off the fake tree's nodes in one walk."""
        files: dict[str, bytes] = {}
        dirs = {""}
        stack = [("", self.box.fs._lookup(ROOT))]
        while stack:
            prefix, node = stack.pop()
            for name, child in node.entries.items():
                path = f"{prefix}{name}"
                if isinstance(child, FakeDirectory):
                    dirs.add(path)
                    stack.append((f"{path}/", child))
                else:
                    contents = child.byte_contents
                    files[path] = bytes(contents) if contents else b""
        return Image(files, frozenset(dirs))

    def _crash_in_recovery(
        self,
        state: Image,
        index: int,
        partial: int,
        want: Snapshot,
        reopened: list[Image] | None = None,
    ) -> str | None:
        """Crash the recovery of ``state`` before its op ``index`` (after ``partial`` bytes of
        it, for a write or append), then open again: the state must be ``want`` (CRASH-FS-5).

        ``reopened`` holds disks whose open gave ``want`` already (the crash image itself,
        judged by :meth:`check`, and the disks earlier crashes of this recovery left): a crash
        that leaves one of them -- before the recovery's first write, or at an fsync, which a
        process crash does not undo -- leaves the same disk, whose open is the one already
        made, so it is not made twice.  A disk is its files' names, kinds and bytes: all a
        backend reads through its ``FileSystem``.  Each new disk that opens to ``want`` is
        added."""
        self.box.load(state)
        recorder = RecordingFs(self.box.fs, crash_at=index, partial=partial)
        repo: Any = None
        try:
            repo = self.factory(self.clock, fs=recorder, root=ROOT)
            if SESSION in repo.list():
                repo.open(SESSION).close()
            close(repo)
        except SimulatedCrash:
            recorder.release()  # the crashed process's descriptors go with it
        except Exception as exc:
            return f"the interrupted recovery raised {error_text(exc)}"
        disk = None if reopened is None else self._disk()
        if reopened is not None and disk in reopened:
            return None
        got = self._reopen()
        if got != want:
            shown = got if isinstance(got, str) else orjson.dumps(describe(got)).decode()
            return f"the next open gives {shown}, not the state of the uninterrupted recovery"
        if reopened is not None and disk is not None:
            reopened.append(disk)
        return None


# -- sweeping ----------------------------------------------------------------------------------


@attrs.define
class SweepReport:
    workload: str
    mode: str
    ops: int = 0
    states: int = 0
    recovery_states: int = 0
    #: Single-I/O-fault runs of the workload (CRASH-FS-9..11;
    #: :mod:`scopecheck.crashsim.generic_faults`).
    fault_runs: int = 0
    failures: list[CrashFailure] = attrs.field(factory=list)
    seconds: float = 0.0


class FsRound(SandboxRound):
    """One recorded workload of a factory, as a round of the exploration loop: its images
    are the persistence model's, checked by :class:`Checker` (which crashes each recovery at
    a process crash itself, CRASH-FS-5); the recoveries that repair something are crashed at
    power loss by the loop (:func:`~scopecheck.crashsim.explore.crash_recoveries`), and its
    fault runs are :func:`~scopecheck.crashsim.generic_faults.fault_runs`."""

    def __init__(
        self, factory: Factory, tr: Trace, mode: Mode, seed: int, *, recovery: bool = True
    ) -> None:
        self.fs_checker = Checker(factory, tr, mode, recovery=recovery, seed=seed)
        super().__init__(tr, self.fs_checker, Images(power=mode == "unsynced"), seed)
        self.factory = factory
        self.trace = tr
        #: Images to crash the recovery of, by ``id``: the image (kept alive), its recovery's
        #: recorded calls and the Session that recovery gave (from :meth:`Checker.check`).
        self._repairs: dict[int, tuple[Image, tuple[Op, ...], Snapshot]] = {}
        self._recovered: Snapshot | None = None

    def recovers(self, variant: Variant, image: Image) -> bool:
        """Whether to crash the recovery of ``image`` (just checked) at power loss: only in
        ``unsynced`` mode, and only if its reopen repaired something -- a reopen that only
        reads and syncs leaves nothing a power loss could undo.  Process crashes of every
        recovery are the checker's own (:meth:`Checker.check`)."""
        repaired = self.fs_checker.repaired
        if not (self._images.power and self.fs_checker.recovery) or repaired is None:
            return False
        if repaired[0] is not image:
            return False
        self._repairs[id(image)] = repaired
        return True

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        """The recovery :meth:`Checker.check` recorded when it reopened ``image`` (the same
        calls :meth:`Checker.record_recovery` records, so a replay rebuilds its images)."""
        kept = self._repairs.pop(id(image), None)
        if kept is None or kept[0] is not image:
            try:
                ops, self._recovered = self.fs_checker.record_recovery(image)
            except Exception:
                return None  # the image's own check passed: its reopen is judged there
            return ops
        _, calls, self._recovered = kept
        return file_ops(calls, ROOT, image)

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | None:  # fmt: skip
        """A power loss during the recovery recorded last (the loop crashes a recovery right
        after recording it); process crashes are left to the checker, which crashes every
        recovery at every call itself (CRASH-FS-5)."""
        if not during.power_loss:
            return None
        return self.fs_checker.check_power_loss_in_recovery(
            k, variant.name, recovery_ops, j, during.name, image, self._recovered
        )

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        from scopecheck.crashsim.generic_faults import fault_runs

        report = fault_runs(
            self.factory, self.trace, deadline=deadline, findings=findings, seed=self.seed,
            at_least=at_least, start=start, limit=limit,
        )  # fmt: skip
        return report.runs

    @functools.cached_property  # the trace is fixed: asked once per fault run
    def fault_plan_size(self) -> int:
        from scopecheck.crashsim.generic_faults import fault_plan

        return len(fault_plan(self.trace))


def sweep(
    factory: Factory,
    wl: Workload,
    *,
    mode: Mode = "unsynced",
    seed: int = 0,
    max_failures: int = 1,
    recovery: bool = True,
    deadline: float | None = None,
    faults: bool = True,
    crashes: bool = True,
    profiles: Sequence[Profile] = PROFILES,
) -> SweepReport:
    """Check every crash state of ``wl`` in trace order (one pass of every crash point, in
    the exploration loop) and then, with ``faults``, run it once per single I/O fault
    (:func:`scopecheck.crashsim.generic_faults.fault_runs`), until ``max_failures`` failures
    or ``deadline``; the power-loss images are those of the file-system ``profiles``
    (CRASH-SYS-14)."""
    started = time.perf_counter()
    report = SweepReport(wl.name, mode)
    findings = Findings(max_failures)
    try:
        tr = trace(factory, wl)
    except WorkloadFailed as exc:
        report.failures.append(_workload_failure(wl, mode, exc, seed))
        report.seconds = time.perf_counter() - started
        return report
    report.ops = len(tr.ops)
    rnd = FsRound(factory, tr, mode, seed, recovery=recovery)
    until = float("inf") if deadline is None else deadline
    if crashes:
        check_passes(
            rnd, findings, until=until, first=False, passes=[crash_points(tr.file_ops)],
            profiles=profiles,
        )  # fmt: skip
    report.states = rnd.states
    report.recovery_states = rnd.recovery_states
    if faults and not findings.full and time.perf_counter() < until:
        report.fault_runs = rnd.fault_runs(findings, until, start=0, limit=None, at_least=0)
    report.failures = findings.failures
    report.seconds = time.perf_counter() - started
    return report


@attrs.frozen
class FsSource:
    """The rounds of :func:`explore`: the workload of each seed, recorded through a
    ``FileSystem`` on a pyfakefs sandbox."""

    factory: Factory
    transactions: int = 6
    mode: Mode = "unsynced"

    @contextlib.contextmanager
    def round(self, seed: int, findings: Findings) -> Iterator[FsRound | None]:
        wl = workload(seed, self.transactions)
        try:
            tr = trace(self.factory, wl)
        except WorkloadFailed as exc:
            findings.add(_workload_failure(wl, self.mode, exc, seed))
            yield None
            return
        yield FsRound(self.factory, tr, self.mode, seed)


def explore(
    factory: Factory,
    *,
    budget: float,
    seed: int = 0,
    transactions: int = 6,
    mode: Mode = "unsynced",
    max_failures: int = MAX_FAILURES,
    overrun: float = OVERRUN,
    shard: Shard | None = None,
) -> Exploration:
    """Crash exploration of a factory taking ``fs`` and ``root`` for about ``budget`` seconds:
    fresh seeded workloads, one per round, through the exploration loop
    (:func:`scopecheck.crashsim.explore.explore`: crash states in coverage order, the first
    round's states after every acknowledgement even past the budget by at most ``overrun``
    seconds, fault runs with their share, distinct failures kept up to ``max_failures``;
    ``shard``: its share of a fixed exploration, FLEET-4)."""
    return explore_rounds(
        FsSource(factory, transactions, mode), budget=budget, seed=seed,
        plan=Plan(overrun=overrun, profiles=PROFILES, shard=shard), max_failures=max_failures,
    )  # fmt: skip


def _workload_failure(wl: Workload, mode: str, exc: WorkloadFailed, seed: int) -> CrashFailure:
    return CrashFailure(
        source="fs", rule="CRASH-FS-7", problem=str(exc), run="workload", kind="workload",
        seed=seed, workload=wl.to_json(), variant="no-crash", target={"mode": mode},
    )  # fmt: skip


# -- replay ------------------------------------------------------------------------------------


def rerun_fault_record(failure: CrashFailure, factory: Factory) -> FaultRerun:
    """A fault reproducer of source ``fs`` run once more, for its bundle: the workload is
    traced again without a fault, then run with the recorded call failing."""
    from scopecheck.crashsim.generic_faults import rerun_fault

    try:
        wl = workload_from_json(failure.workload)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a fault reproducer: {exc!r}") from None
    if failure.point is None or not failure.variant.startswith("fault:"):
        raise UsageError("invalid_payload", "a fault reproducer without its call and fault")
    try:
        tr = trace(factory, wl)
    except WorkloadFailed as exc:
        return FaultRerun(None, (), None, f"{wl.name}: the workload itself now fails: {exc}")
    return rerun_fault(factory, tr, failure.point, failure.variant.removeprefix("fault:"))


def replay_record(record: dict[str, Any], factory: Factory) -> tuple[bool | None, str]:
    """Replay a crash reproducer of source ``fs``: (still failing, text showing the steps and
    the files before and after recovery).  A crash image is rebuilt from the saved operations
    by its name, byte for byte, and reopened by the factory as it is now (CRASH-COV-5): a fix
    of the recovery shows here, a fix of how the backend writes shows in a new exploration.
    A fault run reruns the workload with that call failing; a workload failure reruns the
    workload."""
    try:
        failure = CrashFailure.from_json(record)
        wl = workload_from_json(failure.workload)
    except (BadReproducer, KeyError, TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a crash reproducer: {exc}") from None
    mode = str(failure.target.get("mode", "unsynced"))
    if mode not in MODES:
        raise UsageError("invalid_payload", f"unknown crash mode {mode!r}")
    if failure.run in ("workload", "fault"):
        try:
            tr = trace(factory, wl)
        except WorkloadFailed as exc:
            return True, f"{wl.name}: CRASH-FS-7 {exc}"
        if failure.run == "workload":
            return False, f"{wl.name}: the workload now runs and restarts as the model says"
        from scopecheck.crashsim.generic_faults import replay_fault

        assert failure.point is not None
        return replay_fault(factory, tr, failure.point, failure.variant.removeprefix("fault:"))
    evidence = failure.evidence
    if evidence is None or failure.point is None:
        raise UsageError("invalid_payload", "a crash reproducer without its recorded operations")
    op_index, variant = failure.point, failure.variant
    lines = [f"replaying {failure.what}"]
    if failure.profiles:
        lines.append(
            f"file-system profiles: fails {profiles_text(failure.profiles)} (the image is "
            f"rebuilt under {failure.built_under}; CRASH-SYS-15)"
        )
    try:
        crashed = parse_variant(variant)
        image = power_image(
            evidence.ops, op_index, crashed, start=evidence.base, profile=failure.built_under
        )
    except ValueError as exc:
        raise UsageError("invalid_payload", f"the reproducer names no image: {exc}") from None
    tr = Trace(wl, (), model_states(wl), evidence.base, evidence.ops, evidence.acked_at)
    try:
        same = trace(factory, wl).file_ops == evidence.ops
    except WorkloadFailed:
        same = False
    lines.append(
        "the image is rebuilt from the recorded operations, byte for byte; the backend "
        + (
            "still makes those operations"
            if same
            else "now makes other operations (a fix in how it writes shows in a new run of "
            "validate, not here)"
        )
    )
    crash = CrashState(op_index, crashed, image, allowed_for(tr)(op_index))
    checker = Checker(factory, tr, "unsynced" if mode == "unsynced" else "prefix")
    during = failure.recovery_point
    if failure.recovery is not None and during is not None and during.variant.power_loss:
        return _replay_power_loss_in_recovery(
            checker, crash, failure.recovery, evidence.recovery_ops, lines
        )
    found = checker.check(crash)
    after = checker.box.tree()
    ops = tr.file_ops
    last = ops[op_index].step if op_index < len(ops) else len(wl.steps) - 1
    op = ops[op_index].describe() if op_index < len(ops) else "(end of trace)"
    lines += [
        f"{wl.name}: crash before operation {op_index} of {len(ops)} ({op}), {variant}",
        "steps up to the crash: "
        + ", ".join(f"{i + 1}:{_step_text(s)}" for i, s in enumerate(wl.steps[: last + 1])),
        *render_files(
            "files on disk after the crash (before recovery)", absolute(crash.state, ROOT)
        ),
        *render_files("files on disk after recovery (and the checks that passed)", after),
    ]
    return replay_verdict(found, lines)


def _replay_power_loss_in_recovery(
    checker: Checker,
    crash: CrashState,
    recovery: tuple[int, str],
    recorded: Sequence[FileOp],
    lines: list[str],
) -> tuple[bool | None, str]:
    """Replay a power loss during a recovery (CRASH-FS-5): the image of the named power loss
    before recovery operation ``j`` is rebuilt from the recorded recovery's operations, byte
    for byte -- or, when the recovery now makes other operations (it was changed), from those,
    saying so -- and reopened; it must give the state the uninterrupted recovery gives."""
    j, during = recovery
    rops, want = checker.record_recovery(crash.state)
    same = tuple(rops) == tuple(recorded)
    lines.append(
        f"crash before operation {crash.op_index}, {crash.variant}; power loss before recovery "
        f"operation {j}, {during}; "
        + (
            "the recovery makes the recorded operations again: its image is rebuilt from them"
            if same or not rops
            else f"the recovery now makes other operations ({len(rops)}, recorded: "
            f"{len(recorded)}): the crash point of that name in the new recovery is checked"
        )
    )
    used = recorded if same or not rops else rops
    try:
        crashed = power_image(used, j, during, start=crash.state)
    except ValueError:
        lines.append("the new recovery has no such crash point: not reproduced")
        return None, "\n".join(lines)
    lines += render_files("files on disk after the power loss in recovery", absolute(crashed, ROOT))
    found = checker.check_power_loss_in_recovery(
        crash.op_index, crash.variant, used, j, during, crashed, want
    )
    if found is None:
        lines.append("the next open gives the state of the uninterrupted recovery")
        return False, "\n".join(lines)
    lines.append(f"FAILED {found.rule}: {found.problem}")
    return True, "\n".join(lines)


def jsonl_factory(clock: Any, *, fs: Any, root: str) -> Any:
    """Our JSONL backend as a generic factory: the generic sweep run against it proves the
    sweep raises no false alarm on a backend the JSONL sweep already checks (CRASH-FS-*)."""
    from scopecheck.impl.jsonl import JsonlRepository

    return JsonlRepository(root, fs, clock, cwd="/crash")


def _step_text(step: Step) -> str:
    return f"commit({len(step.writes)} writes)" if step.op == "commit" else step.op
