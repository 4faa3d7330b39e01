"""Crash exploration of a backend in another process, from its system calls (CRASH-SYS-*).

Any backend that runs as a child speaking the process protocol -- a Python factory taking
``root`` (through ``scopecheck serve``), or a command in any language -- gets the same crash
checks as a backend doing its I/O through ``scopecheck.FileSystem``:

1. **Record.**  A seeded workload (creates, commits, restarts, a delete) runs once with every
   child under ``strace``; each child's trace becomes a ``Timeline``
   (:mod:`scopecheck.crashsim.syscall_ops`) of file operations under the root, with the moment
   each response left the process (its acknowledgement, CRASH-SYS-2).
2. **Crash states, most telling first.**  The crash points are ordered by
   :mod:`scopecheck.crashsim.coverage` -- around every acknowledgement, sync, rename and unlink
   first, then spread over the whole trace -- and before each the ``Volume``
   (:mod:`scopecheck.crashsim.persistence`) gives the process-crash image and the power-loss
   images of the persistence model (CRASH-SYS-1, CRASH-SYS-3, CRASH-COV-1).  What was covered
   is counted; a phase that did not reach every acknowledged step is incomplete
   (CRASH-COV-2).
3. **Check.**  A checker child reopens each image (a ``hello`` over a copy of it) and
   :class:`ImageChecker` applies the crash rules: it opens (CRASH-FS-1), it is the model after
   the acknowledged steps or one more (CRASH-FS-2, CRASH-FS-6 for power loss), the next
   commit's seqs are above every acknowledged one (CRASH-FS-3), and a second reopen agrees
   (CRASH-FS-4).  The checker child is replaced every :data:`CHECKER_LIFETIME` images, and a
   failure is confirmed on a fresh child; one that needs the child's history says so and keeps
   that history for its replay.
4. **Crash the recovery.**  The reopen of some images is itself recorded under strace and
   crashed before each of its mutating operations (CRASH-FS-5).
5. **Faults and kills.**  The workload runs again with one mutating call failed by strace's
   fault injection (EIO, ENOSPC, EACCES: CRASH-FS-9..11 semantics, CRASH-SYS-6), or with the
   child killed by SIGKILL at that call (a real process crash, CRASH-SYS-7).  The trace says
   which call the fault hit; a run whose fault missed the call it aimed at (strace counts calls
   per thread) is dropped and counted as a limit, never judged (CRASH-COV-3).  Besides the
   disk the run leaves, the power-loss image of its trace is checked.

A failure does not end the exploration: each distinct failure (by rule and kind of crash
point) is kept, up to :data:`MAX_FAILURES`, each as a :class:`SyscallReproducer` holding the
recorded operations.  ``scopecheck replay`` rebuilds a crash image from them and checks it
again without strace (CRASH-SYS-9); a fault or kill reproducer is rerun until it reproduces,
or says it did not in :data:`REPLAY_TRIES` tries.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.coverage import (
    CrashCoverage,
    acknowledgement_points,
    crash_points,
    ordered_passes,
)
from scopecheck.crashsim.fuse_faults import FaultMount, FaultPlan
from scopecheck.crashsim.fuse_faults import unavailable as fuse_unavailable
from scopecheck.crashsim.generic_sweep import ModelStates, model_states, workload
from scopecheck.crashsim.jsonl_sweep import BASE_TIME, StepClock, describe
from scopecheck.crashsim.jsonl_workloads import Workload, workload_from_json
from scopecheck.crashsim.persistence import (
    FileOp,
    Image,
    Volume,
    call_cuts,
    coarser_tears,
    op_from_json,
    op_to_json,
    power_image,
    process_crash,
)
from scopecheck.crashsim.strace import Fd, Syscall, read_trace, strace_command
from scopecheck.crashsim.syscall_ops import Finding, Timeline, extract
from scopecheck.models.addresses import value
from scopecheck.models.errors import ProtocolError, ScopecheckError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value
from scopecheck.process.client import BackendProcess, ProcessRepository

SESSION = "s"
_PROBE = value("scopecheck.probe", "after-crash")
#: The reproducer format written by :meth:`SyscallReproducer.to_json`.
REPRODUCER_VERSION = 2
#: Stands for the interpreter running scopecheck in a stored command, so a reproducer replays
#: on another machine (or venv).
PYTHON = "{python}"

#: The faults a mutating call can be given (strace's ``error=`` names), by call name.
FAULTS: dict[str, tuple[str, ...]] = {
    "write": ("EIO", "ENOSPC"),
    "pwrite64": ("EIO", "ENOSPC"),
    "writev": ("EIO", "ENOSPC"),
    "pwritev": ("EIO",),
    "pwritev2": ("EIO",),
    "fsync": ("EIO",),
    "fdatasync": ("EIO",),
    "ftruncate": ("EIO",),
    "fallocate": ("ENOSPC",),
    "openat": ("EACCES", "ENOSPC"),
    "open": ("EACCES",),
    "rename": ("EACCES",),
    "renameat": ("EACCES",),
    "renameat2": ("EACCES",),
    "unlink": ("EACCES",),
    "unlinkat": ("EACCES",),
    "mkdir": ("EACCES",),
    "mkdirat": ("EACCES",),
    "rmdir": ("EACCES",),
    "link": ("EACCES",),
    "linkat": ("EACCES",),
}
#: Calls whose first argument is the descriptor they act on.
_FD_CALLS = frozenset(
    {"write", "pwrite64", "writev", "pwritev", "pwritev2", "fsync", "fdatasync", "ftruncate",
     "fallocate"}
)  # fmt: skip
#: Calls whose path is ``(dirfd, path)`` in their first two arguments.
_AT_CALLS = frozenset(
    {"openat", "openat2", "renameat", "renameat2", "unlinkat", "mkdirat", "linkat"}
)


def scratch_base() -> str:
    """Where images are written for checking: a RAM disk when there is one."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


# -- recording ------------------------------------------------------------------------------


@attrs.frozen
class Injected:
    """A call strace's fault injection hit: its child, name, the file it acted on (relative
    to the root, or ``None`` when it was not a file under the root), and how many of the
    recording's operations had completed before it."""

    child: int
    name: str
    path: str | None
    position: int
    where: str


@attrs.frozen
class Recording:
    """A workload run under strace: the operations, where each step was acknowledged, what
    each step answered, and what the run could not see."""

    workload: Workload
    ops: tuple[FileOp, ...]
    #: ``acked_at[i]``: how many operations had completed when step ``i`` was acknowledged, or
    #: ``None`` if it never was (an error, or a dead child).
    acked_at: tuple[int | None, ...]
    outcomes: tuple[str, ...]
    findings: tuple[Finding, ...]
    #: ``(child, call index, call name, ordinal)`` of every mutating call, in order: the i-th
    #: is the call of the i-th mutating operation.
    calls: tuple[tuple[int, int, str, int], ...]
    #: The global operation index at which each child's operations start.
    starts: tuple[int, ...]
    model: ModelStates
    killed: bool = False
    #: The calls a fault was injected into (empty for a run without injection).
    injected: tuple[Injected, ...] = ()
    #: The end of the backend's stderr for each child, for messages.
    stderr: tuple[str, ...] = ()

    def acked(self, k: int) -> int:
        """Steps acknowledged before operation ``k`` ran."""
        done = 0
        for at in self.acked_at:
            if at is None or at > k:
                break
            done += 1
        return done

    def allowed(self, k: int) -> tuple[int, ...]:
        """The model states a crash before operation ``k`` may leave (CRASH-SYS-2)."""
        done = self.acked(k)
        last = len(self.workload.steps)
        return (done,) if done >= last else (done, done + 1)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, ScopecheckError):
        return exc.code
    return type(exc).__name__


