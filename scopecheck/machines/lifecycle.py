"""The lifecycle machine: random agent-lane lifecycles driven into the model and a backend.

``make_lifecycle_machine(backend)`` returns a :class:`RuleBasedStateMachine` whose rules are the
harness steps of :mod:`scopecheck.models.lifecycle` (start, frames, checkpoints, memos, settle,
supersede, tool outcomes, cancellation, unknown-outcome recovery, terminal, late progress, close,
fault). Every transaction the harness emits is committed to the reference model *and* the backend;
on top of the storage machine's "same complete state after every step" it checks the operation
rules of 000 §5, §2.2 and §9.5:

* OP-1  no session-scoped transaction carries an ephemeral write, none carries two scope IDs;
* OP-3  every terminal path retires its scope exactly once, nothing else ever retires it;
* OP-4  after terminal nothing remains in the operation scope;
* OP-6  close, or a fault (restart without close), then reopen recovers the current frames,
        checkpoint and memos of every active operation;
* OP-7  a progress job queued before terminal never commits afterwards nor re-creates the scope;
* OP-8  recovery reads only addresses derived from current operation state (never residue).

``harness`` swaps in a broken :class:`~scopecheck.models.lifecycle.Lifecycle`
(scopecheck/planted/ops.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scopecheck.backends.registry import Backend, World
from scopecheck.machines.failures import MismatchError
from scopecheck.machines.storage import BASE_TIME, describe_difference, outcome, same
from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.lifecycle import (
    TERMINAL_OUTCOMES,
    Lifecycle,
    LifecycleError,
    ProgressJob,
    Tx,
)
from scopecheck.models.protocols import Repository, Storage
from scopecheck.models.records import ListElement, ValueRecord
from scopecheck.models.reference import ReferenceRepository, ReferenceSession
from scopecheck.models.scope import EphemeralScope, Scope
from scopecheck.models.writes import RetireScope

SID = "s1"
LANES = ("a", "b")
DELTAS = ("He", "llo", " wörld", "\u2028", "")
TOOLS = ("bash", "read")
MEMO_NAMES = ("cursor", "bytes")
PROGRESS_KINDS = ("frame", "checkpoint", "memo", "reset")

#: A lane index, resolved among the lanes where a step applies (see ``_pick``).
indexes = st.integers(0, len(LANES) - 1)


class OpsViolation(AssertionError):
    """An operation-lifecycle rule (OP-*) was broken."""


class RecordingReader:
    """Wraps a Storage (or the model) and records every read recovery makes (OP-8)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads: list[tuple[str | None, str, str]] = []
        self.scans: list[tuple[str, str, str | None]] = []

    def get_value(self, address: ValueAddress[Any, Any]) -> ValueRecord | None:
        self.reads.append((address.scope_id, address.namespace, address.key))
        result: ValueRecord | None = self.inner.get_value(address)
        return result

    def read_list(
        self, address: ListAddress[Any, Any], *, cursor: int | None = None, limit: int | None = None
    ) -> tuple[ListElement, ...]:
        self.reads.append((address.scope_id, address.namespace, address.key))
        result: tuple[ListElement, ...] = self.inner.read_list(address, cursor=cursor, limit=limit)
        return result

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        scope_id = scope.id if isinstance(scope, EphemeralScope) else None
        self.scans.append((namespace, prefix, scope_id))
        result: tuple[tuple[str, ValueRecord], ...] = self.inner.scan_values(
            namespace, prefix, scope
        )
        return result


def check_transaction_shape(tx: Tx) -> None:
    """OP-1: one scope per transaction; a session transaction has no ephemeral write."""
    ids = tx.scope_ids()
    if len(ids) > 1:
        raise OpsViolation(
            f"step {tx.step!r} of {tx.op!r} mixes scopes {sorted(map(repr, ids))} in one "
            "transaction (000 §5.2, 002 §4)"
        )


