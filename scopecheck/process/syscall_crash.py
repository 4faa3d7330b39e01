"""Crash exploration of a backend in another process, from its system calls (CRASH-SYS-*).

Any backend that runs as a child speaking the process protocol -- a Python factory taking
``root`` (through ``scopecheck serve``), or a command in any language -- gets the same crash
checks as a backend doing its I/O through ``scopecheck.FileSystem``.  This module is the
*source* of those crash states (:class:`SyscallSource`, :class:`SyscallRound`); the loop that
spends the budget on them is the one of every source (:mod:`scopecheck.crashsim.explore`), and
every failure is a :class:`~scopecheck.crashsim.failure.CrashFailure` of source ``syscall``.

1. **Record.**  A seeded workload (creates, commits, restarts, a delete) runs once with every
   child under ``strace``; each child's trace becomes a ``Timeline``
   (:mod:`scopecheck.crashsim.syscall_ops`) of file operations under the root, with the moment
   each response left the process (its acknowledgement, CRASH-SYS-2).
2. **Crash states, most telling first.**  The loop visits the crash points in coverage order
   (CRASH-COV-1, CRASH-COV-2); before each, :func:`~scopecheck.crashsim.explore.point_images`
   gives the process-crash image, the write in flight torn, and the power-loss images of the
   persistence model (CRASH-SYS-1, CRASH-SYS-3).
3. **Check.**  A checker child reopens each image (a ``hello`` over a copy of it) and
   :class:`ImageChecker` applies the crash rules: it opens (CRASH-FS-1), it is the model after
   the acknowledged steps or one more (CRASH-FS-2, CRASH-FS-6 for power loss), the next
   commit's seqs are above every acknowledged one (CRASH-FS-3), and a second reopen agrees
   (CRASH-FS-4).  The checker child is replaced every :data:`CHECKER_LIFETIME` images, and a
   failure is confirmed on a fresh child; one that needs the child's history says so and keeps
   that history (``target["history"]``) for its replay.  A failing torn write says the
   coarsest tearing under which it still fails (CRASH-SYS-12).
4. **Crash the recovery.**  The reopen of torn, ``data-kept`` and ``strict`` images is itself
   recorded under strace and crashed (CRASH-FS-5).
5. **Faults and kills.**  The workload runs again with one mutating call failed -- on the FUSE
   mount, or by strace's fault injection where FUSE cannot run (EIO, ENOSPC, EACCES:
   CRASH-FS-9..11 semantics, CRASH-SYS-6) -- or with the child killed by SIGKILL at that call
   (a real process crash, CRASH-SYS-7).  A run whose fault missed the call it aimed at is
   dropped and counted as a limit, never judged (CRASH-COV-3).  The disk the run leaves and
   the power-loss images of its trace are judged by the one fault checker
   (:mod:`scopecheck.crashsim.fault_check`).

A crash or recovery failure holds the recorded operations (its ``evidence``):
``scopecheck replay`` rebuilds the image from them by name and checks it again without strace
(CRASH-SYS-9, CRASH-COV-5); a fault or kill failure is rerun until it reproduces, or says it
did not in :data:`REPLAY_TRIES` tries.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from scopecheck.crashsim.coverage import acknowledgement_points, crash_points, ordered_passes
from scopecheck.crashsim.explore import (
    MAX_FAILURES,
    OVERRUN,
    Exploration,
    Findings,
    Images,
    NotJudged,
    Plan,
    point_images,
)
from scopecheck.crashsim.explore import explore as explore_rounds
from scopecheck.crashsim.failure import (
    REAPPEARED,
    BadReproducer,
    CrashFailure,
    Evidence,
    crash_kind,
    profiles_text,
    relative_to_root,
)
from scopecheck.crashsim.fault_check import (
    FaultImage,
    FaultProblem,
    FaultRerun,
    FaultRules,
    blind_verdict,
    error_place,
    fault_images,
    judge_blind,
    shown,
    uncoded,
)
from scopecheck.crashsim.fuse_faults import FaultMount, FaultPlan, Fired
from scopecheck.crashsim.fuse_faults import unavailable as fuse_unavailable
from scopecheck.crashsim.generic_faults import UNKNOWN
from scopecheck.crashsim.generic_sweep import workload
from scopecheck.crashsim.jsonl_sweep import (
    ModelStates,
    model_states,
)
from scopecheck.crashsim.jsonl_workloads import Workload, workload_from_json
from scopecheck.crashsim.persistence import (
    POSIX,
    PROFILES,
    FileOp,
    Image,
    Profile,
    Volume,
    coarser_tears,
    power_image,
    profile_named,
    profiled_volume,
)
from scopecheck.crashsim.points import (
    DataKept,
    ProcessCrash,
    Strict,
    Torn,
    Variant,
    parse_variant,
)
from scopecheck.crashsim.recovery import (
    Broken,
    Expected,
    after_power_loss,
    image_key,
    judge,
    read_again,
)
from scopecheck.crashsim.sandbox import BASE_TIME, StepClock, describe
from scopecheck.crashsim.shards import Shard
from scopecheck.crashsim.story import files_lines, lost_lines
from scopecheck.crashsim.strace import Fd, Syscall, read_trace, strace_command
from scopecheck.crashsim.syscall_ops import Finding, Timeline, extract
from scopecheck.crashsim.unread import Unread, shape
from scopecheck.models.addresses import value
from scopecheck.models.errors import ProtocolError, ScopecheckError, UsageError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value
from scopecheck.process.client import BackendProcess, BackendRaised, ProcessRepository

SESSION = "s"
_PROBE = value("scopecheck.probe", "after-crash")
#: The source name of this module's failures (``CrashFailure.source``).
SOURCE = "syscall"
#: The kind of every protocol failure (PROC-2): one per exploration, wherever it showed.
PROTOCOL = "protocol"
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
    #: What each step's error said (``""`` for a step that succeeded).
    errors: tuple[str, ...] = ()
    #: Files written through a shared writable mapping: ``(operation index, path, how)``, the
    #: path as the mapping named it, from the moment it was mapped (CRASH-SYS-8).
    mapped: tuple[tuple[int, str, str], ...] = ()
    #: Trace lines the reader could not read, naming a call the model follows:
    #: ``(operation index, why)`` (CRASH-SYS-16).
    unreadable: tuple[tuple[int, str], ...] = ()
    #: The disk the run left at its end (a recording's), for the contents of mapped files.
    final: Image | None = attrs.field(default=None, eq=False, repr=False)
    #: What the first reader after a commit failed with ``outcome_unknown`` read: the Session
    #: the next child opened (one element), or nothing when none read it (CRASH-FS-14).
    first_read: tuple[Snapshot | None, ...] = attrs.field(default=(), eq=False, repr=False)

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

    def unbuildable(self, k: int) -> str | None:
        """Why no image of a crash before operation ``k`` can be built: a call the reader
        could not read came before it, and the operations may miss it (CRASH-SYS-17)."""
        for at, why in self.unreadable:
            if at < k:
                return why
        return None

    def blind(self, k: int) -> dict[str, str]:
        """The files of a crash image before operation ``k`` whose contents the trace cannot
        see -- mapped shared and writable before ``k`` -- by their path at ``k`` (a rename of
        the file, or of a directory above it, moves it), with why (CRASH-SYS-17)."""
        if not self.mapped:
            return {}
        return blind_at(self.ops, self.mapped, k)

    def later(self, k: int, paths: Iterable[str]) -> dict[str, bytes]:
        """The contents the files at ``paths`` (named as before operation ``k``) had at the
        end of the run, where it still held them under a name they moved to."""
        if self.final is None:
            return {}
        found = {}
        for path in paths:
            name = _moved(self.ops, k, len(self.ops), path)
            if name is not None and name in self.final.files:
                found[path] = self.final.files[name]
        return found

    def child_end(self, k: int) -> int:
        """The last operation of the backend process that made operation ``k`` at whose call
        it can be killed (``k`` itself when there is none after it)."""
        child = max(0, bisect.bisect_right(self.starts, k) - 1)
        end = self.starts[child + 1] if child + 1 < len(self.starts) else len(self.ops)
        for last in range(end - 1, k, -1):
            if _kill_aim(self, last) is not None:
                return last
        return k

    def narrowed(self, k: int, recovered: Snapshot | None) -> tuple[int, ...]:
        """Of the model states a crash before ``k`` allows, the ones equal to ``recovered``
        -- what an uninterrupted recovery of that crash gave, so a crash during it must give
        it too (CRASH-FS-5)."""
        allowed = self.allowed(k)
        same = tuple(i for i in allowed if self.model.snapshots[i] == recovered)
        return same or allowed


def blind_at(
    ops: Sequence[FileOp], mapped: Sequence[tuple[int, str, str]], k: int
) -> dict[str, str]:
    """The mapped files (``(operation index, path, how)``: mapped after the operations before
    that index; ``-1``, before any) as they are named after ``ops[:k]``: each mapped before
    ``ops[k - 1]`` completed, moved by renames of it or of a directory above it, gone when
    unlinked.  One mapped right before ``ops[k]`` is not: the image is the state before the
    mapping."""
    found: dict[str, str] = {}
    pending = sorted(mapped)
    for index in range(k):
        while pending and pending[0][0] <= index:
            _, path, how = pending.pop(0)
            found.setdefault(path, how)
        if not found:
            continue
        op = ops[index]
        if op.kind == "rename":
            found = {
                (op.target + p[len(op.path) :] if _under(p, op.path) else p): w
                for p, w in found.items()
            }
        elif op.kind in ("unlink", "rmdir"):
            found = {p: w for p, w in found.items() if not _under(p, op.path)}
    if k == 0:
        found = {path: how for at, path, how in pending if at < 0}
    return found


def _moved(ops: Sequence[FileOp], start: int, end: int, path: str) -> str | None:
    """The name the file at ``path`` before ``ops[start]`` has before ``ops[end]`` (renames of
    it or of a directory above it followed), or ``None`` when it was unlinked."""
    name: str | None = path
    for op in ops[start:end]:
        if name is None:
            break
        if op.kind == "rename" and _under(name, op.path):
            name = op.target + name[len(op.path) :]
        elif op.kind in ("unlink", "rmdir") and _under(name, op.path):
            name = None
    return name


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


#: A step's outcome when the served backend raised an exception without a code: its own
#: answer (an uncoded error, CRASH-FS-9), not a protocol break (:class:`BackendRaised`).
RAISED = "raised"


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, BackendRaised):
        return RAISED
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
    stop_at_death: bool = False,
) -> Recording:
    """Run ``wl`` with each child under strace (trace files in ``traces``); ``inject`` is
    ``(child, strace inject expression)``.  Every step runs even after one fails (its outcome
    is its error code); a dead child is restarted for the next restart step only.  A run with
    a fault stops once the child after the faulted one has reopened the Session -- for a
    fault on the FUSE mount, ``fired()`` says when it has happened; with ``stop_at_death``, as
    soon as the child given the injection has died (the disk is then exactly what its death
    left); ``traced`` False runs it without strace (to measure what tracing costs)."""
    clock = StepClock()
    #: Every child started, in order, with its trace (a start that failed -- its ``hello``
    #: answer faulted, say -- has a trace and no process): the child numbers ``inject`` and
    #: the acknowledgements count by.
    children: list[tuple[BackendProcess | None, str]] = []
    tails: list[str] = []

    def start() -> ProcessRepository:
        index = len(children)
        trace = os.path.join(traces, f"trace-{index}.txt")
        expressions = [inject[1]] if inject is not None and inject[0] == index else []
        run = traced_command(trace, command, expressions) if traced else list(command)
        process = BackendProcess(run, None, clock, cwd=cwd)
        # A child is one before its hello: one whose hello fails is stopped and its trace read
        # like any other's (its calls changed the disk), and no later child reuses its file.
        children.append((process, trace))
        process.hello(root)
        return ProcessRepository(process)

    def ended(child: int) -> bool:
        """Whether child ``child`` has started and ended (or never started)."""
        if len(children) != child + 1:
            return False
        process = children[-1][0]
        return process is None or process.exited

    acks: list[tuple[int, int] | None] = []
    outcomes: list[str] = []
    errors: list[str] = []
    first_read: list[Snapshot | None] = []
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
                    if stop_at_death and inject is not None and len(children) == inject[0] + 1:
                        break  # the child given the kill has ended, killed or not: its disk
                    repo = None
                    repo = start()
                    storage = repo.open(SESSION)
                    if UNKNOWN in outcomes and not first_read:  # the first reader decides
                        first_read.append(storage.snapshot())
                elif step.op == "delete":
                    if storage is not None:
                        storage.close()
                    storage = None
                    repo.delete(SESSION)
                outcomes.append("ok")
                errors.append("")
                acks.append((len(children) - 1, repo.process.last_request_id))
            except (ScopecheckError, OSError) as exc:
                outcomes.append(_outcome(exc))
                errors.append(exc.message if isinstance(exc, ScopecheckError) else str(exc))
                acks.append(None)
            if inject is not None and len(children) > inject[0] + 1:
                break  # the faulted child is gone and its successor has reopened: enough
            if stop_at_death and inject is not None and ended(inject[0]):
                break
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
            if process is not None:
                process.stop()
    if not traced:
        ran = wl if len(outcomes) == len(wl.steps) else Workload(wl.name, wl.steps[: len(outcomes)])
        return _combine(
            ran, [], acks, outcomes, [], tuple(tails), errors=tuple(errors),
            first_read=tuple(first_read),
        )  # fmt: skip
    records = [read_trace(trace) if os.path.exists(trace) else [] for _, trace in children]
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
    return _combine(
        ran, timelines, acks, outcomes, injected, tuple(tails), root, cwd, errors=tuple(errors),
        first_read=tuple(first_read),
    )  # fmt: skip


def traced_command(trace: str, command: Sequence[str], inject: Sequence[str]) -> list[str]:
    """:func:`~scopecheck.crashsim.strace.strace_command`, without ``--seccomp-bpf`` when an
    injection delivers a signal: strace (6.1) stops a tracee at a syscall's entry through its
    seccomp filter in a way that never delivers an injected signal -- a kill run would run to
    its end without the kill (CRASH-SYS-7).  Without the filter every call stops, which only
    the kill runs pay."""
    found = strace_command(trace, command, inject=inject)
    if any("signal=" in expression for expression in inject):
        found = [part for part in found if part != "--seccomp-bpf"]
    return found


def _combine(
    wl: Workload,
    timelines: Sequence[Timeline],
    acks: Sequence[tuple[int, int] | None],
    outcomes: Sequence[str],
    injected: Sequence[tuple[int, Syscall]],
    tails: tuple[str, ...],
    root: str = "",
    cwd: str = "",
    *,
    errors: tuple[str, ...] = (),
    first_read: tuple[Snapshot | None, ...] = (),
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
    mapped = tuple(
        (starts[child] + f.at, f.path, "written through a shared mapping")
        for child, tl in enumerate(timelines)
        for f in tl.findings
        if f.kind == "mmap" and f.path is not None
    )
    unreadable = tuple(
        (starts[child] + f.at, relative_to_root(f.text, root))
        for child, tl in enumerate(timelines)
        for f in tl.findings
        if f.kind == "unreadable"
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
        errors=errors,
        mapped=mapped,
        unreadable=unreadable,
        first_read=first_read,
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

#: The disk a recording starts on: an empty root.
EMPTY = Image({})
#: A Session created again where a crash left none (its delete, or its create unacknowledged):
#: empty, nothing of the old one joining it (CRASH-FS-2).
EMPTY_SESSION: Snapshot = ReferenceRepository().create(SESSION).snapshot()


def crash_images(
    ops: Sequence[FileOp],
    seed: int,
    points: Sequence[int] | None = None,
    profiles: Sequence[Profile] = (POSIX,),
) -> Iterator[tuple[int, Variant, Image]]:
    """The crash images of ``ops`` at ``points`` (sorted; default every crash point: before
    each mutating operation, and at the end) as ``(point, variant, image)``, in one sweep over
    the operations (:func:`~scopecheck.crashsim.explore.point_images`, CRASH-SYS-1), each
    distinct image of the ``profiles`` once (CRASH-SYS-14)."""
    wanted = crash_points(ops) if points is None else points
    volume = profiled_volume(None, profiles)
    done = 0
    for k in wanted:
        while done < k:
            volume.apply(ops[done])
            done += 1
        for variant, image in point_images(volume, ops, k, seed):
            yield k, variant, image


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


class ImageChecker:
    """A checker child that reopens image after image (a ``hello`` over each) and checks it
    against the model states the crash point allows; the child is replaced every
    :data:`CHECKER_LIFETIME` images, and ``history`` lists the images -- ``(point, variant)``
    -- the current one has checked.  A failure is a crash failure of the image, with the
    recording as its evidence and ``seed`` as the seed its images were sampled with; the
    source adds how it reruns (its ``target``)."""

    def __init__(
        self, command: Sequence[str], cwd: str, recording: Recording, seed: int = 0
    ) -> None:
        self.recording = recording
        self.seed = seed
        self.command = list(command)
        self.cwd = cwd
        self.base = tempfile.mkdtemp(prefix="scopecheck-images-", dir=scratch_base())
        self.clock = StepClock()
        self.clock.at(len(recording.workload.steps) + 1)
        self.checked = 0
        self.history: list[tuple[int, Variant]] = []
        #: The images the child had checked before the last one.
        self.last_history: tuple[tuple[int, Variant], ...] = ()
        #: The child broke the protocol (or died): the next image gets a new one.
        self.broken = False
        #: Images that passed, by their files and the states allowed: one met again is
        #: answered by that check, not reopened again (counted in ``reused``).
        self._passed: set[tuple[Any, tuple[int, ...]]] = set()
        self.reused = 0
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

    def read(self, image: Image) -> Snapshot | None:
        """The Session a reopen of ``image`` gives (``None``: none or unreadable)."""
        directory = os.path.join(self.base, "read")
        write_image(image, directory)
        got, _ = read_again(lambda: self.reopen(directory), SESSION, (ScopecheckError,), directory)
        return got if isinstance(got, Snapshot) else None

    def reopen(self, directory: str) -> ProcessRepository:
        """The checker child's repository, started over ``directory``."""
        self.process.request("hello", protocol=1, root=directory)
        return ProcessRepository(self.process)

    def check(
        self, k: int, variant: Variant, image: Image, allowed: tuple[int, ...], *,
        remember: bool = True,
    ) -> CrashFailure | None:  # fmt: skip
        """Reopen ``image`` -- the crash ``variant`` before operation ``k`` -- and judge it
        against the model states ``allowed``.  ``remember``: the image is one of the
        recording's, rebuilt by name in a replay, so it joins ``history`` (a crash during a
        recovery does not).  Crash points often leave files an earlier one left (a crash
        before and after a sync): an image that passed against the same states is answered by
        that check -- the same reopen of the same files gives the same Session
        (:func:`~scopecheck.crashsim.recovery.image_key`); a failed one is always judged
        again, so each crash point reports its own."""
        key = (image_key(image), allowed)
        if key in self._passed:
            self.reused += 1
            return None
        if self.broken or len(self.history) >= CHECKER_LIFETIME:
            self.fresh()
        self.last_history = tuple(self.history)
        if remember:
            self.history.append((k, variant))
        try:
            found = self._check(k, variant, image, allowed)
        except ProtocolError:
            self.broken = True
            raise
        if found is None:
            self._passed.add(key)
        return found

    def _check(
        self, k: int, variant: Variant, image: Image, allowed: tuple[int, ...]
    ) -> CrashFailure | None:
        """Judge the reopened image with the one recovery checker
        (:func:`~scopecheck.crashsim.recovery.judge`, CRASH-FS-1..4, 6; an absent Session is
        created again and must be empty); a protocol error
        marks the child broken, so the next image gets a new one."""
        self.checked += 1
        rec = self.recording
        expected = Expected(
            rec.model.snapshots, rec.model.next_seqs, [s.op for s in rec.workload.steps], allowed
        )
        directory = os.path.join(self.base, f"image-{self.checked % 2}")
        write_image(image, directory)
        verdict = judge(
            lambda: self.reopen(directory), expected, session=SESSION,
            probe=set_value(_PROBE, self.checked), recreate=EMPTY_SESSION,
            errors=(ScopecheckError,), root=directory,
        )  # fmt: skip
        if not isinstance(verdict, Broken):
            return None
        broken = after_power_loss(verdict, variant.name, variant.power_loss)
        if isinstance(broken.error, ProtocolError) and not isinstance(broken.error, BackendRaised):
            self.broken = True  # the next image gets a new child
            broken = attrs.evolve(
                broken,
                rule="PROC-2",  # the backend's wire, not its recovery
                problem=f"{broken.problem.split(' raised ', 1)[0]} broke the backend process: "
                f"{relative_to_root(broken.error.message, directory)}",
            )
        ops = rec.ops
        recovered = broken.recovered
        found = CrashFailure.of_image(
            SOURCE, broken.rule, broken.problem, seed=self.seed,
            workload=rec.workload.to_json(), point=k, variant=variant.name,
            evidence=Evidence(rec.ops, EMPTY, rec.acked_at),
            shown={
                "op": ops[k].describe() if k < len(ops) else "(end of the run)",
                "expected": [describe(s) for s in expected.states],
                "recovered": recovered if isinstance(recovered, str) else describe(recovered),
            },
        )  # fmt: skip
        # The backend's wire, whatever image it was reopening: one failure of its kind, never
        # a crash rule judged on a reopen that did not speak the protocol (PROC-2).
        return attrs.evolve(found, kind=PROTOCOL) if broken.rule == "PROC-2" else found


