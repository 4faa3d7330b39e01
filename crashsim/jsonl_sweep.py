"""Every crash state of a JSONL workload on pyfakefs, reopened and checked against the model.

How it works (ALICE's prefixes, LazyFS's lost unsynced data, SQLite's crash-during-
recovery): :func:`trace` runs a workload once through
:class:`~scopecheck.crashsim.fs_recorder.RecordingFs` and the model
(``scopecheck.models.reference``) once beside it, giving the mutating operations and the
logical state after every step.
:mod:`scopecheck.crashsim.fs_source` turns the recorded calls into the persistence model's
operations (``Trace.file_ops``), and the images of
:func:`~scopecheck.crashsim.explore.point_images` on a
:class:`~scopecheck.crashsim.persistence.Volume` -- the one model every recorder is judged by
(CRASH-SYS-1) -- are, before every mutating operation *k* and at the end:

* ``process`` — a process crash: every completed call kept;
* ``torn-call:<path>:<cut>`` — a process crash while operation *k*, a write (or append), was in
  flight: its first *cut* bytes reached the file (every byte of a short write, line ends,
  4 KiB boundaries and a seeded sample of a long one);
* with ``mode="unsynced"`` also the power-loss images of
  :meth:`~scopecheck.crashsim.persistence.Volume.power_images` (``strict``, ``data-kept``,
  ``entries-kept``, ``only:<path>``, ``torn@1:<path>:<n>:<cut>``: a torn write is an unsynced
  write cut at a power loss; ``names-before:<op>``, ``names-only:<op>``, ``names-but:<op>``:
  some of the unsynced directory changes, CRASH-SYS-20).

Each state is written into one reused fake filesystem from ``{path: bytes}`` and checked by
:class:`Checker` (rules CRASH-1..CRASH-9 in ``spec/rules/crash_jsonl.toml``): the reopened
Session equals the model after step *s* or *s + 1* when op *k* ran in step *s* (all acknowledged
work present, nothing partial); the next commit's seq is above every complete record on disk;
a second open gives the same state and the same files; retired sidecars with no later records
are gone; and a crash at every mutating op of the recovery itself, reopened, gives the same
state again.  :func:`fault_sweep` injects single I/O faults without a crash: the fault runs of
:mod:`scopecheck.crashsim.generic_faults`, judged by the one fault checker
(:mod:`scopecheck.crashsim.fault_check`), with this sweep's sidecar checks and rule names
(CRASH-10..12, :func:`fault_extra`).

:class:`JsonlRound` and :class:`JsonlSource` are how the exploration loop
(:mod:`scopecheck.crashsim.explore`) sees this sweep: :func:`explore_workload` checks every
crash point of one workload in one pass, :func:`explore_with_faults` explores generated
workloads in coverage order for a budget (the JSONL half of ``scopecheck fuzz``).
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs
import orjson

from scopecheck.crashsim.coverage import crash_points
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
from scopecheck.crashsim.failure import BadReproducer, CrashFailure, Evidence, profiles_text
from scopecheck.crashsim.fs_recorder import Op, RecordingFs
from scopecheck.crashsim.fs_source import absolute, acknowledged_at, file_ops
from scopecheck.crashsim.jsonl_workloads import Step, Workload
from scopecheck.crashsim.persistence import (
    PROFILES,
    FileOp,
    Image,
    Volume,
    call_cuts,
)
from scopecheck.crashsim.points import Torn, TornCall, Variant, parse_variant
from scopecheck.crashsim.recovery import Broken, Expected, Extra, judge
from scopecheck.crashsim.sandbox import (
    BASE_TIME,
    Sandbox,
    StepClock,
    describe,
    render_files,
    show_files,
)
from scopecheck.crashsim.shards import Shard
from scopecheck.impl.jsonl import JsonlRepository, session_paths
from scopecheck.models.addresses import value
from scopecheck.models.errors import ScopecheckError, UsageError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value

Mode = Literal["prefix", "unsynced"]
#: Sampled cuts per torn write in this sweep: a JSONL reopen is cheap, and torn tails are
#: what its recovery repairs (CRASH-8), so it cuts each unsynced write at more points than
#: the generic sweep.
JSONL_CUTS = 12
#: A JSONL write in flight at a process crash is cut at every byte up to this size (a
#: commit's record line), at line ends, 4 KiB boundaries and this many samples beyond it.
JSONL_SHORT_CALL = 256
JSONL_CALL_SAMPLES = 12
MODES: tuple[Mode, ...] = ("prefix", "unsynced")
ROOT = "/sessions"
SESSION = "s"
MAIN = f"{ROOT}/{SESSION}.jsonl"
SCOPES = MAIN + ".scopes"
_SEQ = re.compile(rb'"seq":(\d+)')
_NEXT = re.compile(rb'"nextSeq":(\d+)')
_RETIRE = re.compile(rb'"kind":"scope","op":"retire","seq":(\d+),"scopeId":"((?:[^"\\]|\\.)*)"')

if TYPE_CHECKING:
    from scopecheck.crashsim.generic_faults import FaultExtra


class Traced(Protocol):
    """What :func:`allowed_for` reads of a trace (this module's or the generic sweep's)."""

    @property
    def workload(self) -> Workload: ...

    @property
    def file_ops(self) -> tuple[FileOp, ...]: ...


class TracedOps(Traced, Protocol):
    """What a :class:`SandboxRound` reads of a trace (this module's or the generic sweep's)."""

    @property
    def acked_at(self) -> tuple[int | None, ...]: ...

    @property
    def initial(self) -> Image: ...


class StateChecker(Protocol):
    """What a :class:`SandboxRound` asks of its checker."""

    states: int
    recovery_states: int

    def check(self, crash: CrashState) -> CrashFailure | None: ...


@attrs.frozen
class Trace:
    workload: Workload
    ops: tuple[Op, ...]
    #: ``states[i]`` is the model's Session after the first ``i`` steps (``None``: no Session).
    states: tuple[Snapshot | None, ...]
    initial: Image
    #: ``ops`` as the persistence model's operations (:mod:`scopecheck.crashsim.fs_source`).
    file_ops: tuple[FileOp, ...] = ()
    #: ``acked_at[i]``: how many of ``file_ops`` had completed when step ``i`` returned.
    acked_at: tuple[int | None, ...] = ()
    #: ``next_seqs[i]``: the lowest seq a commit after the first ``i`` steps may get (SEQ-7).
    next_seqs: tuple[int, ...] = ()


def drive_steps(
    new_repo: Callable[[], Any],
    steps: Sequence[Step],
    clock: StepClock,
    on_step: Callable[[int], None] | None = None,
    restart_on_reopen: bool = False,
) -> tuple[Any, Any]:
    """Run ``steps`` on the repository ``new_repo()`` builds; returns ``(repository, open
    storage or None)``.  ``restart_on_reopen``: a ``reopen`` also closes the repository and
    builds a new one (a process restart; the generic sweep's third-party backends)."""
    repo = new_repo()
    storage: Any = None
    for index, step in enumerate(steps):
        clock.at(index)
        if on_step is not None:
            on_step(index)
        if step.op == "create":
            storage = repo.create(SESSION)
        elif step.op == "commit":
            storage.commit(step.writes)
        elif step.op == "reopen":
            storage.close()
            if restart_on_reopen:
                close = getattr(repo, "close", None)
                if callable(close):
                    close()
                repo = new_repo()
            storage = repo.open(SESSION)
        elif step.op == "delete":
            storage.close()
            storage = None
            repo.delete(SESSION)
    return repo, storage


def run_steps(
    repo_class: type[JsonlRepository],
    fs: Any,
    steps: Sequence[Step],
    clock: StepClock,
    on_step: Callable[[int], None] | None = None,
) -> Any:
    """Run ``steps`` on a repository over ``fs``; returns the open storage (or ``None``)."""
    return drive_steps(lambda: repo_class(ROOT, fs, clock, cwd="/crash"), steps, clock, on_step)[1]


def fold_model(workload: Workload, observe: Callable[[Any], None]) -> None:
    """Drive the reference model through ``workload``, calling ``observe(session or None)``
    before any step and after each one."""
    repo = ReferenceRepository()
    session: Any = None
    observe(None)
    for index, step in enumerate(workload.steps):
        if step.op == "create":
            session = repo.create(SESSION)
        elif step.op == "commit":
            session.commit(step.writes, BASE_TIME + 1000 * index)
        elif step.op == "delete":
            repo.close_session(SESSION)
            repo.delete(SESSION)
            session = None
        observe(session)


@attrs.frozen
class ModelStates:
    """``snapshots[i]``: the model's Session after the first ``i`` steps (``None``: none);
    ``next_seqs[i]``: the lowest seq the next commit may get then (SEQ-7)."""

    snapshots: tuple[Snapshot | None, ...]
    next_seqs: tuple[int, ...]


def model_states(wl: Workload) -> ModelStates:
    """The model's Session and next sequence after each prefix of ``wl``'s steps."""
    snapshots: list[Snapshot | None] = []
    next_seqs: list[int] = []

    def observe(session: Any) -> None:
        snapshots.append(None if session is None else session.snapshot())
        log = session.log if session is not None else []
        next_seqs.append(log[-1].first_seq + len(log[-1].writes) if log else 1)

    fold_model(wl, observe)
    return ModelStates(tuple(snapshots), tuple(next_seqs))


def trace(workload: Workload, repo_class: type[JsonlRepository] = JsonlRepository) -> Trace:
    box = Sandbox()
    initial = box.state()
    recorder = RecordingFs(box.fs)

    def on_step(index: int) -> None:
        recorder.step = index

    storage = run_steps(repo_class, recorder, workload.steps, StepClock(), on_step)
    if storage is not None:
        storage.close()
    ops = tuple(recorder.ops)
    converted = file_ops(ops, ROOT, initial)
    model = model_states(workload)
    return Trace(
        workload, ops, model.snapshots, initial, converted,
        acknowledged_at(converted, len(workload.steps)), model.next_seqs,
    )  # fmt: skip


# -- crash states ----------------------------------------------------------------------------


@attrs.frozen
class CrashState:
    """A crash before ``file_ops[op_index]``: ``crash`` is which image of that crash point
    (:mod:`~scopecheck.crashsim.points`: the process crash, a write torn in flight, a power
    loss of :meth:`~scopecheck.crashsim.persistence.Volume.power_images`), ``variant`` its
    name, as a failure reports it."""

    op_index: int
    crash: Variant
    state: Image
    #: Indices into ``Trace.states`` the recovered Session may equal.
    allowed: tuple[int, ...]

    @property
    def variant(self) -> str:
        return self.crash.name

    @property
    def offset(self) -> int | None:
        """The bytes a torn write kept (a write torn at a power loss or in flight)."""
        return self.crash.cut if isinstance(self.crash, Torn | TornCall) else None

    @property
    def power_loss(self) -> bool:
        return self.crash.power_loss

    @property
    def family(self) -> str:
        """The kind of crash point: ``process``, ``strict``, ``only``, ``torn``, ..."""
        return self.crash.family


def crash_states(
    ops: Sequence[FileOp],
    initial: Image,
    mode: Mode,
    allowed_at: Callable[[int], tuple[int, ...]],
    seed: int = 0,
    points: Sequence[int] | None = None,
    cuts: int = 3,
    call_cuts_of: Callable[[bytes, random.Random], list[int]] = call_cuts,
) -> Iterator[CrashState]:
    """The crash states of ``ops`` at ``points`` (sorted; default every crash point: before
    each mutating operation, and at the end), in one sweep over the operations: the images of
    :func:`~scopecheck.crashsim.explore.point_images` -- the process crash, the write in
    flight torn at ``call_cuts_of`` its bytes, and in ``unsynced`` mode every power-loss image
    that differs from the process image (CRASH-SYS-1), ``cuts`` sampled cut points per torn
    unsynced write besides the first, middle and last byte."""
    images = Images(power=mode == "unsynced", cuts=cuts, call_cuts_of=call_cuts_of)
    volume = Volume(initial)
    done = 0
    for k in crash_points(ops) if points is None else points:
        while done < k:
            volume.apply(ops[done])
            done += 1
        allowed = allowed_at(k)
        for variant, image in point_images(volume, ops, k, seed, images):
            yield CrashState(k, variant, image, allowed)


def jsonl_call_cuts(data: bytes, rng: random.Random) -> list[int]:
    """Cut points of a JSONL write in flight (every byte of a record line)."""
    return call_cuts(data, rng, JSONL_SHORT_CALL, JSONL_CALL_SAMPLES)


def middle_cut(data: bytes, rng: random.Random) -> list[int]:
    """One cut point, the middle, for a write in flight during a recovery (CRASH-5)."""
    del rng
    return [len(data) // 2]


def crash_state(
    ops: Sequence[FileOp],
    initial: Image,
    k: int,
    variant: Variant | str,
    allowed: tuple[int, ...],
    profile: str = "posix",
) -> CrashState | None:
    """The crash state ``(k, variant)`` rebuilt by its variant or name alone
    (:func:`~scopecheck.crashsim.persistence.power_image`), for a replay; ``None`` when the
    operations have no such state (a replay after the backend changed)."""
    from scopecheck.crashsim.persistence import power_image

    if k not in crash_points(ops):
        return None
    try:
        variant = parse_variant(variant) if isinstance(variant, str) else variant
        image = power_image(ops, k, variant, start=initial, profile=profile)
    except ValueError:
        return None
    return CrashState(k, variant, image, allowed)


def allowed_for(tr: Traced) -> Callable[[int], tuple[int, ...]]:
    """Operation *k* ran inside step *s*: the Session may be as before or as after that step."""
    ops, final = tr.file_ops, len(tr.workload.steps)

    def allowed(k: int) -> tuple[int, ...]:
        if k >= len(ops):
            return (final,)
        step = ops[k].step
        return (step, step + 1)

    return allowed


# -- checking --------------------------------------------------------------------------------


def max_seq_on_disk(files: dict[str, bytes]) -> int:
    """The highest seq of any *complete* line in the Session's files (temp files excluded)."""
    top = 0
    for path, data in files.items():
        if path.endswith(session_paths.TEMP_SUFFIX) or not (
            path == MAIN or path.startswith(SCOPES)
        ):
            continue
        end = data.rfind(b"\n")
        if end < 0:
            continue
        complete = data[: end + 1]
        for match in _SEQ.finditer(complete):
            top = max(top, int(match.group(1)))
        first = complete[: complete.find(b"\n")]
        for match in _NEXT.finditer(first):
            top = max(top, int(match.group(1)) - 1)
    return top


def dead_sidecars(files: dict[str, bytes]) -> list[str]:
    """Sidecars with no complete record after their scope's latest retirement in the main
    log: open must have removed them (000 §6.3 stage 9)."""
    main = files.get(MAIN, b"")
    main = main[: main.rfind(b"\n") + 1]
    boundaries: dict[str, int] = {}
    for match in _RETIRE.finditer(main):
        scope_id = orjson.loads(b'"' + match.group(2) + b'"')
        boundaries[scope_id] = max(boundaries.get(scope_id, 0), int(match.group(1)))
    dead = []
    for path, data in files.items():
        if not path.startswith(SCOPES + "/") or not path.endswith(session_paths.SIDECAR_SUFFIX):
            continue
        scope_id = session_paths.decode_sidecar_name(posixpath.basename(path))
        if scope_id is None:
            continue
        complete = data[: data.rfind(b"\n") + 1]
        seqs = [int(m.group(1)) for m in _SEQ.finditer(complete)]
        if not seqs or max(seqs) <= boundaries.get(scope_id, 0):
            dead.append(path)
    return dead


class Checker:
    """Reopens crash states on one sandbox and checks them against a trace's model states."""

    def __init__(
        self,
        tr: Trace,
        mode: Mode,
        repo_class: type[JsonlRepository] = JsonlRepository,
        *,
        recovery: bool = True,
        invariants: Callable[[Any, int], list[str]] | None = None,
        seed: int = 0,
    ) -> None:
        self.trace = tr
        self.seed = seed
        #: ``invariants(storage, steps)``: extra checks of the reopened Session taken as the
        #: model after the first ``steps`` workload steps (the lifecycle's, OP-21); ``[]`` = ok.
        self.invariants = invariants
        self.mode = mode
        self.repo_class = repo_class
        self.box = Sandbox()
        self.clock = StepClock()
        self.clock.at(len(tr.workload.steps) + 1)
        self.recovery = recovery
        #: States checked, including crash-during-recovery states (also counted alone).
        self.states = 0
        self.recovery_states = 0

    def _repo(self, fs: Any) -> JsonlRepository:
        return self.repo_class(ROOT, fs, self.clock, cwd="/crash")

    def failure(
        self, k: int, variant: str, rule: str, problem: str, *,
        recovery: tuple[int, str] | None = None, shown: dict[str, Any] | None = None,
        recovery_ops: Sequence[FileOp] = (),
    ) -> CrashFailure:  # fmt: skip
        """A failure of the crash image ``(k, variant)`` of this trace (with ``recovery``, of
        the crash during its recovery ``recovery_ops``)."""
        return trace_failure("jsonl", self.trace, self.mode, self.seed, k, variant, rule,
                             problem, recovery=recovery, shown=shown,
                             recovery_ops=recovery_ops)  # fmt: skip

    def check(self, crash: CrashState) -> CrashFailure | None:
        """Reopen the crash image and judge it with the one recovery checker
        (:func:`~scopecheck.crashsim.recovery.judge`) under the JSONL rules, adding this
        format's own checks: the lifecycle invariants (OP-21), no dead sidecar left (CRASH-6),
        the probe commit above every record on disk (CRASH-3), a second open changing no file
        (CRASH-4); then crash the recovery (CRASH-5)."""
        self.states += 1
        box = self.box
        before = absolute(crash.state, ROOT)
        box.load(crash.state)
        tr = self.trace
        expected = Expected(
            tr.states, tr.next_seqs, [s.op for s in tr.workload.steps], crash.allowed
        )

        def failure(
            rule: str, problem: str, recovered: Any = None,
            recovery: tuple[int, str] | None = None, recovery_ops: Sequence[FileOp] = (),
        ) -> CrashFailure:  # fmt: skip
            return self.failure(
                crash.op_index, crash.variant, rule, problem, recovery=recovery,
                recovery_ops=recovery_ops,
                shown={
                    "expected": [describe(s) for s in expected.states],
                    "recovered": recovered,
                    "files_before": show_files(before),
                    "files_after": show_files(box.tree()),
                },
            )  # fmt: skip

        recorders: list[RecordingFs] = []
        recovery_end: list[int] = []
        files: list[dict[str, bytes]] = []

        def reopen() -> JsonlRepository:
            recorders.append(RecordingFs(box.fs))
            return self._repo(recorders[-1])

        def recovered(storage: Any, state: Snapshot, matched: int) -> Broken | None:
            recovery_end.append(len(recorders[0].ops))
            broken = self._invariants(storage, crash.allowed)
            if broken:
                return Broken("OP-21", "lifecycle invariants broken — " + " | ".join(broken))
            dead = dead_sidecars(box.tree())
            if dead:
                return Broken("CRASH-6", f"retired sidecars left after recovery: {dead}", state)
            return None

        def committed(results: Sequence[Any], state: Snapshot) -> Broken | None:
            top = max_seq_on_disk(before)
            files.append(box.tree())
            if results[0].seq <= top:
                problem = f"the next commit got seq {results[0].seq}, not above seq {top} on disk"
                return Broken("CRASH-3", problem, state)
            return None

        def mismatched(storage: Any, state: Snapshot | None) -> str:
            broken = self._invariants(storage, crash.allowed)
            return "; lifecycle invariants broken — " + " | ".join(broken) if broken else ""

        def reopened() -> Broken | None:
            if box.tree() != files[0]:
                return Broken("CRASH-4", "a second reopen changed the files again")
            return None

        verdict = judge(
            reopen, expected, session=SESSION, probe=_PROBE,
            recreate=_created(),
            extra=Extra(recovered, committed, reopened, mismatched), rules=JSONL_RULES,
            errors=(ScopecheckError,),
        )  # fmt: skip
        if isinstance(verdict, Broken):
            shown = verdict.recovered
            return failure(
                verdict.rule, verdict.problem, shown if isinstance(shown, str) else describe(shown)
            )
        recovery_ops = recorders[0].ops[: recovery_end[0]] if recovery_end else []
        if self.recovery and recovery_ops and verdict.state is not None:
            return self._crash_recovery(crash, recovery_ops, verdict.state, failure)
        return None

    def _invariants(self, storage: Any, allowed: tuple[int, ...]) -> list[str]:
        """The lifecycle's invariants (OP-21) of the reopened Session taken as the model after
        each allowed number of steps: ``[]`` when they hold for one, else what broke for each."""
        if self.invariants is None:
            return []
        broken: list[str] = []
        for index in allowed:
            try:
                problems = self.invariants(storage, index)
            except ScopecheckError as exc:
                problems = [f"reads of the recovered Session failed: {exc.code}: {exc}"]
            if not problems:
                return []
            broken.append(f"as {index} steps: " + "; ".join(problems))
        return broken

    def _crash_recovery(
        self,
        crash: CrashState,
        recorded: list[Op],
        recovered: Snapshot,
        failure: Callable[..., CrashFailure],
    ) -> CrashFailure | None:
        """Crash at every mutating op of the recovery itself, through the same persistence
        model; reopening must still give ``recovered`` (CRASH-5)."""
        ops = file_ops(recorded, ROOT, crash.state)
        inners = crash_states(
            ops, crash.state, self.mode, lambda _: (), seed=crash.op_index, call_cuts_of=middle_cut
        )
        for inner in inners:
            if inner.state == crash.state:
                continue  # the crash state itself, checked already
            self.states += 1
            self.recovery_states += 1
            self.box.load(inner.state)
            label = (
                f"recovery op {inner.op_index} ({_op_desc(ops, inner.op_index)}) {inner.variant}"
            )
            try:
                repo = self._repo(self.box.fs)
                during = (inner.op_index, inner.variant)
                if SESSION not in repo.list():
                    return failure(
                        "CRASH-5",
                        f"{label}: the Session vanished",
                        recovery=during,
                        recovery_ops=ops,
                    )
                storage = repo.open(SESSION)
                again = storage.snapshot()
                storage.close()
            except ScopecheckError as exc:
                return failure(
                    "CRASH-5",
                    f"{label}: reopen failed: {exc.code}: {exc}",
                    recovery=during,
                    recovery_ops=ops,
                )
            if again != recovered:
                return failure(
                    "CRASH-5",
                    f"{label}: another state than the first recovery",
                    describe(again),
                    recovery=during,
                    recovery_ops=ops,
                )
        return None


#: The JSONL crash rule (``spec/rules/crash_jsonl.toml``) each check of the recovery checker
#: enforces for our own backend.
JSONL_RULES = {
    "reopen": "CRASH-1",
    "vanished": "CRASH-1",
    "state": "CRASH-2",
    "recreate": "CRASH-9",
    "recreate-raised": "CRASH-1",
    "seq": "CRASH-3",
    "again": "CRASH-4",
}
_PROBE = set_value(value("crash.probe", "k"), 1)


def _op_desc(ops: Sequence[FileOp], k: int) -> str:
    return ops[k].describe() if k < len(ops) else "end"


def _just_create() -> Workload:
    return Workload("create", (Step("create"),))


@functools.cache
def _created() -> Snapshot | None:
    """The model's Session right after its create: what creating it again must give."""
    return model_states(_just_create()).snapshots[1]


# -- exploring -------------------------------------------------------------------------------


@attrs.define
class WorkloadReport:
    name: str
    mode: str
    ops: int = 0
    states: int = 0
    #: Of ``states``: crashes inside the recovery of another crash state (CRASH-5).
    recovery_states: int = 0
    faults: int = 0
    failures: list[CrashFailure] = attrs.field(factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "ops": self.ops,
            "states": self.states,
            "recovery_states": self.recovery_states,
            "fault_runs": self.faults,
            "failures": len(self.failures),
            "seconds": round(self.seconds, 3),
        }


def jsonl_states(tr: Trace, mode: Mode, seed: int = 0) -> Iterator[CrashState]:
    """Every crash state of a JSONL trace, with this sweep's cut points."""
    return crash_states(
        tr.file_ops,
        tr.initial,
        mode,
        allowed_for(tr),
        seed,
        cuts=JSONL_CUTS,
        call_cuts_of=jsonl_call_cuts,
    )


def count_states(tr: Trace, mode: Mode, seed: int = 0) -> int:
    states = jsonl_states(tr, mode, seed)
    return sum(1 for _ in states)


class SandboxRound:
    """A round of the exploration loop (:mod:`scopecheck.crashsim.explore`) over a traced
    workload on the pyfakefs sandbox, judged by a checker that reopens a :class:`CrashState`
    and crashes each recovery itself (CRASH-5, CRASH-FS-5), so the loop has none to crash.
    Subclasses give the checker and the fault runs."""

    def __init__(self, tr: TracedOps, checker: StateChecker, images: Images, seed: int) -> None:
        self.ops = tr.file_ops
        self.acked_at = tr.acked_at
        self.base = tr.initial
        self.seed = seed
        self.checker = checker
        self._allowed = allowed_for(tr)
        self._images = images

    @property
    def states(self) -> int:
        return self.checker.states

    @property
    def recovery_states(self) -> int:
        return self.checker.recovery_states

    def images(
        self, volume: Volume, ops: Sequence[FileOp], k: int
    ) -> Iterable[tuple[Variant, Image]]:
        return point_images(volume, ops, k, self.seed, self._images)

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | None:
        return self.checker.check(CrashState(k, variant, image, self._allowed(k)))

    def recovers(self, variant: Variant, image: Image) -> bool:
        return False  # the checker crashes every recovery itself

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        return None

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | None:  # fmt: skip
        return None


class JsonlRound(SandboxRound):
    """One traced JSONL workload as a round: this sweep's images (more cuts per torn write
    and every byte of a record line in flight), checked by :class:`Checker`; its fault runs
    are :func:`fault_sweep`'s."""

    def __init__(
        self,
        tr: Trace,
        mode: Mode,
        repo_class: type[JsonlRepository],
        seed: int,
        *,
        recovery: bool = True,
        invariants: Callable[[Any, int], list[str]] | None = None,
    ) -> None:
        checker = Checker(tr, mode, repo_class, recovery=recovery, invariants=invariants, seed=seed)
        images = Images(power=mode == "unsynced", cuts=JSONL_CUTS, call_cuts_of=jsonl_call_cuts)
        super().__init__(tr, checker, images, seed)
        self.trace = tr
        self.repo_class = repo_class

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        runs, _ = fault_sweep(
            self.trace.workload, self.repo_class, deadline=deadline, start=start, limit=limit,
            at_least=at_least, seed=self.seed, tr=self.trace, findings=findings,
        )  # fmt: skip
        return runs

    @functools.cached_property  # the trace is fixed: asked once per fault run
    def fault_plan_size(self) -> int:
        """:func:`fault_sweep`'s runs: those of the generic fault plan of the trace."""
        from scopecheck.crashsim.generic_faults import fault_plan

        return len(fault_plan(self.trace))


def explore_workload(
    workload: Workload,
    *,
    mode: Mode = "unsynced",
    repo_class: type[JsonlRepository] = JsonlRepository,
    seed: int = 0,
    max_failures: int = 10,
    recovery: bool = True,
    faults: bool = True,
    on_state: Callable[[int], None] | None = None,
    deadline: float | None = None,
    invariants: Callable[[Any, int], list[str]] | None = None,
) -> WorkloadReport:
    """Check every crash state of ``workload`` in trace order (one pass of every crash point,
    in the exploration loop) and, with ``faults``, every single I/O fault, until
    ``max_failures`` failures or ``deadline``."""
    started = time.perf_counter()
    report = WorkloadReport(workload.name, mode)
    tr = trace(workload, repo_class)
    report.ops = len(tr.ops)
    rnd = JsonlRound(tr, mode, repo_class, seed, recovery=recovery, invariants=invariants)
    findings = Findings(max_failures)
    until = float("inf") if deadline is None else deadline
    check_passes(
        rnd, findings, until=until, first=False, passes=[crash_points(tr.file_ops)],
        on_state=None if on_state is None else lambda: on_state(rnd.states), profiles=PROFILES,
    )  # fmt: skip
    report.states = rnd.states
    report.recovery_states = rnd.recovery_states
    if faults and not findings.full and time.perf_counter() < until:
        report.faults = rnd.fault_runs(findings, until, start=0, limit=None, at_least=0)
    report.failures = findings.failures
    report.seconds = time.perf_counter() - started
    return report


# -- I/O faults without a crash ----------------------------------------------------------------


def _unlink_refused(kind: str) -> tuple[str, str] | None:
    """A failed sidecar unlink must not fail the commit that retired it (CRASH-10)."""
    if kind == "unlink":
        return "CRASH-10", "a failed sidecar unlink rejected the commit that retired it"
    return None


def _no_dead_sidecars(files: dict[str, bytes]) -> tuple[str, str] | None:
    """After the clean restart that ends a fault run, no retired sidecar is left (CRASH-10)."""
    dead = dead_sidecars(files)
    if dead:
        return "CRASH-10", f"retired sidecars still on disk after the next open: {dead}"
    return None


def fault_extra() -> FaultExtra:
    """The JSONL checks a fault run adds to the format-blind ones of
    :class:`~scopecheck.crashsim.generic_faults.FaultRun`, and the JSONL names of their
    rules: a failed commit is CRASH-11, a handle wrong after it CRASH-12."""
    from scopecheck.crashsim.generic_faults import FaultExtra

    return FaultExtra(
        failed_commit=_unlink_refused,
        restarted=_no_dead_sidecars,
        rules={"CRASH-FS-9": "CRASH-11", "CRASH-FS-10": "CRASH-12"},
    )


def fault_factory(repo_class: type[JsonlRepository]) -> Callable[..., JsonlRepository]:
    """``repo_class`` as a factory of the fault runs (``factory(clock, *, fs, root)``)."""

    def factory(clock: Any, *, fs: Any, root: str) -> JsonlRepository:
        return repo_class(root, fs, clock, cwd="/crash")

    return factory


def fault_sweep(
    workload: Workload,
    repo_class: type[JsonlRepository] = JsonlRepository,
    *,
    deadline: float | None = None,
    start: int = 0,
    limit: int | None = None,
    at_least: int = 0,
    seed: int = 0,
    tr: Trace | None = None,
    findings: Findings | None = None,
) -> tuple[int, list[CrashFailure]]:
    """Fail each mutating call of the workload once, with each fault its kind can have, in
    coverage order from the ``start``-th run (at most ``limit``), and run the workload on
    (CRASH-10..12, CRASH-FS-9..11: the fault runs of
    :func:`~scopecheck.crashsim.generic_faults.fault_runs` with :func:`fault_extra`) until
    ``deadline`` (at least ``at_least`` runs) or ``findings`` are full; returns (runs,
    failures)."""
    from scopecheck.crashsim.generic_faults import fault_runs

    tr = trace(workload, repo_class) if tr is None else tr
    report = fault_runs(
        fault_factory(repo_class), tr, max_failures=len(tr.ops) * 8, deadline=deadline,
        findings=findings, seed=seed, at_least=at_least, start=start, limit=limit,
        extra=fault_extra(), source="jsonl",
    )  # fmt: skip
    return report.runs, report.failures


@attrs.frozen
class JsonlSource:
    """The rounds of :func:`explore_with_faults`: a generated workload per seed, traced on a
    pyfakefs sandbox."""

    repo_class: type[JsonlRepository] = JsonlRepository
    mode: Mode = "unsynced"

    @contextlib.contextmanager
    def round(self, seed: int, findings: Findings) -> Iterator[JsonlRound | None]:
        from scopecheck.crashsim.jsonl_workloads import generated

        workload = generated(seed, 6, reopen_every=4)
        yield JsonlRound(trace(workload, self.repo_class), self.mode, self.repo_class, seed)


def explore_with_faults(
    *,
    budget: float = 10.0,
    seed: int = 0,
    repo_class: type[JsonlRepository] = JsonlRepository,
    mode: Mode = "unsynced",
    max_failures: int = MAX_FAILURES,
    overrun: float = OVERRUN,
    shard: Shard | None = None,
) -> Exploration:
    """Crash exploration of fresh generated workloads for about ``budget`` seconds (the JSONL
    half of ``scopecheck fuzz``), through the exploration loop: crash states in coverage
    order (the first pass at most ``overrun`` seconds past the budget, CRASH-COV-2), single
    I/O faults (CRASH-10..12) with their share, distinct failures kept; ``shard``: its share
    of a fixed exploration (FLEET-4)."""
    return explore_rounds(
        JsonlSource(repo_class, mode), budget=budget, seed=seed, max_failures=max_failures,
        plan=Plan(overrun=overrun, profiles=PROFILES, shard=shard),
    )  # fmt: skip


# -- replay ----------------------------------------------------------------------------------


def replay_record(
    record: dict[str, Any], repo_class: type[JsonlRepository] = JsonlRepository
) -> tuple[bool, str]:
    """Replay a crash reproducer of source ``jsonl``: (still failing, text).  A crash image is
    rebuilt by its name from a new trace of the workload (the recorded operations, when the
    backend makes them again: our backend is deterministic); a fault run reruns the workload
    with that call failing."""
    from scopecheck.crashsim.jsonl_workloads import workload_from_json

    try:
        failure = CrashFailure.from_json(record)
        workload = workload_from_json(failure.workload)
    except (BadReproducer, KeyError, TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a JSONL crash reproducer: {exc}") from None
    if failure.point is None:
        raise UsageError("invalid_payload", "a JSONL crash reproducer without its point")
    op_index, variant = failure.point, failure.variant
    head = f"replaying {failure.what}"
    tr = trace(workload, repo_class)
    if failure.run == "fault":
        from scopecheck.crashsim.generic_faults import replay_fault

        still, text = replay_fault(
            fault_factory(repo_class), tr, op_index, variant.removeprefix("fault:"), fault_extra()
        )
        return still, f"{head}\n{text}"
    mode: Mode = "prefix" if failure.target.get("mode") == "prefix" else "unsynced"
    evidence = failure.evidence
    same = evidence is not None and evidence.ops == tr.file_ops
    checker = Checker(tr, mode, repo_class)
    crash = crash_state(
        tr.file_ops, tr.initial, op_index, variant, allowed_for(tr)(op_index),
        failure.built_under,
    )  # fmt: skip
    if crash is None:
        return False, (
            f"{head}\n{workload.name}: the trace has no crash state (op {op_index}, {variant}) "
            f"any more ({len(tr.file_ops)} ops); the recorded crash point is gone"
        )
    result = checker.check(crash)
    after = checker.box.tree()
    ops = tr.file_ops
    op = ops[op_index].describe() if op_index < len(ops) else "(end of trace)"
    lines = [
        head,
        "the backend makes the recorded operations again"
        if same
        else "the backend now makes other operations than the recorded ones",
        f"{workload.name}: crash at op {op_index} ({op}), {variant}, mode {mode}",
        f"file-system profiles: fails {profiles_text(failure.profiles)} (the image is rebuilt "
        f"under {failure.built_under}; CRASH-SYS-15)",
        *render_files(
            "files on disk after the crash (before recovery)", absolute(crash.state, ROOT)
        ),
        *render_files("files on disk after recovery (and one probe commit)", after),
    ]
    return replay_verdict(result, lines)


def replay_verdict(found: CrashFailure | None, lines: list[str]) -> tuple[bool, str]:
    """A crash-image replay's outcome: ``lines``, then the check that passed or what broke
    (the expected and recovered states)."""
    if found is None:
        return False, "\n".join([*lines, "recovered state is allowed; every check passes"])
    return True, "\n".join([
        *lines,
        f"FAILED {found.rule}: {found.problem}",
        f"expected one of: {orjson.dumps(found.shown.get('expected')).decode()}",
        f"recovered: {orjson.dumps(found.shown.get('recovered')).decode()}",
    ])  # fmt: skip


def trace_failure(
    source: str, tr: TracedOps, mode: str, seed: int, k: int, variant: str, rule: str,
    problem: str, *, recovery: tuple[int, str] | None = None,
    shown: dict[str, Any] | None = None, recovery_ops: Sequence[FileOp] = (),
) -> CrashFailure:  # fmt: skip
    """A failure of the crash image ``(k, variant)`` of a trace on the pyfakefs sandbox (and,
    with ``recovery_ops``, of a crash during its recovery), rerun in ``mode``."""
    return CrashFailure.of_image(
        source, rule, problem, seed=seed, workload=tr.workload.to_json(), point=k,
        variant=variant,
        evidence=Evidence(tr.file_ops, tr.initial, tr.acked_at, tuple(recovery_ops)),
        recovery=recovery, target={"mode": mode}, shown=shown,
    )  # fmt: skip