def run_workload(
    command: Sequence[str],
    wl: Workload,
    root: str,
    cwd: str,
    traces: str,
    *,
    inject: tuple[int, str] | None = None,
    traced: bool = True,
    fired: Callable[[], bool] | None = None,
) -> Recording:
    """Run ``wl`` with each child under strace (trace files in ``traces``); ``inject`` is
    ``(child, strace inject expression)``.  Every step runs even after one fails (its outcome
    is its error code); a dead child is restarted for the next restart step only.  A run with
    a fault stops once the child after the faulted one has reopened the Session -- for a
    fault on the FUSE mount, ``fired()`` says when it has happened; ``traced`` False runs it
    without strace (to measure what tracing costs)."""
    clock = StepClock()
    children: list[tuple[BackendProcess, str]] = []
    tails: list[str] = []

    def start() -> ProcessRepository:
        index = len(children)
        trace = os.path.join(traces, f"trace-{index}.txt")
        expressions = [inject[1]] if inject is not None and inject[0] == index else []
        run = strace_command(trace, command, inject=expressions) if traced else list(command)
        process = BackendProcess(run, root, clock, cwd=cwd)
        children.append((process, trace))
        return ProcessRepository(process)

    acks: list[tuple[int, int] | None] = []
    outcomes: list[str] = []
    faulted: int | None = None
    repo: ProcessRepository | None = None
    storage: Any = None
    try:
        for index, step in enumerate(wl.steps):
            clock.at(index)
            try:
                if repo is None:
                    repo = start()
                if step.op == "create":
                    storage = repo.create(SESSION)
                elif step.op == "commit":
                    if storage is None:  # an earlier step failed: nothing to commit on
                        outcomes.append("skipped")
                        acks.append(None)
                        continue
                    storage.commit(list(step.writes))
                elif step.op == "reopen":
                    if storage is not None:
                        with contextlib.suppress(ScopecheckError):
                            storage.close()
                    with contextlib.suppress(ScopecheckError):
                        repo.close()
                    tails.append(repo.process.stderr_tail())
                    repo.process.stop()
                    repo = start()
                    storage = repo.open(SESSION)
                elif step.op == "delete":
                    if storage is not None:
                        storage.close()
                    storage = None
                    repo.delete(SESSION)
                outcomes.append("ok")
                acks.append((len(children) - 1, repo.process.last_request_id))
            except (ScopecheckError, OSError) as exc:
                outcomes.append(_outcome(exc))
                acks.append(None)
            if inject is not None and len(children) > inject[0] + 1:
                break  # the faulted child is gone and its successor has reopened: enough
            if fired is not None:
                if faulted is None and fired():
                    faulted = len(children) - 1
                if faulted is not None and len(children) > faulted + 1:
                    break
    finally:
        if repo is not None:
            with contextlib.suppress(ScopecheckError):
                repo.close()
            tails.append(repo.process.stderr_tail())
        for process, _ in children:
            process.stop()
    if not traced:
        ran = wl if len(outcomes) == len(wl.steps) else Workload(wl.name, wl.steps[: len(outcomes)])
        return _combine(ran, [], acks, outcomes, [], tuple(tails))
    records = [read_trace(trace) for _, trace in children]
    timelines = [
        extract(found, root, cwd, first_handle=1_000_000 * i) for i, found in enumerate(records)
    ]
    ran = wl if len(outcomes) == len(wl.steps) else Workload(wl.name, wl.steps[: len(outcomes)])
    injected = [
        (child, call)
        for child, found in enumerate(records)
        for call in found
        if isinstance(call, Syscall) and call.injected
    ]
    return _combine(ran, timelines, acks, outcomes, injected, tuple(tails), root, cwd)


def _combine(
    wl: Workload,
    timelines: Sequence[Timeline],
    acks: Sequence[tuple[int, int] | None],
    outcomes: Sequence[str],
    injected: Sequence[tuple[int, Syscall]],
    tails: tuple[str, ...],
    root: str = "",
    cwd: str = "",
) -> Recording:
    ops: list[FileOp] = []
    starts: list[int] = []
    calls: list[tuple[int, int, str, int]] = []
    found: dict[tuple[int, int], int] = {}
    for child, tl in enumerate(timelines):
        starts.append(len(ops))
        for ack in tl.acks:
            found[(child, ack.request_id)] = len(ops) + ack.ops
        ops.extend(tl.ops)
        calls.extend((child, call, name, ordinal) for call, name, ordinal in tl.mutating_calls)
    acked_at = tuple(None if a is None else found.get(a) for a in acks)
    hits = tuple(
        _injected(child, call, timelines[child], starts[child], root, cwd)
        for child, call in injected
    )
    return Recording(
        wl,
        tuple(ops),
        acked_at,
        tuple(outcomes),
        tuple(f for tl in timelines for f in tl.findings),
        tuple(calls),
        tuple(starts),
        model_states(wl),
        killed=any(tl.killed_by for tl in timelines),
        injected=hits,
        stderr=tails,
    )


def _call_path(call: Syscall, cwd: str) -> str | None:
    """The absolute path of the file a call acts on, as strace showed it."""
    args = call.args
    if call.name in _FD_CALLS:
        fd = args[0] if args else None
        return fd.path if isinstance(fd, Fd) and fd.path and fd.path.startswith("/") else None
    if call.name in _AT_CALLS and len(args) > 1:
        base, path = args[0], args[1]
    elif args:
        base, path = None, args[0]
    else:
        return None
    if not isinstance(path, bytes):
        return None
    text = path.decode("utf-8", "surrogateescape")
    if os.path.isabs(text):
        return os.path.normpath(text)
    directory = base.path if isinstance(base, Fd) and base.path else cwd
    return os.path.normpath(os.path.join(directory, text))


def _injected(
    child: int, call: Syscall, timeline: Timeline, start: int, root: str, cwd: str
) -> Injected:
    path = _call_path(call, cwd)
    top = os.path.normpath(root)
    relative = None
    if path is not None and (path == top or path.startswith(top + "/")):
        relative = os.path.relpath(path, top) if path != top else ""
    position = start + sum(1 for op in timeline.ops if op.call < call.index)
    where = f"{call.name} of {path or 'a descriptor that is not a file'}"
    return Injected(child, call.name, relative, position, where)


# -- crash states ---------------------------------------------------------------------------


@attrs.frozen
class CrashPoint:
    """A crash before operation ``op_index`` of the recording: ``variant`` is ``process`` or
    one of :meth:`~scopecheck.crashsim.persistence.Volume.power_images`' power-loss variants."""

    op_index: int
    variant: str

    @property
    def power_loss(self) -> bool:
        return not process_crash(self.variant)

    @property
    def family(self) -> str:
        """The kind of crash point, for telling failures apart: ``process``, ``strict``,
        ``torn``, ..."""
        return self.variant.split(":", 1)[0].split("@", 1)[0]


def _rng(seed: int, k: int) -> random.Random:
    """The generator of one crash point's power-loss images: seeded by the point alone, so
    the images of a point are the same in whatever order the points are visited."""
    return random.Random(f"{seed}:{k}")


def _images_here(
    volume: Volume, ops: Sequence[FileOp], k: int, seed: int
) -> Iterator[tuple[CrashPoint, Image]]:
    """The images of a crash before ``ops[k]``: the process crash, the write ``ops[k]`` torn in
    flight at a process crash (a crash mid-``write`` system call), and the power losses."""
    yield CrashPoint(k, "process"), volume.process_image()
    if k < len(ops) and ops[k].kind == "write":
        cuts = call_cuts(ops[k].data, random.Random(f"{seed}:{k}:call"))
        for variant, image in volume.torn_calls(ops[k], cuts):
            yield CrashPoint(k, variant), image
    for variant, image in volume.power_images(_rng(seed, k)):
        yield CrashPoint(k, variant), image