# -- crashing the recovery --------------------------------------------------------------------


def record_recovery(
    command: Sequence[str], cwd: str, image: Image, base: str, clock_at: int
) -> tuple[Timeline, Snapshot | None]:
    """What a fresh backend process does while it reopens ``image`` (lists, opens and reads
    the Session, closes), recorded under strace over a copy of it -- its file operations,
    and what its trace could not see -- and the Session that uninterrupted recovery gave
    (``None``: none)."""
    root = tempfile.mkdtemp(prefix="recovery-", dir=base)
    trace = os.path.join(base, f"{os.path.basename(root)}.trace")
    clock = StepClock()
    clock.at(clock_at)
    try:
        write_image(image, root)
        process = BackendProcess(strace_command(trace, command), root, clock, cwd=cwd)
        recovered: Snapshot | None = None
        try:
            repo = ProcessRepository(process)
            if SESSION in repo.list():
                storage = repo.open(SESSION)
                recovered = storage.snapshot()
                storage.close()
            with contextlib.suppress(ScopecheckError):
                repo.close()
        finally:
            process.stop()
        return extract(read_trace(trace), root, cwd), recovered
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(trace)


#: Images a round reopens under strace to learn which files its reopens read (CRASH-SYS-19).
READ_PROBES = 16


def reopen_reads(
    command: Sequence[str], cwd: str, images: Sequence[Image], base: str, clock_at: int
) -> frozenset[str] | None:
    """The files, by path under the root, a backend process opens for reading while it reopens
    each of ``images`` as the checker does -- lists, opens (or creates) the Session and reads
    it, commits, and reopens to read it again -- one process over them all, under strace
    (CRASH-SYS-19); ``None`` when the trace cannot tell: the process broke the protocol, or a
    line of its trace could not be read."""
    root = tempfile.mkdtemp(prefix="reads-", dir=base)
    trace = os.path.join(base, f"{os.path.basename(root)}.trace")
    clock = StepClock()
    clock.at(clock_at)
    try:
        process = BackendProcess(strace_command(trace, command), None, clock, cwd=cwd)
        try:
            for number, image in enumerate(images):
                write_image(image, root)
                try:
                    process.hello(root)
                    repo = ProcessRepository(process)
                    present = SESSION in repo.list()
                    storage = repo.open(SESSION) if present else repo.create(SESSION)
                    storage.snapshot()
                    storage.commit([set_value(_PROBE, number)])
                    storage.close()
                    repo.close()
                    process.hello(root)
                    repo = ProcessRepository(process)
                    if SESSION in repo.list():
                        repo.open(SESSION).snapshot()
                    repo.close()
                except ProtocolError as exc:
                    if not isinstance(exc, BackendRaised):
                        return None
                except ScopecheckError:
                    pass  # the backend's coded answer: the reads it made are in the trace
        except ProtocolError:
            return None
        finally:
            process.stop()
        timeline = extract(read_trace(trace), root, cwd)
        if any(finding.kind == "unreadable" for finding in timeline.findings):
            return None
        return timeline.read
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(trace)


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


