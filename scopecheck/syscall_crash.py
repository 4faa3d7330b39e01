"""Crash exploration of a backend in another process, from its system calls (CRASH-SYS-*).

Any backend that runs as a child speaking the process protocol -- a Python factory taking
``root`` (through ``scopecheck serve``), or a command in any language -- gets the same crash
checks as a backend doing its I/O through ``scopecheck.FileSystem``:

1. **Record.**  A seeded workload (creates, commits, restarts, a delete) runs once with every
   child under ``strace``; each child's trace becomes a ``Timeline``
   (:mod:`scopecheck.crashsim.syscall_ops`) of file operations under the root, with the moment each
   response left the process (its acknowledgement, CRASH-SYS-2).
2. **Crash states.**  Before every mutating operation the ``Volume``
   (:mod:`scopecheck.crashsim.persistence`) gives the process-crash image and the power-loss images
   of the persistence model (CRASH-SYS-1, CRASH-SYS-3).
3. **Check.**  One long-lived checker child reopens each image (a ``hello`` over a copy of it)
   and :class:`ImageChecker` applies the crash rules: it opens (CRASH-FS-1), it is the model
   after the acknowledged steps or one more (CRASH-FS-2, CRASH-FS-6 for power loss), the next
   commit's seqs are above every acknowledged one (CRASH-FS-3), and a second reopen agrees
   (CRASH-FS-4).
4. **Faults and kills.**  The workload runs again with one mutating call failed by strace's
   fault injection (EIO, ENOSPC, EACCES: CRASH-FS-9..11 semantics, CRASH-SYS-6), or with the
   child killed by SIGKILL at that call (a real process crash, CRASH-SYS-7).

Every failure is a :class:`SyscallReproducer` holding the recorded operations: ``scopecheck
replay`` rebuilds the image from them and checks it again, without strace (CRASH-SYS-9).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.generic_sweep import ModelStates, model_states, workload
from scopecheck.crashsim.jsonl_sweep import BASE_TIME, StepClock, describe
from scopecheck.crashsim.jsonl_workloads import Workload, workload_from_json
from scopecheck.crashsim.persistence import FileOp, Image, Volume
from scopecheck.crashsim.strace import read_trace, strace_command
from scopecheck.crashsim.syscall_ops import Finding, Timeline, extract
from scopecheck.models.addresses import value
from scopecheck.models.errors import ProtocolError, ScopecheckError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value
from scopecheck.process.client import BackendProcess, ProcessRepository

SESSION = "s"
_PROBE = value("scopecheck.probe", "after-crash")

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


def scratch_base() -> str:
    """Where images are written for checking: a RAM disk when there is one."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


# -- recording ------------------------------------------------------------------------------


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
    #: ``(child, call index, call name, ordinal)`` of every mutating call, in order.
    calls: tuple[tuple[int, int, str, int], ...]
    #: The global operation index at which each child's operations start.
    starts: tuple[int, ...]
    model: ModelStates
    killed: bool = False

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
) -> Recording:
    """Run ``wl`` with each child under strace (trace files in ``traces``); ``inject`` is
    ``(child, strace inject expression)``.  Every step runs even after one fails (its outcome
    is its error code); a dead child is restarted for the next restart step only.  A run with
    a fault stops once the child after the faulted one has reopened the Session; ``traced``
    False runs it without strace (to measure what tracing costs)."""
    clock = StepClock()
    children: list[tuple[BackendProcess, str]] = []

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
    finally:
        if repo is not None:
            with contextlib.suppress(ScopecheckError):
                repo.close()
        for process, _ in children:
            process.stop()
    timelines = [
        extract(read_trace(trace), root, cwd, first_handle=1_000_000 * i)
        for i, (_, trace) in enumerate(children)
        if traced
    ]
    ran = wl if len(outcomes) == len(wl.steps) else Workload(wl.name, wl.steps[: len(outcomes)])
    return _combine(ran, timelines, acks, outcomes)


def _combine(
    wl: Workload,
    timelines: Sequence[Timeline],
    acks: Sequence[tuple[int, int] | None],
    outcomes: Sequence[str],
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
    )


# -- crash states ---------------------------------------------------------------------------


@attrs.frozen
class CrashPoint:
    """A crash before operation ``op_index`` of the recording: ``variant`` is ``process`` or
    one of :meth:`~scopecheck.crashsim.persistence.Volume.power_images`' power-loss variants."""

    op_index: int
    variant: str

    @property
    def power_loss(self) -> bool:
        return self.variant != "process"