def crash_images(
    ops: Sequence[FileOp], seed: int, points: Sequence[int] | None = None
) -> Iterator[tuple[CrashPoint, Image]]:
    """The crash images of ``ops`` at ``points`` (sorted; default every crash point: before
    each mutating operation, and at the end), in one sweep over the operations."""
    wanted = crash_points(ops) if points is None else points
    volume = Volume()
    done = 0
    for k in wanted:
        while done < k:
            volume.apply(ops[done])
            done += 1
        yield from _images_here(volume, ops, k, seed)


def image_at(
    ops: Sequence[FileOp], point: CrashPoint, seed: int, base: Image | None = None
) -> Image:
    """The image of one crash point, rebuilt from the operations by its variant's name (a
    replay needs no strace); ``base`` is the disk the operations started on (a crash image,
    for a crash during its recovery)."""
    return power_image(ops, point.op_index, point.variant, seed, start=base)


def write_image(image: Image, directory: str) -> None:
    """Materialise ``image`` as real files under ``directory`` (emptied first)."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for name in sorted(image.dirs - {""}, key=lambda d: d.count("/")):
        os.makedirs(os.path.join(directory, name), exist_ok=True)
    for name, data in image.files.items():
        path = os.path.join(directory, name)
        if name in image.links:
            os.symlink(data.decode("utf-8", "surrogateescape"), path)
        else:
            Path(path).write_bytes(data)


def read_image(directory: str) -> Image:
    """The files under ``directory`` as an image (the disk a killed child left)."""
    files: dict[str, bytes] = {}
    dirs = {""}
    links = set()
    for here, subdirs, names in os.walk(directory):
        relative = os.path.relpath(here, directory)
        prefix = "" if relative == "." else relative + "/"
        dirs.update(prefix + d for d in subdirs)
        for name in names:
            path = os.path.join(here, name)
            if os.path.islink(path):
                files[prefix + name] = os.readlink(path).encode("utf-8", "surrogateescape")
                links.add(prefix + name)
            else:
                files[prefix + name] = Path(path).read_bytes()
    return Image(files, frozenset(dirs), frozenset(links))


# -- checking -------------------------------------------------------------------------------

#: Images one checker child reopens before it is replaced by a fresh one, so the history a
#: failure may depend on stays bounded (a replay reopens it all first).  Large: a Python
#: backend takes most of a second to start, which would cost more than the checks.
CHECKER_LIFETIME = 5000


@attrs.frozen
class SyscallFailure:
    rule: str
    problem: str
    point: CrashPoint
    op: str
    expected: list[Any]
    recovered: Any = None

    def __str__(self) -> str:
        where = f"crash before op {self.point.op_index} ({self.op}), {self.point.variant}"
        return f"{where}: {self.rule} {self.problem}"


class ImageChecker:
    """A checker child that reopens image after image (a ``hello`` over each) and checks it
    against the model states the crash point allows; the child is replaced every
    :data:`CHECKER_LIFETIME` images, and ``history`` lists the images the current one has
    checked."""

    def __init__(self, command: Sequence[str], cwd: str, recording: Recording) -> None:
        self.recording = recording
        self.command = list(command)
        self.cwd = cwd
        self.base = tempfile.mkdtemp(prefix="scopecheck-images-", dir=scratch_base())
        self.clock = StepClock()
        self.clock.at(len(recording.workload.steps) + 1)
        self.checked = 0
        self.history: list[CrashPoint] = []
        #: The images the child had checked before the last one.
        self.last_history: tuple[CrashPoint, ...] = ()
        #: The child broke the protocol (or died): the next image gets a new one.
        self.broken = False
        self.process = self._start()

    def _start(self) -> BackendProcess:
        return BackendProcess(
            self.command, os.path.join(self.base, "first"), self.clock, cwd=self.cwd
        )

    def fresh(self) -> None:
        """Replace the checker child with a new one (it has served nothing yet)."""
        with contextlib.suppress(ProtocolError):
            self.process.stop()
        self.history = []
        self.broken = False
        self.process = self._start()

    def close(self) -> None:
        with contextlib.suppress(ProtocolError):
            self.process.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> ImageChecker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def reopen(self, directory: str) -> ProcessRepository:
        """The checker child's repository, started over ``directory``."""
        self.process.request("hello", protocol=1, root=directory)
        return ProcessRepository(self.process)

    def check(
        self, point: CrashPoint, image: Image, allowed: tuple[int, ...]
    ) -> SyscallFailure | None:
        if self.broken or len(self.history) >= CHECKER_LIFETIME:
            self.fresh()
        self.last_history = tuple(self.history)
        self.history.append(point)
        try:
            return self._check(point, image, allowed)
        except ProtocolError:
            self.broken = True
            raise

    def _check(
        self, point: CrashPoint, image: Image, allowed: tuple[int, ...]
    ) -> SyscallFailure | None:
        self.checked += 1
        rec = self.recording
        snapshots = rec.model.snapshots
        expected = [snapshots[i] for i in allowed]
        ops = rec.ops
        op = ops[point.op_index].describe() if point.op_index < len(ops) else "(end of the run)"

        def failure(rule: str, problem: str, recovered: Any = None) -> SyscallFailure:
            if rule == "CRASH-FS-2" and point.power_loss:
                rule = "CRASH-FS-6"
                problem = (
                    f"after power loss ({point.variant}) {problem}: fsync the file's data (and "
                    "its directory, after a create, rename or unlink) before acknowledging"
                )
            return SyscallFailure(
                rule, problem, point, op, [describe(s) for s in expected], recovered
            )

        directory = os.path.join(self.base, f"image-{self.checked % 2}")
        write_image(image, directory)
        try:
            repo = self.reopen(directory)
            present = SESSION in repo.list()
            storage = repo.open(SESSION) if present else None
            got: Snapshot | None = storage.snapshot() if storage is not None else None
        except ProtocolError as exc:
            self.broken = True  # the next image gets a new child
            return failure(
                "CRASH-FS-1", f"reopening the image broke the backend process: {exc.message}"
            )
        except ScopecheckError as exc:
            self.broken = isinstance(exc, ProtocolError)
            return failure("CRASH-FS-1", f"reopen after the crash raised {exc}")
        if storage is None:
            if None not in expected:
                return failure(
                    "CRASH-FS-2", "the Session vanished though its create was acknowledged"
                )
            return None
        if got not in expected:
            return failure("CRASH-FS-2", _mismatch(rec, got, allowed), describe(got))
        matched = allowed[expected.index(got)]
        try:
            done = storage.commit([set_value(_PROBE, self.checked)])
            after = storage.snapshot()
            storage.close()
        except ScopecheckError as exc:
            self.broken = isinstance(exc, ProtocolError)
            return failure("CRASH-FS-3", f"the first commit after recovery raised {exc}")
        floor = rec.model.next_seqs[matched]
        if not done or done[0].seq < floor:
            return failure(
                "CRASH-FS-3",
                f"the first commit after recovery got seq {done[0].seq if done else None}, but "
                f"the recovered state is the model after step {matched}, whose writes used every "
                f"seq below {floor}: a consumed sequence is reused (SEQ-7)",
                describe(got),
            )
        try:
            again_repo = self.reopen(directory)
            again = again_repo.open(SESSION)
            second = again.snapshot()
            again.close()
        except ScopecheckError as exc:
            self.broken = isinstance(exc, ProtocolError)
            return failure("CRASH-FS-4", f"a second reopen raised {exc}")
        if second != after:
            return failure(
                "CRASH-FS-4",
                "a second reopen gives a different state (recovery is not idempotent, or the "
                "commit after recovery was lost)",
                describe(second),
            )
        return None