def scoped_keys(snapshot: Any, scope_id: str) -> list[tuple[Any, ...]]:
    return [k for k, _ in snapshot.values if k[0] == scope_id] + [
        k for k, _ in snapshot.lists if k[0] == scope_id
    ]


class LifecycleMachine(RuleBasedStateMachine):
    """The lifecycle model against one backend; subclass via :func:`make_lifecycle_machine`."""

    backend: ClassVar[Backend]
    harness: ClassVar[type[Lifecycle]] = Lifecycle
    examples_run: ClassVar[int] = 0
    steps_run: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).examples_run += 1
        self.now = BASE_TIME
        self.world: World = self.backend.new_world(self.clock)
        self.repo: Repository = self.world.repository()
        self.model = ReferenceRepository()
        self.ref: ReferenceSession = self.model.create(SID)
        self.store: Storage = self.repo.create(SID)
        self.life = self.harness(LANES)
        self.retired: Counter[str] = Counter()
        self.queued: list[ProgressJob] = []
        self.ticks = 0
        self.commits = 0

    def clock(self) -> int:
        return self.now

    def teardown(self) -> None:
        self.world.cleanup()

    # -- committing ------------------------------------------------------------------------

    def _commit(self, tx: Tx) -> None:
        """Check the transaction's shape (OP-1), then commit it to model and backend; the
        harness's transactions are always valid, so both must accept it."""
        check_transaction_shape(tx)
        self.commits += 1
        self.now += 1
        writes = list(tx.writes)
        expected = outcome(lambda: self.ref.commit(writes, self.now))
        actual = outcome(lambda: self.store.commit(writes))
        same(f"commit of {tx.step!r}", expected, actual)
        if expected[0] != "ok":
            raise OpsViolation(f"storage refused the harness's {tx.step!r}: {expected[1]}")
        for write in tx.writes:
            if isinstance(write, RetireScope):
                self.retired[write.retired.id] += 1
                if not tx.step.startswith("terminal:"):
                    raise OpsViolation(f"{tx.step!r} retired {write.retired.id!r} (OP-3)")

    def _step(self, make: Callable[[], Tx]) -> None:
        try:
            tx = make()
        except LifecycleError:
            return
        self._commit(tx)

    def _deliver(self, job: ProgressJob) -> None:
        tx = self.life.deliver(job)
        if tx is not None:
            self._commit(tx)

    # -- which lanes a step applies to ------------------------------------------------------
    #
    # Rules take a lane *index* into the lanes where the step applies, and a precondition keeps
    # Hypothesis from choosing a step that applies nowhere: almost every drawn step then does
    # something, and printed programs stay deterministic (the index is resolved the same way).

    def _idle(self) -> list[str]:
        return [n for n in LANES if self.life.active(n) is None]

    def _active(self) -> list[str]:
        return [n for n in LANES if self.life.active(n) is not None]

    def _streaming(self) -> list[str]:
        return [n for n in LANES if (op := self.life.active(n)) is not None and op.response]

    def _not_streaming(self) -> list[str]:
        return [n for n in LANES if (op := self.life.active(n)) is not None and not op.response]

    def _with_tools(self) -> list[str]:
        return [n for n in LANES if self.life.running_tools(n)]

    @staticmethod
    def _pick(lanes_: list[str], index: int) -> str:
        return lanes_[index % len(lanes_)]

    # -- session-scoped steps --------------------------------------------------------------

    @precondition(lambda self: bool(self._idle()))
    @rule(lane=indexes)
    def start(self, lane: int) -> None:
        """Session-scoped acceptance (OP-2)."""
        name = self._pick(self._idle(), lane)
        self._step(lambda: self.life.start(name))

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes)
    def prepare(self, lane: int) -> None:
        name = self._pick(self._active(), lane)
        self._step(lambda: self.life.prepare(name))

    @precondition(lambda self: bool(self._not_streaming()))
    @rule(lane=indexes)
    def begin_response(self, lane: int) -> None:
        name = self._pick(self._not_streaming(), lane)
        self._step(lambda: self.life.begin_response(name))

    @precondition(lambda self: bool(self._streaming()))
    @rule(lane=indexes, deltas=st.lists(st.sampled_from(DELTAS), min_size=1, max_size=3))
    def frames(self, lane: int, deltas: list[str]) -> None:
        """One append per frame, each its own ephemeral transaction (OP-2)."""
        name = self._pick(self._streaming(), lane)
        for delta in deltas:
            self._deliver(self.life.frame_job(name, delta))

    @precondition(lambda self: bool(self._streaming()))
    @rule(lane=indexes, supersede=st.booleans())
    def settle(self, lane: int, supersede: bool) -> None:
        """Settle or supersede: session-only, frames stay as residue (OP-5)."""
        name = self._pick(self._streaming(), lane)
        if supersede:
            self._step(lambda: self.life.supersede_response(name))
        else:
            self._step(lambda: self.life.settle_response(name))

    @precondition(lambda self: bool(self._active()))
    @rule(
        lane=indexes,
        tool=st.sampled_from(TOOLS),
        memos=st.sampled_from(((), MEMO_NAMES[:1], MEMO_NAMES)),
        batch=st.booleans(),
    )
    def start_tool(self, lane: int, tool: str, memos: tuple[str, ...], batch: bool = False) -> None:
        """Place one tool call, or a response's batch of two in one transaction."""
        name = self._pick(self._active(), lane)
        calls = [(tool, memos), ("read", MEMO_NAMES[1:])] if batch else [(tool, memos)]
        self._step(lambda: self.life.start_tools(name, calls))

    def _tool(self, lane: int, index: int) -> tuple[str, str]:
        name = self._pick(self._with_tools(), lane)
        running = self.life.running_tools(name)
        return name, running[index % len(running)]

    @precondition(lambda self: bool(self._with_tools()))
    @rule(lane=indexes, index=indexes, memo=st.booleans())
    def checkpoint(self, lane: int, index: int, memo: bool) -> None:
        """Whole-snapshot checkpoint, with a memo in the same transaction or not (OP-2)."""
        name, invocation = self._tool(lane, index)
        self.ticks += 1
        snapshot = {"text": f"out{self.ticks}", "bytes": self.ticks}
        job = self.life.checkpoint_job(
            name, invocation, snapshot, ("cursor", self.ticks) if memo else None
        )
        self._deliver(job)

    @precondition(lambda self: bool(self._with_tools()))
    @rule(lane=indexes, index=indexes)
    def safe_replay_reset(self, lane: int, index: int) -> None:
        """The ephemeral-only checkpoint delete of safe replay stays legal (OP-11)."""
        name, invocation = self._tool(lane, index)
        self._deliver(self.life.reset_job(name, invocation))

    @precondition(lambda self: bool(self._with_tools()))
    @rule(lane=indexes, index=indexes, memo=st.sampled_from(MEMO_NAMES))
    def memo(self, lane: int, index: int, memo: str) -> None:
        name, invocation = self._tool(lane, index)
        self.ticks += 1
        self._deliver(self.life.memo_job(name, invocation, memo, {"n": self.ticks}))

    @precondition(lambda self: bool(self._with_tools()))
    @rule(lane=indexes, index=indexes)
    def tool_outcome(self, lane: int, index: int) -> None:
        """outcome_ready: session-only, checkpoint and memos stay as residue (OP-5)."""
        name, invocation = self._tool(lane, index)
        self._step(lambda: self.life.tool_outcome(name, invocation))

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes, count=st.integers(1, 3), memo=st.booleans())
    def tool_burst(self, lane: int, count: int, memo: bool) -> None:
        """A running tool streams: start one if none runs, then ``count`` checkpoints (so
        recovery after close/fault often has a checkpoint and memo to restore)."""
        name = self._pick(self._active(), lane)
        if not self.life.running_tools(name):
            self._step(lambda: self.life.start_tool(name, "bash", MEMO_NAMES[:1]))
        invocation = self.life.running_tools(name)[-1]
        for _ in range(count):
            self.ticks += 1
            snapshot = {"text": f"burst{self.ticks}", "bytes": self.ticks}
            job = self.life.checkpoint_job(
                name, invocation, snapshot, ("cursor", self.ticks) if memo else None
            )
            self._deliver(job)

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes, deltas=st.lists(st.sampled_from(DELTAS), min_size=1, max_size=4))
    def stream_burst(self, lane: int, deltas: list[str]) -> None:
        """The assistant streams: begin a response if none is streaming, then frames."""
        name = self._pick(self._active(), lane)
        op = self.life.active(name)
        assert op is not None
        if op.response is None:
            self._step(lambda: self.life.begin_response(name))
        for delta in deltas:
            self._deliver(self.life.frame_job(name, delta))

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes)
    def cancel(self, lane: int) -> None:
        """A cancellation decision never retires (OP-9)."""
        name = self._pick(self._active(), lane)
        self._step(lambda: self.life.cancel(name))

    @precondition(lambda self: bool(self._with_tools()))
    @rule(lane=indexes)
    def recover_unknown(self, lane: int) -> None:
        """Unknown-outcome recovery never retires (OP-9)."""
        name = self._pick(self._with_tools(), lane)
        self._step(lambda: self.life.recover_unknown(name))

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes, outcome=st.sampled_from(TERMINAL_OUTCOMES[:3]))
    def terminal(self, lane: int, outcome: Any) -> None:
        """Terminal cleanup with exactly one retirement (OP-3, OP-4)."""
        name = self._pick(self._active(), lane)
        op = self.life.active(name)
        assert op is not None
        self._step(lambda: self.life.terminal(name, outcome))
        self._check_terminated(op.id)

    # -- late progress (fencing) -----------------------------------------------------------

    def _capture(self, name: str, kind: str) -> ProgressJob | None:
        """A streaming/tool job captures a progress write that has not committed yet."""
        op = self.life.active(name)
        if op is None:
            return None
        if kind == "frame":
            return self.life.frame_job(name, "late") if op.response else None
        running = self.life.running_tools(name)
        if not running:
            return None
        self.ticks += 1
        if kind == "checkpoint":
            return self.life.checkpoint_job(name, running[0], {"text": "late"}, None)
        if kind == "reset":
            return self.life.reset_job(name, running[0])
        return self.life.memo_job(name, running[0], "cursor", self.ticks)

    @precondition(lambda self: bool(self._active()))
    @rule(lane=indexes, kind=st.sampled_from(PROGRESS_KINDS))
    def queue_progress(self, lane: int, kind: str) -> None:
        job = self._capture(self._pick(self._active(), lane), kind)
        if job is not None:
            self.queued.append(job)

    @precondition(lambda self: bool(self._streaming() or self._with_tools()))
    @rule(lane=indexes, kind=st.sampled_from(PROGRESS_KINDS))
    def late_progress(self, lane: int, kind: str) -> None:
        """The 000 §2.2 race in one step: a job is queued, the operation reaches terminal
        (retiring its scope), then the job reaches the commit line (OP-7)."""
        name = self._pick(sorted(set(self._streaming()) | set(self._with_tools())), lane)
        job = self._capture(name, kind) or self._capture(
            name, "frame" if kind != "frame" else "memo"
        )
        assert job is not None
        self.queued.append(job)
        op = self.life.active(name)
        assert op is not None
        self._step(lambda: self.life.terminal(name, "completed"))
        self._check_terminated(op.id)
        self.deliver_queued()

    @precondition(lambda self: bool(self.queued))
    @rule()
    def deliver_queued(self) -> None:
        """Queued jobs reach the commit line; after terminal (or once their response/tool is no
        longer current) the fence drops them and nothing is written (OP-7)."""
        jobs, self.queued = self.queued, []
        for job in jobs:
            before, commits = self.ref.snapshot(), self.commits
            self._deliver(job)
            if job.op in self.life.terminated:
                after = self.store.snapshot()
                if self.commits != commits or after != before or scoped_keys(after, job.op):
                    raise OpsViolation(
                        f"a {job.kind} job of {job.op!r} committed after its terminal "
                        f"retirement: {job.tx.writes!r} (000 §2.2)"
                    )

    # -- close, fault, recovery ------------------------------------------------------------

    def _recover_and_check(self, what: str) -> None:
        reader = RecordingReader(self.store)
        expected = self.life.expected_recovery()
        recovered = outcome(lambda: self.life.recover(reader))
        if recovered != ("ok", expected):
            raise OpsViolation(
                f"after {what}, recovery gave {recovered!r}; the active operations hold "
                f"{expected!r} (000 §5.3, §9.5)"
            )
        current = self.life.current_addresses()
        for key in reader.reads:
            if key[0] is not None and key not in current:
                raise OpsViolation(f"recovery after {what} read residue {key!r} (000 §5.3)")
        for namespace, prefix, scope_id in reader.scans:
            if scope_id is not None:
                raise OpsViolation(
                    f"recovery after {what} scanned scope {scope_id!r} ({namespace!r}, "
                    f"{prefix!r}) instead of deriving addresses from op state (000 §5.3)"
                )

    @rule()
    def close_and_reopen(self) -> None:
        """Close emits nothing and retires nothing; reopen recovers current progress (OP-6)."""
        self.store.close()
        self.model.close_session(SID)
        self.ref = self.model.open(SID)
        self.store = self.repo.open(SID)
        self._recover_and_check("close and reopen")

    @rule()
    def fault(self) -> None:
        """A fault: the process restarts without any harness close step (OP-6)."""
        self.model.close_session(SID)
        self.repo = self.world.restart()
        self.ref = self.model.open(SID)
        self.store = self.repo.open(SID)
        self._recover_and_check("a fault")

    @precondition(lambda self: bool(self._active()))
    @rule()
    def recover(self) -> None:
        """Recovery on a live handle reads only current addresses (OP-8)."""
        self._recover_and_check("recovery on the open handle")

    # -- invariants ------------------------------------------------------------------------

    def _check_terminated(self, op: str) -> None:
        if self.retired[op] != 1:
            raise OpsViolation(
                f"{op!r} ended ({self.life.terminated.get(op)}) with {self.retired[op]} "
                "retirements; every terminal path retires exactly once (000 §5.2)"
            )
        left = scoped_keys(self.store.snapshot(), op)
        if left:
            raise OpsViolation(f"scope {op!r} still holds {left!r} after terminal (000 §5.3)")

    @invariant()
    def lifecycle_rules(self) -> None:
        """Model and backend agree; retirement counts and empty retired scopes (OP-3, OP-4)."""
        type(self).steps_run += 1
        expected = self.ref.snapshot()
        actual = self.store.snapshot()
        if expected != actual:
            raise MismatchError(describe_difference(SID, expected, actual))
        for op in self.life.ops:
            if op in self.life.terminated:
                self._check_terminated(op)
            elif self.retired[op]:
                raise OpsViolation(f"active operation {op!r} was retired before terminal")


def make_lifecycle_machine(
    backend: Backend, harness: type[Lifecycle] = Lifecycle
) -> type[LifecycleMachine]:
    """A lifecycle machine class bound to ``backend`` (and optionally a broken harness)."""
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).split()
    name = "".join(word[:1].upper() + word[1:] for word in words)
    suffix = "" if harness is Lifecycle else harness.__name__
    return type(
        f"{name}{suffix}LifecycleMachine",
        (LifecycleMachine,),
        {"backend": backend, "harness": harness},
    )