def crash_images(ops: Sequence[FileOp], seed: int) -> Iterator[tuple[CrashPoint, Image]]:
    """Every crash image of ``ops``: before each mutating operation, and at the end."""
    volume = Volume()
    rng = random.Random(seed)
    for k, op in enumerate([*ops, None]):
        if op is None or op.mutating:
            yield CrashPoint(k, "process"), volume.process_image()
            for variant, image in volume.power_images(rng):
                yield CrashPoint(k, variant), image
        if op is not None:
            volume.apply(op)


def image_at(ops: Sequence[FileOp], point: CrashPoint, seed: int) -> Image:
    """The image of one crash point, rebuilt from the operations (a replay needs no strace)."""
    volume = Volume()
    for op in ops[: point.op_index]:
        volume.apply(op)
    if point.variant == "process":
        return volume.process_image()
    for variant, image in volume.power_images(random.Random(seed)):
        if variant == point.variant:
            return image
    raise ValueError(f"no {point.variant} image at op {point.op_index}")


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
    """One checker child that reopens image after image (a ``hello`` over each) and checks
    it against the model states the crash point allows."""

    def __init__(self, command: Sequence[str], cwd: str, recording: Recording) -> None:
        self.recording = recording
        self.base = tempfile.mkdtemp(prefix="scopecheck-images-", dir=scratch_base())
        self.clock = StepClock()
        self.clock.at(len(recording.workload.steps) + 1)
        self.process = BackendProcess(
            list(command), os.path.join(self.base, "first"), self.clock, cwd=cwd
        )
        self.checked = 0

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
            return failure(
                "CRASH-FS-1", f"reopening the image broke the backend process: {exc.message}"
            )
        except ScopecheckError as exc:
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


# -- reproducers ----------------------------------------------------------------------------


def _op_to_json(op: FileOp) -> dict[str, Any]:
    found = attrs.asdict(op)
    found["data"] = base64.b64encode(op.data).decode()
    found["flags"] = sorted(op.flags)
    return found


def _op_from_json(data: dict[str, Any]) -> FileOp:
    return FileOp(
        **{**data, "data": base64.b64decode(data["data"]), "flags": frozenset(data["flags"])}
    )


@attrs.frozen
class SyscallReproducer:
    """Everything a replay needs: the backend command, the workload, the recorded operations
    and acknowledgements, the crash point (or the fault), and what was found."""

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

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "crash",
            "engine": "syscall",
            "backend": self.spec,
            "spec": self.spec,
            "command": list(self.command),
            "cwd": self.cwd,
            "workload": self.workload.to_json(),
            "ops": [_op_to_json(op) for op in self.ops],
            "acked_at": list(self.acked_at),
            "op_index": self.point.op_index,
            "variant": self.point.variant,
            "seed": self.seed,
            "rule": self.rule,
            "error": self.error,
            "mode": self.mode,
            "replay": "scopecheck replay FILE  (no strace needed: the image is rebuilt from 'ops')",
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SyscallReproducer:
        return cls(
            str(data["spec"]),
            tuple(data["command"]),
            str(data["cwd"]),
            workload_from_json(data["workload"]),
            tuple(_op_from_json(op) for op in data["ops"]),
            tuple(data["acked_at"]),
            CrashPoint(int(data["op_index"]), str(data["variant"])),
            int(data["seed"]),
            str(data["rule"]),
            str(data["error"]),
            str(data.get("mode", "crash")),
        )


def replay(record: dict[str, Any]) -> tuple[bool, str]:
    """Rebuild the crash image of a reproducer from its operations and check it again with a
    fresh backend process: ``(still failing, report)``.  The report lists the operations up to
    the crash point with each acknowledgement in its place, and the files of the image."""
    repro = SyscallReproducer.from_json(record)
    rec = Recording(
        repro.workload, repro.ops, repro.acked_at, (), (), (), (0,), model_states(repro.workload)
    )
    if repro.mode != "crash":
        return _replay_fault(repro)
    image = image_at(repro.ops, repro.point, repro.seed)
    with ImageChecker(repro.command, repro.cwd, rec) as checker:
        found = checker.check(repro.point, image, rec.allowed(repro.point.op_index))
    lines = [_story(repro), "files after the crash:"]
    lines += [f"  {name}: {len(data)} bytes" for name, data in sorted(image.files.items())]
    if not image.files:
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


