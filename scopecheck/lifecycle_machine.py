"""The lifecycle machine: random agent-lane lifecycles driven into the model and a backend.

``make_lifecycle_machine(backend)`` returns a :class:`RuleBasedStateMachine` whose rules are the
harness steps of :mod:`models.lifecycle` (start, frames, checkpoints, memos, settle, supersede,
tool outcomes, cancellation, unknown-outcome recovery, terminal, late progress, close, fault).
Every transaction the harness emits is committed to the reference model *and* the backend; on
top of the storage machine's "same complete state after every step" it checks the operation
rules of 000 §5, §2.2 and §9.5:

* OP-1  no session-scoped transaction carries an ephemeral write, none carries two scope IDs;
* OP-3  every terminal path retires its scope exactly once, nothing else ever retires it;
* OP-4  after terminal nothing remains in the operation scope;
* OP-6  close, or a fault (restart without close), then reopen recovers the current frames,
        checkpoint and memos of every active operation;
* OP-7  a progress job queued before terminal never commits afterwards nor re-creates the scope;
* OP-8  recovery reads only addresses derived from current operation state (never residue).

``harness`` swaps in a broken :class:`~models.lifecycle.Lifecycle` (scopecheck/mutants/ops.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from models.addresses import ListAddress, ValueAddress
from models.lifecycle import (
    TERMINAL_OUTCOMES,
    Lifecycle,
    LifecycleError,
    ProgressJob,
    Tx,
)
from models.protocols import Repository, Storage
from models.records import ListElement, ValueRecord
from models.reference import ReferenceRepository, ReferenceSession
from models.scope import EphemeralScope, Scope
from models.writes import RetireScope
from scopecheck.backends import Backend, World
from scopecheck.machine import BASE_TIME, MismatchError, describe_difference, outcome, same

SID = "s1"
LANES = ("a", "b")
DELTAS = ("He", "llo", " wörld", "\u2028", "")
TOOLS = ("bash", "read")
MEMO_NAMES = ("cursor", "bytes")
PROGRESS_KINDS = ("frame", "checkpoint", "memo", "reset")

lanes = st.sampled_from(LANES)


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

    # -- session-scoped steps --------------------------------------------------------------

    @rule(lane=lanes)
    def start(self, lane: str) -> None:
        """Session-scoped acceptance (OP-2)."""
        self._step(lambda: self.life.start(lane))

    @rule(lane=lanes)
    def prepare(self, lane: str) -> None:
        self._step(lambda: self.life.prepare(lane))

    @rule(lane=lanes)
    def begin_response(self, lane: str) -> None:
        self._step(lambda: self.life.begin_response(lane))

    @rule(lane=lanes, deltas=st.lists(st.sampled_from(DELTAS), min_size=1, max_size=3))
    def frames(self, lane: str, deltas: list[str]) -> None:
        """One append per frame, each its own ephemeral transaction (OP-2)."""
        for delta in deltas:
            try:
                job = self.life.frame_job(lane, delta)
            except LifecycleError:
                return
            self._deliver(job)

    @rule(lane=lanes, supersede=st.booleans())
    def settle(self, lane: str, supersede: bool) -> None:
        """Settle or supersede: session-only, frames stay as residue (OP-5)."""
        if supersede:
            self._step(lambda: self.life.supersede_response(lane))
        else:
            self._step(lambda: self.life.settle_response(lane))

    @rule(
        lane=lanes,
        name=st.sampled_from(TOOLS),
        memos=st.sampled_from(((), MEMO_NAMES[:1], MEMO_NAMES)),
    )
    def start_tool(self, lane: str, name: str, memos: tuple[str, ...]) -> None:
        self._step(lambda: self.life.start_tool(lane, name, memos))

    def _tool(self, lane: str, index: int) -> str | None:
        running = self.life.running_tools(lane)
        return running[index % len(running)] if running else None

    @rule(lane=lanes, index=st.integers(0, 1), memo=st.booleans())
    def checkpoint(self, lane: str, index: int, memo: bool) -> None:
        """Whole-snapshot checkpoint, with a memo in the same transaction or not (OP-2)."""
        invocation = self._tool(lane, index)
        if invocation is None:
            return
        self.ticks += 1
        snapshot = {"text": f"out{self.ticks}", "bytes": self.ticks}
        job = self.life.checkpoint_job(
            lane, invocation, snapshot, ("cursor", self.ticks) if memo else None
        )
        self._deliver(job)

    @rule(lane=lanes, index=st.integers(0, 1))
    def safe_replay_reset(self, lane: str, index: int) -> None:
        """The ephemeral-only checkpoint delete of safe replay stays legal (OP-11)."""
        invocation = self._tool(lane, index)
        if invocation is not None:
            self._deliver(self.life.reset_job(lane, invocation))

    @rule(lane=lanes, index=st.integers(0, 1), name=st.sampled_from(MEMO_NAMES))
    def memo(self, lane: str, index: int, name: str) -> None:
        invocation = self._tool(lane, index)
        if invocation is None:
            return
        self.ticks += 1
        self._deliver(self.life.memo_job(lane, invocation, name, {"n": self.ticks}))

    @rule(lane=lanes, index=st.integers(0, 1))
    def tool_outcome(self, lane: str, index: int) -> None:
        """outcome_ready: session-only, checkpoint and memos stay as residue (OP-5)."""
        invocation = self._tool(lane, index)
        if invocation is not None:
            self._step(lambda: self.life.tool_outcome(lane, invocation))

    @rule(lane=lanes)
    def cancel(self, lane: str) -> None:
        """A cancellation decision never retires (OP-9)."""
        self._step(lambda: self.life.cancel(lane))

    @rule(lane=lanes)
    def recover_unknown(self, lane: str) -> None:
        """Unknown-outcome recovery never retires (OP-9)."""
        self._step(lambda: self.life.recover_unknown(lane))

    @rule(lane=lanes, outcome=st.sampled_from(TERMINAL_OUTCOMES[:3]))
    def terminal(self, lane: str, outcome: Any) -> None:
        """Terminal cleanup with exactly one retirement (OP-3, OP-4)."""
        op = self.life.active(lane)
        self._step(lambda: self.life.terminal(lane, outcome))
        if op is not None:
            self._check_terminated(op.id)

    # -- late progress (fencing) -----------------------------------------------------------

    @rule(lane=lanes, kind=st.sampled_from(PROGRESS_KINDS))
    def queue_progress(self, lane: str, kind: str) -> None:
        """A streaming/tool job captures a progress write that has not committed yet."""
        try:
            if kind == "frame":
                job = self.life.frame_job(lane, "late")
            else:
                invocation = self._tool(lane, 0)
                if invocation is None:
                    return
                self.ticks += 1
                if kind == "checkpoint":
                    job = self.life.checkpoint_job(lane, invocation, {"text": "late"}, None)
                elif kind == "reset":
                    job = self.life.reset_job(lane, invocation)
                else:
                    job = self.life.memo_job(lane, invocation, "cursor", self.ticks)
        except LifecycleError:
            return
        self.queued.append(job)

    @rule(lane=lanes, kind=st.sampled_from(PROGRESS_KINDS))
    def late_progress(self, lane: str, kind: str) -> None:
        """The 000 §2.2 race in one step: a job is queued, the operation reaches terminal
        (retiring its scope), then the job reaches the commit line (OP-7)."""
        self.queue_progress(lane, kind)
        self.terminal(lane, "completed")
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