def fault_kind(mode: str) -> str:
    """The kind of a fault or kill failure, what tells it apart from others of its rule
    (CRASH-COV-4), from its ``mode`` (``fault:<child>:<expression>`` or
    ``kill:<child>:<expression>``): ``kill``; ``fault:<op>:<errno>`` on the FUSE mount,
    ``+partial`` for a write that stored part of its bytes; ``fault:<call>:<errno>`` through
    strace's injection."""
    kind, _, expression = mode.split(":", 2)
    if kind == "kill":
        return kind
    if expression.startswith(FUSE):
        plan = _fuse_plan(expression)
        partial = "+partial" if plan.partial is not None else ""
        return f"{kind}:{plan.op}:{plan.errno}{partial}"
    name, _, rest = expression.partition(":")
    fault = rest.split(":", 1)[0].split("=", 1)[-1]
    return f"{kind}:{name}:{fault}"


# -- exploring ------------------------------------------------------------------------------

#: Fault and kill runs per recorded workload before the next workload is recorded.
FAULT_RUNS_PER_ROUND = 12
#: The share of what is left of the budget that a round's crash states get (the rest: its
#: fault and kill runs, then the next round).
STATE_SHARE = 0.5
#: The images whose recovery is recorded and crashed (CRASH-FS-5): a torn write is what a
#: recovery repairs; ``data-kept`` and ``strict`` leave the most to roll back.
RECOVERED = (Torn, DataKept, Strict)