def _mismatch(rec: Recording, got: Snapshot | None, allowed: tuple[int, ...]) -> str:
    snapshots, steps = rec.model.snapshots, rec.workload.steps
    if all(snapshots[i] is None for i in allowed):
        return "a Session whose delete was acknowledged is back"
    earlier = [i for i in range(min(allowed)) if snapshots[i] == got]
    if earlier:
        lost = [f"{i + 1}:{steps[i].op}" for i in range(earlier[-1], min(allowed))]
        return (
            f"the recovered Session lost acknowledged steps {', '.join(lost)} (it is the model "
            f"after step {earlier[-1]})"
        )
    return (
        "the recovered Session is no state any prefix of the workload produces (part of a "
        "transaction visible, or data changed)"
    )


# -- crashing the recovery --------------------------------------------------------------------


def record_recovery(
    command: Sequence[str], cwd: str, image: Image, base: str, clock_at: int
) -> tuple[FileOp, ...]:
    """The file operations a fresh backend process makes while it reopens ``image`` (lists,
    opens and reads the Session, closes), recorded under strace over a copy of it."""
    root = tempfile.mkdtemp(prefix="recovery-", dir=base)
    trace = os.path.join(base, f"{os.path.basename(root)}.trace")
    clock = StepClock()
    clock.at(clock_at)
    try:
        write_image(image, root)
        process = BackendProcess(strace_command(trace, command), root, clock, cwd=cwd)
        try:
            repo = ProcessRepository(process)
            if SESSION in repo.list():
                storage = repo.open(SESSION)
                storage.snapshot()
                storage.close()
            with contextlib.suppress(ScopecheckError):
                repo.close()
        finally:
            process.stop()
        return extract(read_trace(trace), root, cwd).ops
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(trace)


#: Recovery operations crashed per recorded recovery (the first ones: where repair happens).
RECOVERY_POINTS = 16


# -- reproducers ----------------------------------------------------------------------------


def _point_from_json(data: Any) -> CrashPoint:
    return CrashPoint(int(data["op_index"]), str(data["variant"]))


def _portable(command: Sequence[str], cwd: str) -> list[str]:
    """``command`` without this machine's paths: the interpreter as :data:`PYTHON`, paths
    under ``cwd`` relative to it."""
    shown = []
    for index, part in enumerate(command):
        if index == 0 and part == sys.executable:
            part = PYTHON
        elif part.startswith(cwd.rstrip("/") + "/"):
            part = os.path.relpath(part, cwd)
        shown.append(part)
    return shown


def _runnable(command: Sequence[str]) -> tuple[str, ...]:
    return tuple(sys.executable if part == PYTHON else part for part in command)