def _replay_fault(repro: SyscallReproducer) -> tuple[bool, str]:
    """A fault or kill reproducer is rerun under strace with the same injection."""
    from scopecheck.crashsim.strace import unavailable

    why = unavailable()
    if why is not None:
        return True, f"cannot rerun {repro.mode}: {why}"
    kind, child, expression = repro.mode.split(":", 2)
    base = tempfile.mkdtemp(prefix="scopecheck-replay-", dir=scratch_base())
    try:
        found = Exploration()
        rec = Recording(repro.workload, repro.ops, repro.acked_at, (), (), (), (0,),
                        model_states(repro.workload))  # fmt: skip
        with ImageChecker(repro.command, repro.cwd, rec) as checker:
            _fault_run(repro.spec, repro.command, repro.cwd, rec, base, found, checker, int(child),
                       expression)  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    head = f"rerun of the workload with {kind} {expression}"
    if found.failures:
        return True, f"{head}\n{found.failures[0].rule}: {found.failures[0].error}"
    return False, f"{head}\nthe disk afterwards is allowed now"


# -- exploring ------------------------------------------------------------------------------


@attrs.define
class Exploration:
    states: int = 0
    fault_runs: int = 0
    kill_runs: int = 0
    failures: list[SyscallReproducer] = attrs.field(factory=list)
    findings: list[str] = attrs.field(factory=list)
    seconds: float = 0.0


#: Fault and kill runs per recorded workload before the next workload is recorded.
FAULT_RUNS_PER_ROUND = 12
#: Crash states the first recording always gets, however small the budget: a run that checked
#: nothing would be reported as having run.
MIN_FIRST_ROUND = 100


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
) -> Exploration:
    """Record workloads, one per round, until ``budget`` seconds pass or a failure is found:
    each round checks every crash state of its recording, then (``faults``) runs a sample of
    its fault and kill runs."""
    started = time.perf_counter()
    found = Exploration()
    deadline = started + budget
    base = tempfile.mkdtemp(prefix="scopecheck-syscall-", dir=scratch_base())
    try:
        round_seed = seed
        while time.perf_counter() < deadline and not found.failures:
            wl = workload(round_seed, transactions)
            rec = _record(command, wl, cwd, base, found)
            if rec is None:
                break
            # Crash states get at most half of what is left, so every round has fault runs.
            now = time.perf_counter()
            states_until = now + (deadline - now) * (0.5 if faults else 1.0)
            floor = MIN_FIRST_ROUND if round_seed == seed else 0
            with ImageChecker(command, cwd, rec) as checker:
                for point, image in crash_images(rec.ops, round_seed):
                    if time.perf_counter() >= states_until and found.states >= floor:
                        break
                    problem = checker.check(point, image, rec.allowed(point.op_index))
                    found.states += 1
                    if problem is not None:
                        found.failures.append(
                            _reproducer(spec, command, cwd, rec, point, round_seed, problem.rule,
                                        problem.problem)
                        )  # fmt: skip
                        break
                    if on_progress is not None and found.states % 50 == 0:
                        found.seconds = time.perf_counter() - started
                        on_progress(found)
            if faults and not found.failures:
                at_least = 2 if round_seed == seed else 0
                _fault_runs(spec, command, cwd, rec, base, deadline, found, on_progress, started,
                            random.Random(round_seed), at_least=at_least)  # fmt: skip
            round_seed += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    found.seconds = time.perf_counter() - started
    return found