@attrs.define
class SyscallSource:
    """The rounds of an exploration (:mod:`scopecheck.crashsim.explore`): each seed's
    workload run by ``command`` under strace.  It counts, over every round, the kill runs and
    the fault runs it dropped because the fault missed its call (CRASH-COV-3)."""

    spec: str
    command: tuple[str, ...]
    cwd: str
    transactions: int = 6
    kill_runs: int = 0
    #: Kill runs made to judge a crash point for real (CRASH-SYS-17).
    kill_checks: int = 0
    #: Fault and kill runs dropped, not judged, by why (CRASH-COV-3).
    dropped: dict[str, int] = attrs.field(factory=dict)
    #: Where this exploration writes its roots and traces (set by :meth:`explore`).
    base: str = ""
    #: The first round's seed: round ``seed`` aims its fault runs ``seed - first_seed``
    #: places on in each queue.
    first_seed: int = 0

    def target(
        self, mode: str = "crash", history: Sequence[tuple[int, Variant]] = ()
    ) -> dict[str, Any]:
        """What a replay of a failure needs: the backend command (portable), its working
        directory, the spec, the ``mode`` (``crash``, ``fault:<child>:<expression>``,
        ``kill:<child>:<expression>``) and the images the checker child had reopened before,
        when the failure needed them."""
        return {
            "spec": self.spec,
            "command": _portable(self.command, self.cwd),
            "cwd": self.cwd,
            "mode": mode,
            "history": [[k, variant.name] for k, variant in history],
        }

    def explore(
        self,
        budget: float,
        seed: int = 0,
        *,
        faults: bool = True,
        on_progress: Callable[[Exploration], None] | None = None,
        max_failures: int = MAX_FAILURES,
        overrun: float = OVERRUN,
        shard: Shard | None = None,
    ) -> Exploration:
        """The exploration loop over this source's rounds (crash states in coverage order, the
        first round's states after every acknowledgement even past the budget by at most
        ``overrun`` seconds, CRASH-COV-2; fault and kill runs with ``faults``; ``shard``: its
        share of a fixed exploration, FLEET-4); a limit says
        how many fault runs were dropped, and that no write was left partial when the faults
        went through strace because FUSE is not available here."""
        self.first_seed = seed
        self.base = tempfile.mkdtemp(prefix="scopecheck-syscall-", dir=scratch_base())
        try:
            found = explore_rounds(
                self, budget=budget, seed=seed,
                plan=Plan(
                    state_share=STATE_SHARE, overrun=overrun, faults=faults, profiles=PROFILES,
                    shard=shard,
                ),
                max_failures=max_failures, on_progress=on_progress,
            )  # fmt: skip
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
        for dropped, count in self.dropped.items():
            found.findings.limited(
                f"fault: {count} fault or kill runs were dropped, not judged: {dropped} "
                "(CRASH-COV-3)"
            )
        if self.kill_checks:
            found.findings.limited(
                f"kill: {self.kill_checks} kill runs judged crash points whose images could not "
                "be built from the trace alone on the disk the kill left (CRASH-SYS-17)"
            )
        why = fuse_unavailable()
        if faults and found.fault_runs and why is not None:
            found.findings.limited(
                f"fault: faults went through strace, not the FUSE mount ({why}): a call fails "
                "whole, so no write was left partial (CRASH-COV-3)"
            )
        return found

    @contextlib.contextmanager
    def round(self, seed: int, findings: Findings) -> Iterator[SyscallRound | None]:
        """Record the workload of ``seed``; ``None`` (and a CRASH-FS-7 failure) when a step
        failed without any crash.  What the trace could not see (a shared writable mapping,
        CRASH-SYS-8) or should not show (a file changed outside the root, CRASH-SYS-4) is a
        limit."""
        wl = workload(seed, self.transactions)
        rec = self._record(wl, seed, findings)
        if rec is None:
            yield None
            return
        with ImageChecker(self.command, self.cwd, rec, seed) as checker:
            yield SyscallRound(self, rec, checker, seed, findings)

    def _record(self, wl: Workload, seed: int, findings: Findings) -> Recording | None:
        root = tempfile.mkdtemp(prefix="root-", dir=self.base)
        traces = tempfile.mkdtemp(prefix="traces-", dir=self.base)
        try:
            rec = run_workload(self.command, wl, root, self.cwd, traces)
            if rec.mapped:
                rec = attrs.evolve(rec, final=read_image(root))
        finally:
            shutil.rmtree(traces, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
        outside = [f for f in rec.findings if f.kind == "outside"]
        for finding in rec.findings:  # the root is new each round: said once as <root>
            if len(outside) <= WRAPPER_OUTSIDE or finding.kind != "outside":
                findings.limited(relative_to_root(f"{finding.kind}: {finding.text}", root))
        if len(outside) > WRAPPER_OUTSIDE and not any(
            limit.startswith(WRAPPER_LIMIT) for limit in findings.limits
        ):
            example = outside[0].text.split(", outside the root", 1)[0]
            findings.limited(
                f"{WRAPPER_LIMIT} ({len(outside)} files in one workload, e.g. {example}): the "
                "command looks like a wrapper or a toolchain (go run, npx, a shell script) whose "
                "own files are traced with the backend's; run the built backend itself, e.g. "
                "go build -o backend . and --exec ./backend (CRASH-SYS-4)"
            )
        bad = [(i, o) for i, o in enumerate(rec.outcomes) if o != "ok"]
        if not bad:
            return rec
        index, outcome = bad[0]
        error = rec.errors[index] if index < len(rec.errors) else ""
        if outcome == "protocol_error" and not error.startswith("the backend process exited"):
            findings.add(  # the backend's wire, not its storage: one PROC-2 (PROC-2)
                CrashFailure(
                    source=SOURCE, rule="PROC-2",
                    problem=f"without any crash, step {index + 1} ({wl.steps[index].op}) "
                    f"broke the backend process: {relative_to_root(error, root)}",
                    run="workload", kind=PROTOCOL, seed=seed, workload=wl.to_json(),
                    variant="no-crash", target=self.target(),
                )
            )  # fmt: skip
            return None
        tail = next((t.strip() for t in reversed(rec.stderr) if t.strip()), "")
        said = f"; the backend's stderr ends: {relative_to_root(tail[-400:], root)}" if tail else ""
        findings.add(
            CrashFailure(
                source=SOURCE, rule="CRASH-FS-7",
                problem=f"without any crash, step {index + 1} ({wl.steps[index].op}) failed "
                f"with {outcome}{said}",
                run="workload", kind="workload", seed=seed, workload=wl.to_json(),
                variant="no-crash", target=self.target(),
            )
        )  # fmt: skip
        return None


#: More files changed outside the root than this in one workload is a wrapper's or a
#: toolchain's doing, said once instead of file by file (CRASH-SYS-4).
WRAPPER_OUTSIDE = 3
WRAPPER_LIMIT = "outside: many files changed outside the root"


class SyscallRound:
    """One recorded workload as a round of the exploration loop: its images are
    :func:`~scopecheck.crashsim.explore.point_images` (CRASH-SYS-1, CRASH-SYS-3), judged by
    the round's :class:`ImageChecker`; a failure is confirmed on a fresh checker child before
    it is kept, and a failing torn write says how coarse a tearing still shows it
    (CRASH-SYS-12).  Its recoveries are recorded under strace and crashed (CRASH-FS-5), and
    its fault and kill runs rerun the workload (CRASH-SYS-6, CRASH-SYS-7)."""

    def __init__(
        self,
        source: SyscallSource,
        recording: Recording,
        checker: ImageChecker,
        seed: int,
        findings: Findings,
    ) -> None:
        self.source = source
        self.recording = recording
        self.checker = checker
        self.seed = seed
        self.findings = findings
        self.ops = recording.ops
        self.acked_at = recording.acked_at
        self.base = EMPTY
        self.states = 0
        self.recovery_states = 0
        self._plans: list[tuple[int, int, str]] | None = None
        #: What the recovery recorded last gave, uninterrupted, and the files it mapped.
        self._recovered: Snapshot | None = None
        self._recovery: Timeline | None = None
        #: The disks kill runs left, by crash point (``None``: no such disk), and how many
        #: kill runs were made for them (CRASH-SYS-17).
        self._real: dict[int, Image | None] = {}
        self._kill_checks = 0
        self._blind_point: tuple[int, dict[str, str]] | None = None
        self._images: Images | None = None

    def images(
        self, volume: Volume, ops: Sequence[FileOp], k: int
    ) -> Iterable[tuple[Variant, Image]]:
        if self._images is None:
            self._images = Images(unread=self._unread())
        return point_images(volume, ops, k, self.seed, self._images)

    def _unread(self) -> Unread | None:
        """The files no reopen reads, from reopens of the process crash and the strict power
        loss after each acknowledgement and at the end, traced (CRASH-SYS-19); ``None``: every
        file is torn in full (the trace could not tell)."""
        rec, source = self.recording, self.source
        points = crash_points(rec.ops)
        wanted = sorted({*acknowledgement_points(points, rec.acked_at), len(rec.ops)})
        volume = Volume(None, POSIX)
        images: list[Image] = []
        done = 0
        try:
            for k in wanted:
                while done < k:
                    volume.apply(rec.ops[done])
                    done += 1
                images += [volume.process_image(), volume.power_image(Strict())]
        except ValueError:  # a PathError: the model cannot go on; the images up to there
            pass
        unique = list({image_key(image): image for image in images}.values())[:READ_PROBES]
        if not unique:
            return None
        read = reopen_reads(source.command, source.cwd, unique, source.base,
                            len(rec.workload.steps) + 1)  # fmt: skip
        if read is None:
            return None
        unread = Unread.of(read)
        once = sorted({shape(op.path) for op in rec.ops if op.kind == "write" and unread(op.path)})
        if once:
            self.findings.limited(
                f"sampling: no reopen reads {', '.join(once)} (# any number): a torn write "
                "there is tried once per crash point (CRASH-SYS-19)"
            )
        return unread

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | NotJudged | None:
        """Judge ``image``, the crash ``variant`` before operation ``k`` (CRASH-SYS-17): an
        image past a trace line the reader could not read is not built at all, and one holding
        a file written through a shared mapping fails only on contents that are real: its
        failure does not depend on that file -- the same with it removed, inverted, and as real
        contents of it seen elsewhere in the round left it (:func:`blind_verdict`) -- or holds
        with the file as a kill at that call left it (:meth:`_real_disk`).  A process crash
        past an unread line is judged on the disk such a kill leaves; anything else there is
        :class:`NotJudged`."""
        self.states += 1
        rec = self.recording
        allowed = rec.allowed(k)
        unread = rec.unbuildable(k)
        if unread is not None:
            real = self._real_disk(k) if isinstance(variant, ProcessCrash) else None
            if real is None:
                return NotJudged(unread)
            return self._judge(k, variant, image, real, "a kill at this call left it")
        blind = self._blind(k)
        hidden = {path: how for path, how in blind.items() if path in image.files}
        failure = self.checker.check(k, variant, image, allowed)
        if failure is None or not hidden or failure.rule == "PROC-2":
            return self._kept(k, variant, image, failure)
        known = self._late(k, hidden)
        verdict: CrashFailure | NotJudged | None = None
        if all(path in known for path in hidden):
            verdict = blind_verdict(
                lambda built: self.checker.check(k, variant, built, allowed), image, hidden,
                None, lambda a, b: (a.rule, a.problem) == (b.rule, b.problem), failed=failure,
                later=known,
            )  # fmt: skip
            if not isinstance(verdict, NotJudged):
                return self._kept(k, variant, image, verdict)
        real = self._real_disk(k)
        if real is not None and all(path in real.files for path in hidden):
            files = {**image.files, **{path: real.files[path] for path in hidden}}
            return self._judge(
                k, variant, image, attrs.evolve(image, files=files),
                f"{', '.join(f'<root>/{p}' for p in hidden)} as a kill at this call left it",
            )  # fmt: skip
        if isinstance(verdict, NotJudged):
            return verdict
        names = ", ".join(f"<root>/{path}" for path in hidden)
        return NotJudged(
            f"{names} {'is' if len(hidden) == 1 else 'are'} "
            f"{' and '.join(dict.fromkeys(hidden.values()))}, and no real contents of "
            f"{'it' if len(hidden) == 1 else 'them'} were at hand to judge the failure with"
        )

    def _late(self, k: int, hidden: Mapping[str, str]) -> dict[str, bytes]:
        """Real contents of the files ``hidden`` (named as before ``k``) from a moment at or
        after ``k``: the disk the recording left, or one a kill at a later call of the same
        process left -- a kill at that process's last call is made for it when there is none.
        A file whose contents a reopen reads shows it there: it holds the process's data by
        then, which contents the trace shows, or none, never do."""
        found = self.recording.later(k, hidden)
        for attempt in range(2):
            for path in hidden:
                if path in found:
                    continue
                for point, disk in sorted(self._real.items()):
                    end = self.recording.child_end(k)
                    if disk is None or not k <= point <= end:
                        continue
                    name = _moved(self.recording.ops, k, point, path)
                    if name is not None and name in disk.files:
                        found[path] = disk.files[name]
                        break
            if attempt or all(path in found for path in hidden):
                break
            self._real_disk(self.recording.child_end(k))
        return found

    def _blind(self, k: int) -> dict[str, str]:
        if self._blind_point is None or self._blind_point[0] != k:
            self._blind_point = (k, self.recording.blind(k))
        return self._blind_point[1]

    def _kept(
        self, k: int, variant: Variant, image: Image, failure: CrashFailure | None
    ) -> CrashFailure | None:
        findings = self.findings
        if (
            failure is None
            or not findings.wanted(failure)
            or findings.known(failure.key)
            or findings.joins(failure, variant)
        ):
            return failure  # one of its kind, or at its point, is kept: not worth a confirmation
        return self._confirmed(k, variant, image, failure)

    def _judge(
        self, k: int, variant: Variant, built: Image, image: Image, how: str
    ) -> CrashFailure | None:
        """Judge ``image`` -- ``built`` with contents the trace could not give taken from a
        real disk (``how``) -- for the crash ``variant`` before ``k``; a failure keeps those
        contents for its replay (``target["contents"]``)."""
        failure = self.checker.check(k, variant, image, self.recording.allowed(k))
        if failure is None:
            return None
        failure = attrs.evolve(failure, problem=f"{failure.problem} (the image holds {how})")
        failure = self._kept(k, variant, image, failure) or failure
        contents = {
            path: base64.b64encode(data).decode()
            for path, data in image.files.items()
            if built.files.get(path) != data
        }
        removed = sorted(path for path in built.files if path not in image.files)
        target = {**failure.target, "contents": contents, "removed": removed}
        return attrs.evolve(failure, target=target)

    def _confirmed(
        self, k: int, variant: Variant, image: Image, failure: CrashFailure
    ) -> CrashFailure:
        """``failure`` checked again on a fresh checker child: one that does not fail there
        needed what the child had reopened before, and keeps that history for its replay."""
        history = self.checker.last_history
        source = self.source
        with ImageChecker(source.command, source.cwd, self.recording, self.seed) as fresh:
            again = fresh.check(k, variant, image, self.recording.allowed(k))
        problem = failure.problem
        if not self.recording.blind(k) and self.recording.unbuildable(k) is None:
            problem += _tearing(self.recording, k, variant, self.checker)
        if again is None:
            problem += (
                f" (only after the checker process had reopened {len(history)} other images: "
                "state carried over from one root to the next; `hello` must start afresh)"
            )
        target = source.target(history=() if again is not None else history)
        return attrs.evolve(failure, problem=problem, target=target)

    def _real_disk(self, k: int) -> Image | None:
        """The disk a backend killed at the call of operation ``k`` leaves -- the real process
        crash there, the contents of mapped files included -- from a rerun of the workload
        killed at that call and stopped at the death (CRASH-SYS-7, CRASH-SYS-17); ``None``
        when the round has made its :data:`KILL_CHECKS`, or the call is not the first of its
        operations, or the rerun took another path."""
        if k in self._real:
            return self._real[k]
        rec, source = self.recording, self.source
        aim = _kill_aim(rec, k)
        if self._kill_checks >= KILL_CHECKS or (aim is None and k < len(rec.ops)):
            return None
        self._kill_checks += 1
        source.kill_checks += 1
        found: Image | None = None
        root = tempfile.mkdtemp(prefix="root-", dir=source.base)
        traces = tempfile.mkdtemp(prefix="traces-", dir=source.base)
        try:
            run = run_workload(
                source.command, rec.workload, root, source.cwd, traces, inject=aim,
                stop_at_death=True,
            )  # fmt: skip
            if _same_path(run.ops, rec.ops[:k]) and (aim is None or run.killed):
                found = read_image(root)
        finally:
            shutil.rmtree(traces, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
        self._real[k] = found
        return found

    def recovers(self, variant: Variant, image: Image) -> bool:
        return isinstance(variant, RECOVERED)

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        source = self.source
        try:
            self._recovery, self._recovered = record_recovery(
                source.command, source.cwd, image, source.base,
                len(self.recording.workload.steps) + 1,
            )  # fmt: skip
        except ScopecheckError:
            return None  # the image's own check passed: a reopen that fails now is timing
        return self._recovery.ops

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | NotJudged | None:  # fmt: skip
        """The image of a crash (``during``) before operation ``j`` of the recovery of image
        ``(k, variant)`` must reopen to the state that uninterrupted recovery gave
        (CRASH-FS-5).  A file written through a shared mapping -- the workload's, or the
        recovery's own -- makes a failure stand only when it does not depend on that file,
        and a recovery trace line the reader could not read leaves what follows it unjudged
        (CRASH-SYS-17)."""
        self.states += 1
        self.recovery_states += 1
        rec = self.recording
        allowed = rec.narrowed(k, self._recovered)
        timeline = self._recovery
        mapped = [(-1, path, how) for path, how in self._blind(k).items()]
        if timeline is not None:
            mapped += [
                (f.at, f.path, "written through a shared mapping")
                for f in timeline.findings
                if f.kind == "mmap" and f.path is not None
            ]
            unread = [f for f in timeline.findings if f.kind == "unreadable" and f.at < j]
            if unread:
                return NotJudged(f"recovery trace: {unread[0].text}")
        found = self.checker.check(j, during, image, allowed, remember=False)
        hidden = {
            path: how
            for path, how in blind_at(recovery_ops, mapped, j).items()
            if path in image.files
        }
        if found is not None and hidden and found.rule != "PROC-2":
            verdict = blind_verdict(
                lambda built: self.checker.check(j, during, built, allowed, remember=False),
                image, hidden, None, lambda a, b: (a.rule, a.problem) == (b.rule, b.problem),
                failed=found,
            )  # fmt: skip
            if isinstance(verdict, NotJudged):
                return verdict
        if found is None:
            return None
        if found.rule == "PROC-2":
            return found
        recovery = (j, during)
        return attrs.evolve(
            found, rule="CRASH-FS-5",
            problem=f"a crash while a backend recovered that image ({during}, before recovery "
            f"operation {j}: {recovery_ops[j].describe()}): {found.rule} {found.problem}",
            run="recovery", kind=crash_kind(variant, recovery), point=k, variant=variant.name,
            recovery=(j, during.name),
            evidence=Evidence(rec.ops, EMPTY, rec.acked_at, tuple(recovery_ops)),
            target=self.source.target(),
            shown={
                **found.shown,
                "op": rec.ops[k].describe() if k < len(rec.ops) else "(end of the run)",
                "recovery_op": recovery_ops[j].describe(),
            },
        )  # fmt: skip

    def _fault_plan(self) -> list[tuple[int, int, str]]:
        if self._plans is None:
            turn = self.seed - self.source.first_seed
            self._plans = _fault_plans(self.recording, turn)[:FAULT_RUNS_PER_ROUND]
        return self._plans

    @property
    def fault_plan_size(self) -> int:
        return len(self._fault_plan())

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        """Fail the planned calls ``start`` .. ``start + limit`` (:func:`_fault_plans`, at most
        :data:`FAULT_RUNS_PER_ROUND` a round) once each, or kill the child at them, rerunning
        the workload, and check the disk each run leaves (and its power-loss image) against
        the acknowledged steps; the runs judged (a dropped one is counted by the source)."""
        plans = self._fault_plan()
        chosen = plans[start:] if limit is None else plans[start : start + limit]
        source = self.source
        made = 0
        for done, (child, k, expression) in enumerate(chosen):
            if findings.done or (time.perf_counter() >= deadline and done >= at_least):
                break
            result = fault_run(
                source.command, source.cwd, self.recording, source.base, self.checker, child,
                expression, k,
            )  # fmt: skip
            if result.outcome == "dropped":
                source.dropped[result.why] = source.dropped.get(result.why, 0) + 1
                findings.runs_dropped += 1
                continue
            made += 1
            if result.outcome == "kill":
                source.kill_runs += 1
            if result.why:
                findings.not_judged(result.why, f"{result.outcome} runs")
            problem = result.problem
            if problem is not None:
                mode = f"{result.outcome}:{child}:{expression}"
                findings.add(
                    CrashFailure(
                        source=SOURCE, rule=problem.rule, problem=problem.problem,
                        run=result.outcome,
                        kind=problem.kind or fault_kind(mode) + REAPPEARED * problem.reappeared,
                        seed=self.seed, workload=self.recording.workload.to_json(), point=k,
                        variant=expression, target=source.target(mode),
                        profiles=problem.profiles,
                    )
                )  # fmt: skip
        return made


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
    overrun: float = OVERRUN,
) -> Exploration:
    """Crash exploration of the backend process ``command`` for about ``budget`` seconds:
    :meth:`SyscallSource.explore` over fresh seeded workloads.  A failure does not end it;
    distinct failures are kept up to ``max_failures`` (CRASH-COV-4)."""
    source = SyscallSource(spec, tuple(command), cwd, transactions)
    return source.explore(
        budget, seed, faults=faults, on_progress=on_progress, max_failures=max_failures,
        overrun=overrun,
    )  # fmt: skip


def _tearing(rec: Recording, k: int, variant: Variant, checker: ImageChecker) -> str:
    """For a failing write torn at any byte: the coarsest tearing under which it still fails
    (a user whose disk writes whole 4 KiB blocks needs to know whether the finding is theirs,
    CRASH-SYS-12)."""
    if not isinstance(variant, Torn) or variant.granularity != 1:
        return ""
    allowed = rec.allowed(k)
    try:
        tears = coarser_tears(rec.ops, k, variant)
    except ValueError:  # a torn write of a profile's image that posix gives no such write
        return ""
    for granularity, coarser, image in tears:
        if checker.check(k, coarser, image, allowed) is not None:
            return f" (it still fails when writes tear only at {granularity}-byte boundaries)"
    return (
        " (only when a write tears inside a 512-byte sector: a disk that writes whole sectors "
        "atomically does not show it)"
    )


#: Kill runs a round makes to judge crash points for real where its images cannot be (a
#: file written through a shared mapping, a call the reader could not read: CRASH-SYS-17).
KILL_CHECKS = 8


def _kill_aim(rec: Recording, k: int) -> tuple[int, str] | None:
    """``(child, strace inject expression)`` killing the backend at the call of operation
    ``k``, when ``k`` is the first operation of its call (``None`` otherwise)."""
    if k >= len(rec.ops):
        return None
    child = max(0, bisect.bisect_right(rec.starts, k) - 1)
    call = rec.ops[k].call
    if k > rec.starts[child] and rec.ops[k - 1].call == call:
        return None  # inside a call: no process crash stands there
    for owner, index, name, ordinal in rec.calls:
        if (owner, index) == (child, call):
            return child, f"{name}:signal=SIGKILL:when={ordinal + 1}"
    return None


def _same_path(ops: Sequence[FileOp], recorded: Sequence[FileOp]) -> bool:
    """Whether a rerun made the recorded operations, as far as names go (its data may carry
    other timestamps)."""
    return [(o.kind, o.path, o.target) for o in ops] == [
        (o.kind, o.path, o.target) for o in recorded
    ]


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
    fuse = fuse_plans(rec) if fuse_unavailable() is None else None
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


def fuse_plans(rec: Recording) -> dict[int, list[FaultPlan]]:
    """The FUSE faults of each mutating operation of ``rec``, by operation index: the call
    named as the mount counts it -- the n-th write, fsync, truncate, rename (by source),
    unlink, mkdir or rmdir on that path, or the n-th open that creates it -- across every
    process and thread of the run.  The root's own fsyncs (path ``""``, the mount's ``/``)
    are planned too: a store that ignores a failed fsync of its directory shows only there
    (CRASH-SYS-6)."""
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
        elif kind == "sync":
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
        elif kind == "rename":  # a directory's files move with it
            moved = {p for p in exists if _under(p, path)}
            exists -= moved
            exists |= {op.target + p[len(path) :] for p in moved} | {op.target}
        if name is None:
            continue
        ordinal = count(name, path)
        found = [FaultPlan(name, path, ordinal, errno) for errno in FUSE_FAULTS[name]]
        if name == "write" and len(op.data) >= 2:
            found.append(FaultPlan(name, path, ordinal, "ENOSPC", len(op.data) // 2))
        plans[k] = found
    return plans


#: What became of a fault or kill run: judged as a fault run or a kill run, or dropped.
Outcome = Literal["fault", "kill", "dropped"]


@attrs.frozen
class RunProblem:
    """The rule a fault or kill run broke, why, the file-system profiles of a power-loss
    image that showed it (CRASH-SYS-15), and -- for a failure told apart by something else
    than the fault it was made with -- its kind: a protocol failure (PROC-2, one per
    exploration) or an uncoded error, by where it comes from (CRASH-FS-12)."""

    rule: str
    problem: str
    profiles: tuple[str, ...] = ()
    kind: str | None = None
    #: The state read held a failed commit and everything acknowledged (CHECK-10).
    reappeared: bool = False
    #: The image whose reopen showed it (the disk, or a power-loss image of it), and the
    #: states that reopen was allowed to give; ``None`` when the steps' answers showed it.
    image: Image | None = attrs.field(default=None, eq=False, repr=False)
    allowed: tuple[Snapshot | None, ...] = attrs.field(default=(), eq=False, repr=False)
    power_loss: bool = False
    cache: Image | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class RunResult:
    """What became of a fault or kill run (:data:`Outcome`), the rule it broke if any, and,
    for a dropped run or one whose images could not be judged, why (CRASH-COV-3,
    CRASH-SYS-17)."""

    outcome: Outcome
    problem: RunProblem | None = None
    why: str = ""
    #: What happened, for a replay (:func:`run_story`): the steps and what each got, the
    #: call the fault or kill hit, and the files the run left.
    story: tuple[str, ...] = ()
    #: The disk the run left, the run's operations and where each step was acknowledged.
    disk: Image | None = attrs.field(default=None, eq=False, repr=False)
    ops: tuple[FileOp, ...] = attrs.field(default=(), eq=False, repr=False)
    acked_at: tuple[int | None, ...] = attrs.field(default=(), eq=False, repr=False)


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


def fault_run(
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    base: str,
    checker: ImageChecker,
    child: int,
    expression: str,
    k: int,
) -> RunResult:
    """One faulted or killed rerun of ``rec``'s workload aimed at operation ``k`` (``-1``: any
    call on a file under the root), and its check: what became of the run, and the rule it
    broke with why.  A fault that missed its call, and a kill that never fired, are dropped
    with the true reason, never judged (CRASH-COV-3)."""
    kill = "SIGKILL" in expression
    root = tempfile.mkdtemp(prefix="root-", dir=base)
    traces = tempfile.mkdtemp(prefix="traces-", dir=base)
    fired: bool | None = None
    hit: Fired | None = None
    try:
        if expression.startswith(FUSE):
            mountpoint = tempfile.mkdtemp(prefix="mount-", dir=base)
            with FaultMount(root, mountpoint, _fuse_plan(expression)) as mount:
                run = run_workload(command, rec.workload, mountpoint, cwd, traces,
                                   fired=lambda: mount.fired is not None)  # fmt: skip
                disk = read_image(mountpoint)
                hit = mount.fired
            fired = hit is not None
            os.rmdir(mountpoint)
        else:
            run = run_workload(command, rec.workload, root, cwd, traces, inject=(child, expression))
            disk = read_image(root)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    story = run_story(run, disk, hit)
    why = _missed(rec, run, k, expression, fired)
    if why is not None:
        return RunResult("dropped", why=why, story=story)
    checked = check_fault_run(checker, run, disk, expression, kill)
    outcome: Outcome = "kill" if kill else "fault"
    if isinstance(checked, NotJudged):
        return RunResult(outcome, why=checked.why, story=story)
    return RunResult(outcome, checked, story=story, disk=disk, ops=run.ops,
                     acked_at=run.acked_at)  # fmt: skip


def run_story(run: Recording, disk: Image, hit: Fired | None) -> tuple[str, ...]:
    """What a fault or kill run did, in the words a replay shows: each step and what it got
    (``ok``, or the error code), the call the fault or kill hit, and the files it left."""
    lines = [f"workload {run.workload.name}, {len(run.outcomes)} steps ran:"]
    lines += [
        f"  step {number} ({step.op}): {outcome}"
        for number, (step, outcome) in enumerate(
            zip(run.workload.steps, run.outcomes, strict=False), 1
        )
    ]
    if hit is not None:
        where = hit.path.strip("/")
        what = f"{hit.op} #{hit.ordinal} of {'<root>' if where in ('', '.') else where}"
        if hit.written is not None and hit.requested is not None:
            what += f" (stored {hit.written} of its {hit.requested} bytes)"
        lines.append(f"the fault hit: {what}, which failed with {hit.errno}")
    for injected in run.injected:
        lines.append(f"the fault hit: {injected.where}")
    if run.killed:
        lines.append("the backend was killed by SIGKILL at the call aimed at")
    return (*lines, *files_lines("files the run left:", disk))


def _missed(
    rec: Recording, run: Recording, k: int, expression: str, fired: bool | None
) -> str | None:
    """Why a fault or kill run is dropped, in words true to what ran: a FUSE fault that never
    fired, a kill that never killed, a strace fault that landed elsewhere (CRASH-COV-3)."""
    if fired is False:
        return (
            "the FUSE fault never fired: the rerun made no such call on that path (it took "
            "another path)"
        )
    if fired is None and "SIGKILL" in expression:
        if not run.killed:
            return "the kill never fired: the rerun never made the call it was aimed at"
        return None
    if fired is None:
        missed = _aimed(rec, run, k, expression)
        if missed == "the call was never made":
            return "strace's fault never fired: the rerun never made the call it was aimed at"
        if missed is not None:
            return (
                f"strace's fault landed on another call than the one aimed at ({missed}; "
                "strace counts calls per thread)"
            )
    return None


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


def _unknown(run: Recording, index: int) -> bool:
    """Whether step ``index`` is a commit that failed with ``outcome_unknown``."""
    return run.workload.steps[index].op == "commit" and run.outcomes[index] == UNKNOWN


def reappearing_after(run: Recording) -> list[Snapshot | None]:
    """The states :func:`allowed_after` allows, each with one commit that failed kept as
    well: a disk reopening to one of them shows a failed commit that reappeared, with
    nothing acknowledged lost (CHECK-10)."""
    steps, outcomes = run.workload.steps, run.outcomes
    found: list[Snapshot | None] = []
    for failed in (i for i, o in enumerate(outcomes) if o != "ok" and steps[i].op == "commit"):
        chosen = [i for i, o in enumerate(outcomes) if o == "ok" or i == failed or _unknown(run, i)]
        with contextlib.suppress(ValueError, ScopecheckError):
            state = _fold(run.workload, chosen)
            if state not in found:
                found.append(state)
    return found


def unknown_problem(run: Recording) -> RunProblem | None:
    """What a run breaks after a commit failed with ``outcome_unknown`` before any image is
    read (CRASH-FS-14): a later commit acknowledged on the same handle (it must refuse until
    the Session is opened again), or a first reader that read a part of the failed commit."""
    steps, outcomes = run.workload.steps, run.outcomes
    first = next((i for i in range(len(outcomes)) if _unknown(run, i)), None)
    if first is None:
        return None
    for later in range(first + 1, len(outcomes)):
        if steps[later].op in ("reopen", "delete"):
            break
        if steps[later].op == "commit" and outcomes[later] == "ok":
            return RunProblem(
                "CRASH-FS-14",
                f"step {later + 1} (commit) was acknowledged on the handle whose step "
                f"{first + 1} failed with {UNKNOWN}: it must refuse commits until the Session "
                "is opened again",
            )
    if run.first_read and run.first_read[0] not in allowed_after(run, False):
        return RunProblem(
            "CRASH-FS-14",
            f"the Session opened after step {first + 1} failed with {UNKNOWN} reads "
            f"{shown(run.first_read[0])}: neither the acknowledged state nor it with the whole "
            "failed commit",
        )
    return None


def allowed_after(run: Recording, kill: bool) -> list[Snapshot | None]:
    """What the disk may hold after a faulted or killed run: every acknowledged step, no
    failed commit (CRASH-FS-9), a failed create or delete done or not (CRASH-FS-11), and in a
    killed run the step in flight when the child died done or not."""
    steps, outcomes = run.workload.steps, run.outcomes
    failed = [i for i, o in enumerate(outcomes) if o != "ok"]
    optional = [failed[0]] if kill and failed else []
    if not kill:  # a commit failed with outcome_unknown: kept whole or not (CRASH-FS-14)
        optional = [i for i in failed if steps[i].op in ("create", "delete") or _unknown(run, i)]
    found: list[Snapshot | None] = []
    for mask in itertools.product((False, True), repeat=len(optional)):
        extra = {i for i, on in zip(optional, mask, strict=True) if on}
        chosen = [i for i, o in enumerate(outcomes) if o == "ok" or i in extra]
        with contextlib.suppress(ValueError, ScopecheckError):
            state = _fold(run.workload, chosen)
            if state not in found:
                found.append(state)
    return found


#: The rule each image of a killed run breaks (CRASH-FS-1, -2 and -6), and of a faulted one
#: (CRASH-FS-9 for a state a power loss or the disk should not hold, CRASH-FS-11 for a disk a
#: failed create, restart or delete left unopenable; :func:`_fault_rules`).
KILL_RULES = FaultRules("CRASH-FS-2", "CRASH-FS-6", "CRASH-FS-1", "CRASH-FS-1")
FAULT_RULES = FaultRules("CRASH-FS-9", "CRASH-FS-9", "CRASH-FS-11", "CRASH-FS-9")


def _fault_rules(run: Recording) -> FaultRules:
    """:data:`FAULT_RULES`, except when the first step the fault failed is a commit: a disk it
    leaves unopenable breaks CRASH-FS-9 (after a failed commit every acknowledged transaction
    reopens) -- such as a log whose failed append kept the bytes a short write stored, with
    the next commit's line appended after them (CRASH-SYS-18)."""
    failed = next((i for i, o in enumerate(run.outcomes) if o != "ok"), None)
    if failed is not None and _unknown(run, failed):
        return FaultRules.one("CRASH-FS-14")
    if failed is not None and run.workload.steps[failed].op == "commit":
        return FaultRules.one("CRASH-FS-9")
    return FAULT_RULES


class _BrokeProtocol(Exception):
    """A reopen got an answer the protocol does not allow: not a crash rule's to judge."""

    def __init__(self, error: ProtocolError) -> None:
        super().__init__(error.message)
        self.error = error


def check_fault_run(
    checker: ImageChecker, run: Recording, disk: Image, expression: str, kill: bool
) -> RunProblem | NotJudged | None:
    """The disk a faulted or killed run leaves, and a power loss right then, reopen to what
    was acknowledged: the one fault checker's images and judgement
    (:mod:`~scopecheck.crashsim.fault_check`) with a process backend's reopen.  A step that
    broke the protocol, or a reopen that did, is a protocol failure (PROC-2), never a crash
    rule; a step that failed with something else than a coded error is an uncoded error of
    the place it comes from (CRASH-FS-9, CRASH-FS-12).  A power-loss image holding a file
    written through a shared mapping takes that file from the disk; the images of a run
    whose trace lost a call, or that the model cannot apply, are not built (CRASH-SYS-17)."""
    index, first = next(((i, o) for i, o in enumerate(run.outcomes) if o != "ok"), (0, None))
    said = run.errors[index] if index < len(run.errors) else ""
    tail = next((t.strip() for t in reversed(run.stderr) if t.strip()), "")
    if first == "protocol_error" and not said.startswith("the backend process exited"):
        step = run.workload.steps[index].op
        return RunProblem(
            "PROC-2", f"step {index + 1} ({step}) of the run with {expression}: {said}",
            kind=PROTOCOL,
        )  # fmt: skip
    if not kill and first in ("OSError", "protocol_error", RAISED):
        last = tail.splitlines()[-1] if tail else said
        where = f"; the backend's stderr ends: {tail[-400:]}" if tail else f" ({said})"
        return RunProblem(
            "CRASH-FS-9", uncoded("a step", expression, f"{first}{where}"),
            kind=f"uncoded:{error_place(f'{first}: {last}')}",
        )  # fmt: skip
    if not kill:
        broken = unknown_problem(run)
        if broken is not None:
            return broken
    allowed = allowed_after(run, kill)
    if run.first_read and not kill:  # every later reader sees what the first one read
        allowed = [state for state in allowed if state == run.first_read[0]]
    unbuilt: list[str] = []
    unread = run.unbuildable(len(run.ops) + 1)
    if unread is not None:
        unbuilt.append(f"{unread}, so the run's power-loss images cannot be built")
    images = [FaultImage("the disk", disk, False)]
    if run.ops and unread is None:
        images = fault_images(
            disk, run.ops, seed=expression, disk_label="the disk", profiles=PROFILES,
            unbuildable=unbuilt.append,
        )  # fmt: skip
    directory = os.path.join(checker.base, "disk")

    def reopen(image: Image) -> Snapshot | None:
        write_image(image, directory)
        if checker.broken:  # an image check before broke it: its answers are not this image's
            checker.fresh()
        try:
            repo = checker.reopen(directory)
            if SESSION not in repo.list():
                return None
            storage = repo.open(SESSION)
            got: Snapshot = storage.snapshot()
            storage.close()
            return got
        except ProtocolError as exc:
            checker.fresh()
            raise _BrokeProtocol(exc) from None
        except ScopecheckError:
            checker.fresh()
            raise

    def hint(image: FaultImage) -> str:
        if not image.power_loss:
            return ""
        if any(op.kind == "syncfail" for op in run.ops):
            return (
                ": an fsync failed in this run, and after a failed fsync the data is not on "
                "disk even if a later fsync succeeds -- a commit whose fsync failed must not "
                "be acknowledged (CRASH-SYS-11)"
            )
        return ": fsync what a step wrote (and its directory) before acknowledging it"

    try:
        found = judge_blind(
            reopen, images, allowed, KILL_RULES if kill else _fault_rules(run),
            f"the run with {expression}", hint=hint, errors=(ScopecheckError,),
            blind=run.blind(len(run.ops)), reappears=[] if kill else reappearing_after(run),
        )  # fmt: skip
    except _BrokeProtocol as broke:
        return RunProblem(
            "PROC-2",
            f"reopening the disk the run with {expression} left broke the backend process: "
            f"{relative_to_root(broke.error.message, directory)}",
            kind=PROTOCOL,
        )
    if isinstance(found, NotJudged):
        return found
    if found is None:
        return NotJudged(unbuilt[0]) if unbuilt else None
    return RunProblem(
        found.rule, relative_to_root(found.problem, directory), found.profiles,
        reappeared=found.reappeared, image=found.image, allowed=found.allowed,
        power_loss=found.power_loss, cache=found.cache,
    )  # fmt: skip


# -- replay ---------------------------------------------------------------------------------

#: How often a fault or kill replay reruns the workload before it says it did not reproduce.
REPLAY_TRIES = 5


def _parsed(record: Mapping[str, Any]) -> tuple[CrashFailure, Workload, tuple[str, ...], str]:
    """A reproducer of source ``syscall``: the failure, its workload, the backend's command
    (runnable here) and where to run it (the recorded folder, or here when it is gone); a
    usage error saying why for anything else."""
    try:
        failure = CrashFailure.from_json(record)
        if failure.source != SOURCE:
            raise BadReproducer(f"a reproducer of source {failure.source!r}, not {SOURCE!r}")
        wl = workload_from_json(failure.workload)
        command = _runnable([str(part) for part in failure.target["command"]])
        recorded_cwd = str(failure.target["cwd"])
    except BadReproducer as exc:
        raise UsageError("invalid_payload", str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            "invalid_payload", f"not a system-call crash reproducer: {exc!r}"
        ) from None
    return failure, wl, command, recorded_cwd if os.path.isdir(recorded_cwd) else os.getcwd()


def replay(record: Mapping[str, Any]) -> tuple[bool | None, str]:
    """Check a reproducer of source ``syscall`` again: ``(still failing, report)``.  A crash
    image is rebuilt by name from its recorded operations, byte for byte, and checked by a
    fresh backend process (after the images of its ``history``, when it has one) -- no strace
    needed (CRASH-SYS-9); the report lists the operations up to the crash point with each
    acknowledgement in its place, and the files of the image.  A fault or kill run is rerun
    until it fails again, at most :data:`REPLAY_TRIES` times; one that never does is
    undecided (``None``): not reproduced, and never called fixed (CRASH-COV-5).  A workload
    failure reruns the workload."""
    failure, wl, command, cwd = _parsed(record)
    target = failure.target
    mode = str(target.get("mode", "crash"))
    try:
        history = tuple(
            (int(k), parse_variant(str(variant))) for k, variant in target.get("history", ())
        )
    except (TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"a reproducer's history: {exc!r}") from None
    if failure.run in ("fault", "kill"):
        rec = Recording(wl, (), (), (), (), (), (0,), model_states(wl))
        return _replay_fault(failure, mode, command, cwd, rec)
    if failure.run == "workload":
        return _replay_workload(failure, command, cwd, wl)
    evidence = failure.evidence
    if evidence is None or failure.point is None:
        raise UsageError("invalid_payload", "a crash reproducer without its recorded operations")
    k, variant = failure.point, parse_variant(failure.variant)
    rec = Recording(wl, evidence.ops, evidence.acked_at, (), (), (), (0,), model_states(wl))
    try:
        built = profile_named(failure.built_under)
        image = power_image(
            evidence.ops, k, variant, failure.seed, start=evidence.base, profile=built
        )
        contents = {str(p): base64.b64decode(d) for p, d in target.get("contents", {}).items()}
        if contents or target.get("removed"):  # what the trace could not give (CRASH-SYS-17)
            removed = {str(path) for path in target.get("removed", ())}
            files = {p: d for p, d in {**image.files, **contents}.items() if p not in removed}
            image = attrs.evolve(image, files=files)
        shown = image
        if failure.recovery is not None:
            j, during = failure.recovery
            shown = power_image(evidence.recovery_ops, j, during, failure.seed, start=image)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise UsageError(
            "invalid_payload", f"the recorded operations give no such image: {exc}"
        ) from None
    with ImageChecker(command, cwd, rec, failure.seed) as checker:
        for earlier, named in history:
            with contextlib.suppress(ValueError):
                again = power_image(evidence.ops, earlier, named, start=evidence.base)
                checker.check(earlier, named, again, rec.allowed(earlier))
        allowed = rec.allowed(k)
        if failure.recovery is not None:  # the state the uninterrupted recovery gives now
            allowed = rec.narrowed(k, checker.read(image))
        found = checker.check(k, variant, shown, allowed, remember=failure.recovery is None)
    lines = [f"replaying {failure.what}", _story(failure, evidence, wl)]
    if variant.power_loss or failure.profiles:
        lines.append(
            f"file-system profiles: fails {profiles_text(failure.profiles)} (the image is "
            f"rebuilt under {failure.built_under}; CRASH-SYS-15)"
        )
    if failure.recovery is not None:
        lines.append(_recovery_story(failure, evidence))
    if history:
        lines.append(
            f"the checker child first reopened the {len(history)} images it had reopened "
            "before this one (the failure needed them)"
        )
    lines += files_lines("files after the crash:", shown)
    if variant.power_loss:
        cache = power_image(evidence.ops, k, ProcessCrash(), start=evidence.base)
        lines += lost_lines(cache, image)
    if found is None and history:
        return None, "\n".join([*lines, "not reproduced: the failure depended on what the "
                                "checker process had reopened before, which a replay cannot "
                                "rebuild in full"])  # fmt: skip
    if found is None:
        return False, "\n".join([*lines, "the recovered state is allowed now"])
    return True, "\n".join([*lines, f"{found.rule}: {found.problem}"])


def _story(failure: CrashFailure, evidence: Evidence, wl: Workload) -> str:
    """The workload's operations up to the crash point, each acknowledgement in its place."""
    steps, ops = wl.steps, evidence.ops
    k = failure.point
    assert k is not None
    shown = [
        f"workload {wl.name} ({len(steps)} steps), crash before operation {k} of "
        f"{len(ops)}, {failure.variant}:"
    ]
    acks = {at: i for i, at in enumerate(evidence.acked_at) if at is not None}
    first = max(0, k - 12)
    if first:
        shown.append(f"  ... {first} earlier operations")
    for index in range(first, min(k + 1, len(ops) + 1)):
        if index in acks:
            step = acks[index]
            shown.append(f"  -- step {step + 1} ({steps[step].op}) acknowledged")
        if index == k:
            what = ops[k].describe() if k < len(ops) else "(end of the run)"
            shown.append(f"  >> crash here, before: {what}")
        elif index < len(ops):
            shown.append(f"  {index:4} {ops[index].describe()}")
    return "\n".join(shown)


def _recovery_story(failure: CrashFailure, evidence: Evidence) -> str:
    assert failure.recovery is not None
    j, during = failure.recovery
    shown = [f"then a backend reopened that image, and crashed ({during}) during it:"]
    for index, op in enumerate(evidence.recovery_ops[: j + 1]):
        mark = ">> crash here, before:" if index == j else f"{index:4}"
        shown.append(f"  {mark} {op.describe()}")
    return "\n".join(shown)


def rerun_fault_record(record: Mapping[str, Any]) -> FaultRerun:
    """A fault or kill reproducer of source ``syscall`` run again until it fails, at most
    :data:`REPLAY_TRIES` times, for its bundle: what it broke, what the run did and the disk
    it left (INSTALL-24)."""
    failure, wl, command, cwd = _parsed(record)
    mode = str(failure.target.get("mode", "crash"))
    rec = Recording(wl, (), (), (), (), (), (0,), model_states(wl))
    head, rerun = _rerun_fault(failure, mode, command, cwd, rec)
    return attrs.evolve(rerun, story=(head, *rerun.story))


def _rerun_fault(
    failure: CrashFailure, mode: str, command: Sequence[str], cwd: str, rec: Recording
) -> tuple[str, FaultRerun]:
    """Rerun a fault or kill reproducer with the same injection until it fails again or
    :data:`REPLAY_TRIES` runs did not (CRASH-COV-5): the replay's head line, and the run."""
    from scopecheck.crashsim.strace import unavailable

    try:
        _, child, expression = mode.split(":", 2)
        process = int(child)
    except ValueError:
        raise UsageError("invalid_payload", f"a fault reproducer with mode {mode!r}") from None
    head = f"replaying {failure.what}: {expression} in backend process {process + 1}"
    why = unavailable()
    if why is not None:
        return head, FaultRerun(None, (), None, f"cannot rerun it: {why}")
    base = tempfile.mkdtemp(prefix="scopecheck-replay-", dir=scratch_base())
    dropped: dict[str, int] = {}
    story: tuple[str, ...] = ()
    disk: Image | None = None
    try:
        with ImageChecker(command, cwd, rec) as checker:
            for attempt in range(1, REPLAY_TRIES + 1):
                result = fault_run(command, cwd, rec, base, checker, process, expression, -1)
                story, disk = result.story or story, result.disk or disk
                if result.outcome == "dropped":
                    dropped[result.why] = dropped.get(result.why, 0) + 1
                    continue
                found = result.problem
                if found is not None:
                    problem = FaultProblem(
                        found.rule, found.problem,
                        {} if found.image is None else dict(found.image.files),
                        found.power_loss, found.profiles, reappeared=found.reappeared,
                        image=found.image, allowed=found.allowed, cache=found.cache,
                    )  # fmt: skip
                    return head, FaultRerun(
                        problem, (f"reproduced on try {attempt}:", *story), result.disk,
                        ops=result.ops, acked_at=result.acked_at,
                    )  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    judged = REPLAY_TRIES - sum(dropped.values())
    missed = "".join(f"; {n} dropped: {why}" for why, n in dropped.items())
    why = (
        "no run was judged, so"
        if not judged
        else "the backend may have changed, or the failure depends on timing or on which "
        "thread makes the call, so"
    )
    return head, FaultRerun(None, story, disk, (
        f"not reproduced in {REPLAY_TRIES} tries ({judged} judged and broke no rule{missed}): "
        f"{why} it is neither confirmed nor fixed (CRASH-COV-5)"
    ))  # fmt: skip


def _replay_fault(
    failure: CrashFailure, mode: str, command: Sequence[str], cwd: str, rec: Recording
) -> tuple[bool | None, str]:
    """A fault or kill reproducer is rerun with the same injection, until it fails again or
    :data:`REPLAY_TRIES` runs did not (CRASH-COV-5)."""
    head, rerun = _rerun_fault(failure, mode, command, cwd, rec)
    problem = rerun.problem
    if problem is None:
        return None, "\n".join([head, *rerun.story, rerun.why])
    return True, "\n".join([
        head, *rerun.story, f"{problem.rule}: {problem.problem}",
        f"file-system profiles: fails {profiles_text(problem.profiles)}",
    ])  # fmt: skip


def _replay_workload(
    failure: CrashFailure, command: Sequence[str], cwd: str, wl: Workload
) -> tuple[bool, str]:
    """A workload failure (CRASH-FS-7) reruns the workload, without strace."""
    base = tempfile.mkdtemp(prefix="scopecheck-replay-", dir=scratch_base())
    try:
        root = tempfile.mkdtemp(prefix="root-", dir=base)
        run = run_workload(command, wl, root, cwd, base, traced=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    head = f"replaying {failure.what}"
    bad = [(i, o) for i, o in enumerate(run.outcomes) if o != "ok"]
    if bad:
        index, outcome = bad[0]
        return True, (
            f"{head}\n{failure.rule}: without any crash, step {index + 1} "
            f"({wl.steps[index].op}) failed with {outcome}"
        )
    return False, f"{head}\n{wl.name}: every step now succeeds"