@attrs.frozen
class SyscallReproducer:
    """Everything a replay needs: the backend command, the workload, the recorded operations
    and acknowledgements, the crash point (or the fault), and what was found.

    ``recovery_ops`` and ``recovery_point`` name a crash during the recovery of the image at
    ``point`` (CRASH-FS-5); ``history`` the images the checker child had reopened before this
    one, when the failure needed them."""

    spec: str
    command: tuple[str, ...]
    cwd: str
    workload: Workload
    ops: tuple[FileOp, ...]
    acked_at: tuple[int | None, ...]
    point: CrashPoint
    seed: int
    rule: str
    error: str
    #: ``crash``, or ``fault:<child>:<strace inject expression>`` / ``kill:<child>:<...>``.
    mode: str = "crash"
    recovery_ops: tuple[FileOp, ...] = ()
    recovery_point: CrashPoint | None = None
    history: tuple[CrashPoint, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        """What makes two failures distinct: the rule and the kind of crash point."""
        if self.mode != "crash":
            kind, _, expression = self.mode.split(":", 2)
            if expression.startswith(FUSE):
                plan = _fuse_plan(expression)
                partial = "+partial" if plan.partial is not None else ""
                return self.rule, f"{kind}:{plan.op}:{plan.errno}{partial}"
            name, _, rest = expression.partition(":")
            fault = rest.split(":", 1)[0].split("=", 1)[-1]
            return self.rule, kind if kind == "kill" else f"{kind}:{name}:{fault}"
        if self.recovery_point is not None:
            return self.rule, f"recovery:{self.recovery_point.family}"
        return self.rule, self.point.family

    @property
    def kind(self) -> str:
        """What a replay reruns, in words."""
        if self.mode.startswith("fault:"):
            return "an I/O-fault run (the workload rerun with one call failed)"
        if self.mode.startswith("kill:"):
            return "a kill run (the workload rerun with the backend killed at one call)"
        if self.recovery_point is not None:
            return "a crash state during recovery (rebuilt from the recorded operations)"
        return "a crash state (rebuilt from the recorded operations)"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "crash",
            "engine": "syscall",
            "version": REPRODUCER_VERSION,
            "backend": self.spec,
            "spec": self.spec,
            "command": _portable(self.command, self.cwd),
            "cwd": self.cwd,
            "workload": self.workload.to_json(),
            "ops": [op_to_json(op) for op in self.ops],
            "acked_at": list(self.acked_at),
            "op_index": self.point.op_index,
            "variant": self.point.variant,
            "seed": self.seed,
            "rule": self.rule,
            "error": self.error,
            "mode": self.mode,
            "recovery_ops": [op_to_json(op) for op in self.recovery_ops],
            "recovery_point": None
            if self.recovery_point is None
            else attrs.asdict(self.recovery_point),
            "history": [attrs.asdict(point) for point in self.history],
            "replay": "scopecheck replay FILE  (a crash state needs no strace: the image is "
            "rebuilt from 'ops')",
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SyscallReproducer:
        recovery = data.get("recovery_point")
        return cls(
            str(data["spec"]),
            _runnable(data["command"]),
            str(data["cwd"]),
            workload_from_json(data["workload"]),
            tuple(op_from_json(op) for op in data["ops"]),
            tuple(data["acked_at"]),
            CrashPoint(int(data["op_index"]), str(data["variant"])),
            int(data["seed"]),
            str(data["rule"]),
            str(data["error"]),
            str(data.get("mode", "crash")),
            tuple(op_from_json(op) for op in data.get("recovery_ops", ())),
            None if recovery is None else _point_from_json(recovery),
            tuple(_point_from_json(point) for point in data.get("history", ())),
        )


#: How often a fault or kill replay reruns the workload before it says it did not reproduce.
REPLAY_TRIES = 5


def replay(record: dict[str, Any]) -> tuple[bool | None, str]:
    """Check a reproducer again: ``(still failing, report)``.  A crash state is rebuilt from
    its operations and checked by a fresh backend process (after the images of its
    ``history``, when it has one); the report lists the operations up to the crash point with
    each acknowledgement in its place, and the files of the image.  A fault or kill run is
    rerun until it fails again, at most :data:`REPLAY_TRIES` times; one that never does is
    undecided (``None``): not reproduced, and never called fixed."""
    repro = SyscallReproducer.from_json(record)
    cwd = repro.cwd if os.path.isdir(repro.cwd) else os.getcwd()
    repro = attrs.evolve(repro, cwd=cwd)
    rec = Recording(
        repro.workload, repro.ops, repro.acked_at, (), (), (), (0,), model_states(repro.workload)
    )
    if repro.mode != "crash":
        return _replay_fault(repro, rec)
    image = image_at(repro.ops, repro.point, repro.seed)
    shown = image
    if repro.recovery_point is not None:
        shown = image_at(repro.recovery_ops, repro.recovery_point, repro.seed, base=image)
    with ImageChecker(repro.command, repro.cwd, rec) as checker:
        for earlier in repro.history:
            with contextlib.suppress(ValueError):
                checker.check(earlier, image_at(repro.ops, earlier, repro.seed),
                              rec.allowed(earlier.op_index))  # fmt: skip
        found = checker.check(repro.point, shown, rec.allowed(repro.point.op_index))
    lines = [f"replaying {repro.kind}", _story(repro)]
    if repro.recovery_point is not None:
        lines.append(_recovery_story(repro))
    if repro.history:
        lines.append(
            f"the checker child first reopened the {len(repro.history)} images it had reopened "
            "before this one (the failure needed them)"
        )
    lines.append("files after the crash:")
    lines += [f"  {name}: {len(data)} bytes" for name, data in sorted(shown.files.items())]
    if not shown.files:
        lines.append("  (none)")
    if found is None:
        return False, "\n".join([*lines, "the recovered state is allowed now"])
    return True, "\n".join([*lines, f"{found.rule}: {found.problem}"])


def _story(repro: SyscallReproducer) -> str:
    """The workload's operations up to the crash point, each acknowledgement in its place."""
    steps = repro.workload.steps
    k = repro.point.op_index
    shown = [
        f"workload {repro.workload.name} ({len(steps)} steps), crash before operation {k} of "
        f"{len(repro.ops)}, {repro.point.variant}:"
    ]
    acks = {at: i for i, at in enumerate(repro.acked_at) if at is not None}
    first = max(0, k - 12)
    if first:
        shown.append(f"  ... {first} earlier operations")
    for index in range(first, min(k + 1, len(repro.ops) + 1)):
        if index in acks:
            step = acks[index]
            shown.append(f"  -- step {step + 1} ({steps[step].op}) acknowledged")
        if index == k:
            what = repro.ops[k].describe() if k < len(repro.ops) else "(end of the run)"
            shown.append(f"  >> crash here, before: {what}")
        elif index < len(repro.ops):
            shown.append(f"  {index:4} {repro.ops[index].describe()}")
    return "\n".join(shown)


def _recovery_story(repro: SyscallReproducer) -> str:
    point = repro.recovery_point
    assert point is not None
    shown = [f"then a backend reopened that image, and crashed ({point.variant}) during it:"]
    for index, op in enumerate(repro.recovery_ops[: point.op_index + 1]):
        mark = ">> crash here, before:" if index == point.op_index else f"{index:4}"
        shown.append(f"  {mark} {op.describe()}")
    return "\n".join(shown)


def _replay_fault(repro: SyscallReproducer, rec: Recording) -> tuple[bool | None, str]:
    """A fault or kill reproducer is rerun under strace with the same injection, until it
    fails again or :data:`REPLAY_TRIES` runs did not."""
    from scopecheck.crashsim.strace import unavailable

    _, child, expression = repro.mode.split(":", 2)
    head = f"replaying {repro.kind}: {expression} in backend process {int(child) + 1}"
    why = unavailable()
    if why is not None:
        return None, f"{head}\ncannot rerun it: {why}"
    base = tempfile.mkdtemp(prefix="scopecheck-replay-", dir=scratch_base())
    dropped = 0
    try:
        with ImageChecker(repro.command, repro.cwd, rec) as checker:
            for attempt in range(1, REPLAY_TRIES + 1):
                found = Exploration()
                _fault_run(repro.spec, repro.command, repro.cwd, rec, base, found, checker,
                           int(child), expression, -1)  # fmt: skip
                dropped += found.dropped_runs
                if found.failures:
                    failure = found.failures[0]
                    return True, (
                        f"{head}\nreproduced on try {attempt}:\n{failure.rule}: {failure.error}"
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    missed = (
        f" ({dropped} of the runs had the fault land on another call: strace counts calls per "
        "thread)"
        if dropped
        else ""
    )
    return None, (
        f"{head}\nnot reproduced in {REPLAY_TRIES} tries{missed}: this run depends on timing "
        "or on which thread makes the call, so it is neither confirmed nor fixed"
    )


# -- exploring ------------------------------------------------------------------------------

#: Distinct failures (by rule and kind of crash point) an exploration keeps before it stops.
MAX_FAILURES = 8


@attrs.define
class Exploration:
    states: int = 0
    fault_runs: int = 0
    kill_runs: int = 0
    failures: list[SyscallReproducer] = attrs.field(factory=list)
    findings: list[str] = attrs.field(factory=list)
    seconds: float = 0.0
    coverage: CrashCoverage = attrs.field(factory=CrashCoverage)
    #: Fault runs not judged: the fault hit another call than the one aimed at, or none.
    dropped_runs: int = 0
    #: Distinct failures kept before the exploration stops.
    max_failures: int = MAX_FAILURES

    @property
    def full(self) -> bool:
        return len(self.failures) >= self.max_failures

    def known(self, key: tuple[str, str]) -> bool:
        return any(f.key == key for f in self.failures)

    def add(self, failure: SyscallReproducer) -> None:
        """Keep ``failure`` unless one of its kind is kept already (or enough are)."""
        if not self.full and not self.known(failure.key):
            self.failures.append(failure)


#: Fault and kill runs per recorded workload before the next workload is recorded.
FAULT_RUNS_PER_ROUND = 12
#: Of those, the runs made as soon as the crash states around acknowledgements and syncs are
#: checked -- a failed fsync, a partial write, a kill -- before the rest of the crash states,
#: so a fault-only bug is found as early as a crash-only one (the first round always has them).
EARLY_FAULT_RUNS = 3
#: The share of what is left of the budget that a round's crash states get (the rest: its
#: fault and kill runs, then the next round).
STATE_SHARE = 0.5
#: The share of a round's crash-state time spent crashing recoveries.
RECOVERY_SHARE = 0.2


def explore(
    spec: str,
    command: Sequence[str],
    cwd: str,
    budget: float,
    seed: int = 0,
    *,
    transactions: int = 6,
    faults: bool = True,
    on_progress: Callable[[Exploration], None] | None = None,
    max_failures: int = MAX_FAILURES,
    overrun: float = 30.0,
) -> Exploration:
    """Record workloads, one per round, until ``budget`` seconds pass (or ``max_failures``
    distinct failures are found): each round checks the crash states of
    its recording in coverage order, crashes some recoveries, makes its first fault and kill
    runs, checks the rest of its crash states, then (``faults``) makes its other fault and
    kill runs.  A failure does not end the exploration.  The first round's crash
    states after every acknowledgement are checked even past the budget, by at most
    ``overrun`` seconds (CRASH-COV-2)."""
    started = time.perf_counter()
    found = Exploration(max_failures=max_failures)
    deadline = started + budget
    base = tempfile.mkdtemp(prefix="scopecheck-syscall-", dir=scratch_base())
    try:
        round_seed = seed
        while time.perf_counter() < deadline and not found.full:
            first = round_seed == seed
            wl = workload(round_seed, transactions)
            rec = _record(spec, command, wl, cwd, base, found)
            if rec is None:
                break
            now = time.perf_counter()
            states_until = now + (deadline - now) * (STATE_SHARE if faults else 1.0)
            with ImageChecker(command, cwd, rec) as checker:
                runs = functools.partial(
                    _fault_runs, spec, command, cwd, rec, base, deadline, found, checker,
                    on_progress, started, turn=round_seed - seed,
                )  # fmt: skip

                def early(runs: Callable[..., None] = runs, first: bool = first) -> None:
                    if faults and not found.full:
                        runs(limit=EARLY_FAULT_RUNS, at_least=EARLY_FAULT_RUNS if first else 0)

                found.coverage += _check_states(
                    spec, command, cwd, rec, round_seed, checker, base, states_until, found,
                    first=first, on_progress=on_progress, started=started, overrun=overrun,
                    after_priority=early,
                )  # fmt: skip
                if faults and not found.full:
                    runs(start=EARLY_FAULT_RUNS)
            round_seed += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if found.dropped_runs:
        found.findings.append(
            f"fault: {found.dropped_runs} fault runs were dropped, not judged: the fault hit "
            "another call than the one aimed at, or none (strace counts calls per thread, and a "
            "rerun may take another path)"
        )
    found.seconds = time.perf_counter() - started
    return found


def _check_states(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    seed: int,
    checker: ImageChecker,
    base: str,
    until: float,
    found: Exploration,
    *,
    first: bool,
    on_progress: Callable[[Exploration], None] | None,
    started: float,
    overrun: float = 30.0,
    after_priority: Callable[[], None] | None = None,
) -> CrashCoverage:
    """Check ``rec``'s crash states pass by pass (:func:`ordered_passes`) until ``until``,
    crashing the recovery of some images after the third pass; what was covered.  The first
    round's first pass -- a crash state after every acknowledgement -- runs to its end however
    small the budget, unless it takes ``overrun`` seconds more (then the phase is
    incomplete).  A later round that did not finish its first pass counts its states only:
    its acknowledged steps are not claimed either way."""
    points = crash_points(rec.ops)
    after_ack = acknowledgement_points(points, rec.acked_at)
    checked: set[int] = set()
    states = recovery_states = 0
    candidates: list[tuple[CrashPoint, Image]] = []
    stopped = priority_done = False
    passes = ordered_passes(rec.ops, rec.acked_at)
    recover_after = min(2, len(passes) - 1)
    for number, pass_points in enumerate(passes):
        current: int | None = None
        stop_at = until + overrun if first and number == 0 else until
        for point, image in crash_images(rec.ops, seed, pass_points):
            if found.full or time.perf_counter() >= stop_at:
                stopped = True
                break
            if current is not None and point.op_index != current:
                checked.add(current)
            current = point.op_index
            problem = checker.check(point, image, rec.allowed(point.op_index))
            found.states += 1
            states += 1
            if problem is not None:
                _crash_failure(spec, command, cwd, rec, seed, checker, point, image, problem,
                               found)  # fmt: skip
            elif number <= recover_after and point.family in ("torn", "data-kept", "strict"):
                candidates.append((point, image))
            if on_progress is not None and found.states % 50 == 0:
                found.seconds = time.perf_counter() - started
                on_progress(found)
        if stopped:
            break
        if current is not None:
            checked.add(current)
        priority_done = True
        if number == recover_after and candidates:
            now = time.perf_counter()
            recovery_until = now + max(0.0, until - now) * RECOVERY_SHARE
            recovery_states = _crash_recoveries(
                spec, command, cwd, rec, seed, checker, base, candidates, recovery_until, found,
                at_least=1 if first else 0,
            )  # fmt: skip
            states += recovery_states
        if number == recover_after and after_priority is not None:
            after_priority()
            after_priority = None
    if after_priority is not None:  # the passes were cut short: the early runs still happen
        after_priority()
    counted = first or priority_done
    return CrashCoverage(
        points_checked=len(checked) if counted else 0,
        points_total=len(points) if counted else 0,
        states_checked=states,
        acked_covered=sum(1 for k in after_ack if k in checked) if counted else 0,
        acked_total=len(after_ack) if counted else 0,
        recovery_states=recovery_states,
    )


def _crash_failure(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    seed: int,
    checker: ImageChecker,
    point: CrashPoint,
    image: Image,
    problem: SyscallFailure,
    found: Exploration,
) -> None:
    """Keep a crash-state failure, confirmed on a fresh checker child: one that does not
    fail there needed what the child had reopened before, and keeps that history."""
    key = (problem.rule, point.family)
    if found.known(key) or found.full:
        return
    history = checker.last_history
    with ImageChecker(command, cwd, rec) as fresh:
        again = fresh.check(point, image, rec.allowed(point.op_index))
    error = problem.problem + _tearing(rec, point, checker)
    if again is None:
        error += (
            f" (only after the checker process had reopened {len(history)} other images: "
            "state carried over from one root to the next; `hello` must start afresh)"
        )
    found.add(
        _reproducer(
            spec,
            command,
            cwd,
            rec,
            point,
            seed,
            problem.rule,
            error,
            history=() if again is not None else history,
        )
    )


def _tearing(rec: Recording, point: CrashPoint, checker: ImageChecker) -> str:
    """For a failing torn write: the coarsest tearing under which it still fails (a user
    whose disk writes whole 4 KiB blocks needs to know whether the finding is theirs)."""
    if not point.variant.startswith("torn@1:"):
        return ""
    allowed = rec.allowed(point.op_index)
    for granularity, variant, image in coarser_tears(rec.ops, point.op_index, point.variant):
        if checker.check(CrashPoint(point.op_index, variant), image, allowed) is not None:
            return f" (it still fails when writes tear only at {granularity}-byte boundaries)"
    return (
        " (only when a write tears inside a 512-byte sector: a disk that writes whole sectors "
        "atomically does not show it)"
    )


def _crash_recoveries(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    seed: int,
    checker: ImageChecker,
    base: str,
    candidates: list[tuple[CrashPoint, Image]],
    until: float,
    found: Exploration,
    *,
    at_least: int,
) -> int:
    """Record the recovery of candidate images and crash it before each of its first
    :data:`RECOVERY_POINTS` mutating operations (CRASH-FS-5); the states checked."""
    states = 0
    rng = random.Random(seed)
    order = sorted(candidates, key=lambda c: (c[0].family != "torn", rng.random()))
    for done, (point, image) in enumerate(order):
        if time.perf_counter() >= until and done >= at_least:
            break
        if found.full:
            break
        try:
            rops = record_recovery(command, cwd, image, base, len(rec.workload.steps) + 1)
        except ScopecheckError:
            continue  # the image's own check passed: a reopen that fails now is timing
        allowed = rec.allowed(point.op_index)
        volume = Volume(image)
        applied = 0
        mutating = [j for j, op in enumerate(rops) if op.mutating][:RECOVERY_POINTS]
        for j in mutating:
            while applied < j:
                volume.apply(rops[applied])
                applied += 1
            for during, during_image in _images_here(volume, rops, j, seed):
                problem = checker.check(during, during_image, allowed)
                states += 1
                found.states += 1
                if problem is None:
                    continue
                failure = _reproducer(
                    spec, command, cwd, rec, point, seed, "CRASH-FS-5",
                    f"a crash while a backend recovered that image ({during.variant}, before "
                    f"recovery operation {j}: {rops[j].describe()}): {problem.rule} "
                    f"{problem.problem}",
                    recovery_ops=rops, recovery_point=during,
                )  # fmt: skip
                found.add(failure)
                return states
    return states


def _record(
    spec: str, command: Sequence[str], wl: Workload, cwd: str, base: str, found: Exploration
) -> Recording | None:
    root = tempfile.mkdtemp(prefix="root-", dir=base)
    traces = tempfile.mkdtemp(prefix="traces-", dir=base)
    try:
        rec = run_workload(command, wl, root, cwd, traces)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    for finding in rec.findings:
        text = f"{finding.kind}: {finding.text}"
        if text not in found.findings:
            found.findings.append(text)
    bad = [(i, o) for i, o in enumerate(rec.outcomes) if o != "ok"]
    if bad:
        index, outcome = bad[0]
        point = CrashPoint(len(rec.ops), "process")
        tail = next((t.strip() for t in reversed(rec.stderr) if t.strip()), "")
        said = f"; the backend's stderr ends: {tail[-400:]}" if tail else ""
        found.add(
            _reproducer(
                spec, command, cwd, rec, point, 0, "CRASH-FS-7",
                f"without any crash, step {index + 1} ({wl.steps[index].op}) failed with "
                f"{outcome}{said}",
            )
        )  # fmt: skip
        return None
    return rec


def _reproducer(
    spec: str, command: Sequence[str], cwd: str, rec: Recording, point: CrashPoint, seed: int,
    rule: str, problem: str, mode: str = "crash", *, recovery_ops: tuple[FileOp, ...] = (),
    recovery_point: CrashPoint | None = None, history: tuple[CrashPoint, ...] = (),
) -> SyscallReproducer:  # fmt: skip
    return SyscallReproducer(
        spec, tuple(command), cwd, rec.workload, rec.ops, rec.acked_at, point, seed, rule,
        problem, mode, recovery_ops, recovery_point, history,
    )  # fmt: skip


#: The kinds of fault tried first: where durable stores lose data most often (a failed fsync
#: retried, a write that stored part of its bytes).
PREFERRED = ("fsync:EIO", "write:ENOSPC+partial", "kill", "write:EIO", "fdatasync:EIO")


def _fault_plans(rec: Recording, turn: int = 0) -> list[tuple[int, int, str]]:
    """``(child, operation index, strace inject expression)`` for every fault and kill of
    ``rec``'s mutating calls.  Each kind of fault (call and errno) and the kills form a queue
    in coverage order (calls around acknowledgements and syncs first; calls made by commits
    before those of creates, restarts and deletes), and the queues are taken in turn, so even
    a few runs try every kind of fault: a failed fsync as soon as a failed write.  Round
    ``turn`` of an exploration starts each queue ``turn`` places on, so successive rounds aim
    at different calls of each kind.  Faults go through the FUSE mount where it can run (the
    exact call, across threads, and partial writes: CRASH-COV-3), else through strace's
    injection."""
    # an operation knows its system call; one call may make several operations
    calls = {(child, call): (name, ordinal) for child, call, name, ordinal in rec.calls}
    fuse = _fuse_plans(rec) if fuse_unavailable() is None else None
    queues: dict[str, list[tuple[int, int, str]]] = {}
    seen: set[tuple[int, int]] = set()
    for pass_points in ordered_passes(rec.ops, rec.acked_at):
        for k in pass_points:
            if k >= len(rec.ops):
                continue
            child = max(0, bisect.bisect_right(rec.starts, k) - 1)
            found = calls.get((child, rec.ops[k].call))
            if found is None or (child, rec.ops[k].call) in seen:
                continue
            seen.add((child, rec.ops[k].call))
            name, ordinal = found
            if fuse is not None:
                for plan in fuse.get(k, ()):
                    partial = "+partial" if plan.partial is not None else ""
                    queues.setdefault(f"{plan.op}:{plan.errno}{partial}", []).append(
                        (child, k, _fuse_expression(plan))
                    )
            else:
                for errno in FAULTS.get(name, ()):
                    queues.setdefault(f"{name}:{errno}", []).append(
                        (child, k, f"{name}:error={errno}:when={ordinal + 1}")
                    )
            queues.setdefault("kill", []).append(
                (child, k, f"{name}:signal=SIGKILL:when={ordinal + 1}")
            )
    steps = rec.workload.steps

    def in_commit(plan: tuple[int, int, str]) -> bool:
        step = rec.acked(plan[1])
        return step < len(steps) and steps[step].op == "commit"

    for queue in queues.values():  # calls made by commits first: most of what a store does
        queue.sort(key=lambda plan: not in_commit(plan))
    plans: list[tuple[int, int, str]] = []
    kinds = sorted(queues, key=lambda kind: PREFERRED.index(kind) if kind in PREFERRED else 99)
    rotated = [
        queues[kind][turn % len(queues[kind]) :] + queues[kind][: turn % len(queues[kind])]
        for kind in kinds
    ]
    for step in itertools.zip_longest(*rotated):
        plans.extend(plan for plan in step if plan is not None)
    return plans


#: A fault planned on the FUSE mount (:mod:`scopecheck.crashsim.fuse_faults`):
#: ``fuse=<op>:<errno>:<ordinal>:<partial bytes or ->:<path>``.
FUSE = "fuse="
#: The faults the FUSE mount gives each kind of operation (a write may also write part).
FUSE_FAULTS: dict[str, tuple[str, ...]] = {
    "write": ("EIO", "ENOSPC"),
    "fsync": ("EIO",),
    "create": ("EACCES", "ENOSPC"),
    "truncate": ("EIO",),
    "rename": ("EACCES",),
    "unlink": ("EACCES",),
    "mkdir": ("EACCES",),
    "rmdir": ("EACCES",),
}


def _fuse_expression(plan: FaultPlan) -> str:
    partial = "-" if plan.partial is None else str(plan.partial)
    return f"{FUSE}{plan.op}:{plan.errno}:{plan.ordinal}:{partial}:{plan.path}"


def _fuse_plan(expression: str) -> FaultPlan:
    op, errno, ordinal, partial, path = expression.removeprefix(FUSE).split(":", 4)
    return FaultPlan(op, path, int(ordinal), errno, None if partial == "-" else int(partial))


def _fuse_plans(rec: Recording) -> dict[int, list[FaultPlan]]:
    """The FUSE faults of each mutating operation of ``rec``, by operation index: the call
    named as the mount counts it -- the n-th write, fsync, truncate, rename (by source),
    unlink, mkdir or rmdir on that path, or the n-th open that creates it -- across every
    process and thread of the run."""
    counts: dict[tuple[str, str], int] = {}
    exists: set[str] = set()
    plans: dict[int, list[FaultPlan]] = {}

    def count(op: str, path: str) -> int:
        counts[(op, path)] = counts.get((op, path), 0) + 1
        return counts[(op, path)]

    for k, op in enumerate(rec.ops):
        kind, path = op.kind, op.path
        name: str | None = None
        if kind == "write":
            name = "write"
        elif kind == "sync" and path:
            name = "fsync"
        elif kind == "truncate":
            name = "truncate"
        elif kind == "open" and "create" in op.flags and path not in exists:
            name = "create"
        elif kind == "open" and "trunc" in op.flags:
            name = "truncate"
        elif kind in ("rename", "unlink", "mkdir", "rmdir"):
            name = kind
        if (kind == "open" and "create" in op.flags) or kind == "mkdir":
            exists.add(path)
        elif kind in ("unlink", "rmdir"):
            exists.discard(path)
        elif kind == "rename":
            exists.discard(path)
            exists.add(op.target)
        if name is None:
            continue
        ordinal = count(name, path)
        found = [FaultPlan(name, path, ordinal, errno) for errno in FUSE_FAULTS[name]]
        if name == "write" and len(op.data) >= 2:
            found.append(FaultPlan(name, path, ordinal, "ENOSPC", len(op.data) // 2))
        plans[k] = found
    return plans


def _fault_runs(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    base: str,
    deadline: float,
    found: Exploration,
    checker: ImageChecker,
    on_progress: Callable[[Exploration], None] | None,
    started: float,
    limit: int = FAULT_RUNS_PER_ROUND,
    at_least: int = 0,
    turn: int = 0,
    start: int = 0,
) -> None:
    """Fail up to ``limit`` mutating calls once each, or kill the child at them, rerunning
    the workload, and check the disk each run leaves (and its power-loss image) against the
    acknowledged steps."""
    for done, (child, k, expression) in enumerate(_fault_plans(rec, turn)[start:limit]):
        if found.full or (time.perf_counter() >= deadline and done >= at_least):
            return
        _fault_run(spec, command, cwd, rec, base, found, checker, child, expression, k)
        if on_progress is not None:
            found.seconds = time.perf_counter() - started
            on_progress(found)


def _aimed(rec: Recording, run: Recording, k: int, expression: str) -> str | None:
    """Why the fault of ``run`` did not hit the call it aimed at (operation ``k`` of
    ``rec``; ``-1``: any call on a file under the root), or ``None`` when it did."""
    name = expression.split(":", 1)[0]
    if not run.injected:
        return "the call was never made"
    if len(run.injected) > 1:
        return f"it hit {len(run.injected)} calls"
    hit = run.injected[0]
    if hit.path is None:
        return f"it hit the {hit.where}, not a file under the root"
    if hit.name != name:
        return f"it hit {hit.where}"
    if 0 <= k < len(rec.ops) and hit.path != rec.ops[k].path:
        return f"it hit {hit.where}, not {rec.ops[k].path}"
    return None


def _fault_run(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    base: str,
    found: Exploration,
    checker: ImageChecker,
    child: int,
    expression: str,
    k: int,
) -> None:
    """One faulted or killed rerun of ``rec``'s workload aimed at operation ``k``, and its
    check; a fault that missed its call is dropped (CRASH-COV-3)."""
    kill = "SIGKILL" in expression
    root = tempfile.mkdtemp(prefix="root-", dir=base)
    traces = tempfile.mkdtemp(prefix="traces-", dir=base)
    fired: bool | None = None
    try:
        if expression.startswith(FUSE):
            mountpoint = tempfile.mkdtemp(prefix="mount-", dir=base)
            with FaultMount(root, mountpoint, _fuse_plan(expression)) as mount:
                run = run_workload(command, rec.workload, mountpoint, cwd, traces,
                                   fired=lambda: mount.fired is not None)  # fmt: skip
                disk = read_image(mountpoint)
            fired = mount.fired is not None
            os.rmdir(mountpoint)
        else:
            run = run_workload(command, rec.workload, root, cwd, traces, inject=(child, expression))
            disk = read_image(root)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    if kill:
        found.kill_runs += 1
    elif fired is False or (fired is None and _aimed(rec, run, k, expression) is not None):
        found.dropped_runs += 1
        return
    else:
        found.fault_runs += 1
    problem = _check_fault_run(checker, run, disk, expression, kill)
    if problem is not None:
        rule, text = problem
        point = CrashPoint(len(run.ops), "process")
        mode = f"{'kill' if kill else 'fault'}:{child}:{expression}"
        found.add(_reproducer(spec, command, cwd, run, point, 0, rule, text, mode))


def _fold(wl: Workload, chosen: Sequence[int]) -> Snapshot | None:
    """The model's Session after only the steps ``chosen`` (by index, so every commit keeps
    the timestamp of its step); ``ValueError`` when they do not make a run (a commit with no
    Session)."""
    repo = ReferenceRepository()
    session: Any = None
    for index in chosen:
        step = wl.steps[index]
        if step.op == "create":
            if session is not None:
                raise ValueError("create of an existing Session")
            session = repo.create(SESSION)
        elif step.op == "commit":
            if session is None:
                raise ValueError("commit without a Session")
            session.commit(step.writes, BASE_TIME + 1000 * index)
        elif step.op == "delete":
            if session is None:
                raise ValueError("delete without a Session")
            repo.close_session(SESSION)
            repo.delete(SESSION)
            session = None
    return None if session is None else session.snapshot()


def allowed_after(run: Recording, kill: bool) -> list[Snapshot | None]:
    """What the disk may hold after a faulted or killed run: every acknowledged step, no
    failed commit (CRASH-FS-9), a failed create or delete done or not (CRASH-FS-11), and in a
    killed run the step in flight when the child died done or not."""
    steps, outcomes = run.workload.steps, run.outcomes
    failed = [i for i, o in enumerate(outcomes) if o != "ok"]
    optional = [failed[0]] if kill and failed else []
    if not kill:
        optional = [i for i in failed if steps[i].op in ("create", "delete")]
    found: list[Snapshot | None] = []
    for mask in itertools.product((False, True), repeat=len(optional)):
        extra = {i for i, on in zip(optional, mask, strict=True) if on}
        chosen = [i for i, o in enumerate(outcomes) if o == "ok" or i in extra]
        with contextlib.suppress(ValueError, ScopecheckError):
            state = _fold(run.workload, chosen)
            if state not in found:
                found.append(state)
    return found


def _power_loss_at_end(run: Recording) -> Image | None:
    """The strict power-loss image of a run's trace at its end (only what was made durable:
    a failed fsync made nothing durable, CRASH-SYS-1)."""
    if not run.ops:
        return None
    volume = Volume()
    for op in run.ops:
        volume.apply(op)
    for variant, image in volume.power_images(random.Random(0)):
        if variant == "strict":
            return image
    return volume.process_image()  # nothing unsynced: the same disk


def _check_fault_run(
    checker: ImageChecker, run: Recording, disk: Image, expression: str, kill: bool
) -> tuple[str, str] | None:
    """The disk a faulted or killed run leaves, and a power loss at its end, reopen to what
    was acknowledged (CRASH-FS-9..11 for a fault, CRASH-FS-1, -2 and -6 for a kill)."""
    first = next((o for o in run.outcomes if o != "ok"), None)
    if not kill and first in ("OSError", "protocol_error"):
        tail = next((t.strip() for t in reversed(run.stderr) if t.strip()), "")
        said = f"; the backend's stderr ends: {tail[-400:]}" if tail else ""
        return (
            "CRASH-FS-9",
            f"with {expression}, a step failed with {first}, not a scopecheck error with a "
            f"stable code: the I/O error escaped the backend (or killed it){said}",
        )
    allowed = allowed_after(run, kill)
    images: list[tuple[str, Image]] = [("the disk afterwards", disk)]
    power = _power_loss_at_end(run)
    if power is not None and power != disk:
        images.append(("a power loss at the end of the run", power))
    for label, image in images:
        directory = os.path.join(checker.base, "disk")
        write_image(image, directory)
        checker.history.append(CrashPoint(len(run.ops), "process"))
        try:
            repo = checker.reopen(directory)
            got: Snapshot | None = None
            if SESSION in repo.list():
                storage = repo.open(SESSION)
                got = storage.snapshot()
                storage.close()
        except ScopecheckError as exc:
            checker.fresh()
            # an acknowledged commit that is not durable breaks the Session (CRASH-FS-9); a
            # failed create or delete that leaves it unopenable, CRASH-FS-11
            power_loss = label.startswith("a power loss")
            rule = "CRASH-FS-1" if kill else ("CRASH-FS-9" if power_loss else "CRASH-FS-11")
            return rule, f"with {expression}, reopening {label} raised {exc}"
        if got not in allowed:
            power_loss = label.startswith("a power loss")
            rule = ("CRASH-FS-6" if power_loss else "CRASH-FS-2") if kill else "CRASH-FS-9"
            shown = orjson.dumps(describe(got)).decode()
            wanted = " or ".join(orjson.dumps(describe(a)).decode() for a in allowed)
            hint = ""
            if power_loss:
                hint = ": fsync what a step wrote (and its directory) before acknowledging it"
                if any(op.kind == "syncfail" for op in run.ops):
                    hint = (
                        ": an fsync failed in this run, and after a failed fsync the data is "
                        "not on disk even if a later fsync succeeds -- a commit whose fsync "
                        "failed must not be acknowledged"
                    )
            return rule, f"with {expression}, {label} holds {shown}, not {wanted}{hint}"
    return None