def _record(
    command: Sequence[str], wl: Workload, cwd: str, base: str, found: Exploration
) -> Recording | None:
    root = tempfile.mkdtemp(prefix="root-", dir=base)
    traces = tempfile.mkdtemp(prefix="traces-", dir=base)
    try:
        rec = run_workload(command, wl, root, cwd, traces)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
    for finding in rec.findings:
        text = f"{finding.kind}: {finding.text}"
        if text not in found.findings:
            found.findings.append(text)
    bad = [(i, o) for i, o in enumerate(rec.outcomes) if o != "ok"]
    if bad:
        index, outcome = bad[0]
        point = CrashPoint(len(rec.ops), "process")
        found.failures.append(
            SyscallReproducer(
                "", tuple(command), cwd, wl, rec.ops, rec.acked_at, point, 0, "CRASH-FS-7",
                f"without any crash, step {index + 1} ({wl.steps[index].op}) failed with {outcome}",
            )
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
        return None
    shutil.rmtree(root, ignore_errors=True)
    return rec


def _reproducer(
    spec: str, command: Sequence[str], cwd: str, rec: Recording, point: CrashPoint, seed: int,
    rule: str, problem: str, mode: str = "crash",
) -> SyscallReproducer:  # fmt: skip
    return SyscallReproducer(
        spec, tuple(command), cwd, rec.workload, rec.ops, rec.acked_at, point, seed, rule,
        problem, mode,
    )  # fmt: skip


def _fault_runs(
    spec: str,
    command: Sequence[str],
    cwd: str,
    rec: Recording,
    base: str,
    deadline: float,
    found: Exploration,
    on_progress: Callable[[Exploration], None] | None,
    started: float,
    rng: random.Random,
    limit: int = FAULT_RUNS_PER_ROUND,
    at_least: int = 0,
) -> None:
    """Fail a sample of ``limit`` mutating calls once each, or kill the child at them,
    rerunning the workload, and check the disk each run leaves against the acknowledged
    steps."""
    plans: list[tuple[int, int, str, int, str]] = []
    for child, call, name, ordinal in rec.calls:
        for errno in FAULTS.get(name, ()):
            plans.append((child, call, name, ordinal, f"{name}:error={errno}:when={ordinal + 1}"))
        plans.append((child, call, name, ordinal, f"{name}:signal=SIGKILL:when={ordinal + 1}"))
    rng.shuffle(plans)
    # one fault and one kill first, so even a small budget has both
    faults = [plan for plan in plans if "SIGKILL" not in plan[4]]
    kills = [plan for plan in plans if "SIGKILL" in plan[4]]
    plans = faults[:1] + kills[:1] + faults[1:] + kills[1:]
    with ImageChecker(command, cwd, rec) as checker:
        for done, (child, _call, _name, _ordinal, expression) in enumerate(plans[:limit]):
            if found.failures or (time.perf_counter() >= deadline and done >= at_least):
                return
            _fault_run(spec, command, cwd, rec, base, found, checker, child, expression)
            if on_progress is not None:
                found.seconds = time.perf_counter() - started
                on_progress(found)


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
) -> None:
    """One faulted or killed rerun of ``rec``'s workload, and its check."""
    kill = "SIGKILL" in expression
    root = tempfile.mkdtemp(prefix="root-", dir=base)
    traces = tempfile.mkdtemp(prefix="traces-", dir=base)
    try:
        run = run_workload(command, rec.workload, root, cwd, traces, inject=(child, expression))
        disk = read_image(root)
    finally:
        shutil.rmtree(traces, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    if kill:
        found.kill_runs += 1
    else:
        found.fault_runs += 1
    problem = _check_fault_run(checker, run, disk, expression, kill)
    if problem is not None:
        rule, text = problem
        point = CrashPoint(len(run.ops), "process")
        mode = f"{'kill' if kill else 'fault'}:{child}:{expression}"
        found.failures.append(_reproducer(spec, command, cwd, run, point, 0, rule, text, mode))


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


def _check_fault_run(
    checker: ImageChecker, run: Recording, disk: Image, expression: str, kill: bool
) -> tuple[str, str] | None:
    """The disk a faulted or killed run leaves reopens to what was acknowledged
    (CRASH-FS-9..11 for a fault, CRASH-FS-1 and CRASH-FS-2 for a kill)."""
    first = next((o for o in run.outcomes if o != "ok"), None)
    if not kill and first in ("OSError", "protocol_error"):
        return (
            "CRASH-FS-9",
            f"with {expression}, a step failed with {first}, not a scopecheck error with a "
            "stable code: the I/O error escaped the backend (or killed it)",
        )
    allowed = allowed_after(run, kill)
    directory = os.path.join(checker.base, "disk")
    write_image(disk, directory)
    try:
        repo = checker.reopen(directory)
        got: Snapshot | None = None
        if SESSION in repo.list():
            storage = repo.open(SESSION)
            got = storage.snapshot()
            storage.close()
    except ScopecheckError as exc:
        rule = "CRASH-FS-1" if kill else "CRASH-FS-11"
        return rule, f"with {expression}, reopening the disk afterwards raised {exc}"
    if got not in allowed:
        rule = "CRASH-FS-2" if kill else "CRASH-FS-9"
        shown = orjson.dumps(describe(got)).decode()
        wanted = " or ".join(orjson.dumps(describe(a)).decode() for a in allowed)
        return rule, f"with {expression}, the disk afterwards holds {shown}, not {wanted}"
    return None
