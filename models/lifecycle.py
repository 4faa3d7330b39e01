"""A compact, pure model of how an agent lane's operations touch storage (000 §5, §2.2; 002 §3, §5).

It plays the *harness*: every step returns the transaction(s) the harness would commit, built
from our own write constructors, and updates the model's idea of what is authoritative.  Nothing
here talks to storage except :meth:`Lifecycle.recover`, which reads through a minimal reader
protocol so the machine can record which addresses recovery touched.

The shape follows the seeds:

* **start** is session-scoped acceptance: lane state + op state + op meta in one transaction;
* **progress** (assistant frames, tool checkpoints, tool memos) lives in ``ephemeral_scope(op)``:
  one ``append_list`` per frame, a whole-snapshot ``set_value`` per checkpoint (optionally with
  a memo in the same single-scope transaction, 002 §3), memos as ephemeral values (000 §5.1);
* **settle / supersede / outcome-ready** commits are session-scoped only and delete nothing
  ephemeral: the superseded progress stays as *unreachable residue* (000 §5.2, §5.3);
* **cancellation** and **unknown-outcome recovery** are session-scoped decisions that never
  retire; only **terminal** cleanup does: session deletes of op state/meta/tool args/preparation/
  pending entry plus exactly one ``retire_scope(ephemeral_scope(op))`` as its last write (000 §5.2);
* **close** and **fault** emit nothing and never retire (000 §5.3);
* **fencing** (000 §2.2): a progress job captured before terminal carries the op and the
  response/invocation it belongs to; :meth:`Lifecycle.admit` refuses it unless that target is
  still current.  Storage itself would accept the write and begin a new lifetime of the scope.

``scoped=False`` produces the same workload as before Step 1: the same addresses but in the
session scope, with explicit deletes at settle, supersede, outcome and terminal (the pre-scope
cleanup of 002 §5), and no retirement — the baseline of ``scopecheck bench size``.

Rules: OP-1..OP-18 (spec/rules/ops.toml).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol

import attrs

from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.records import ListElement, ValueRecord
from scopecheck.models.scope import SESSION, EphemeralScope, Scope, ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    AppendList,
    DeleteList,
    DeleteValue,
    SetValue,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

# -- namespaces (REFERENCE §5) ---------------------------------------------------------------

BRANCH_TIP = "pi.branch.tip"
LANE_STATE = "pi.lane.state"
RESULT = "pi.result"
OP_META = "pi.op.meta"
OP_STATE = "pi.op.state"
OP_TOOL_ARGS = "pi.op.tool_args"
OP_TOOL_MEMO = "pi.op.tool_memo"
OP_PREPARATION = "pi.op.preparation"
PENDING_ENTRY = "pi.pending.entry"
PENDING_TOOL_OUTPUT = "pi.pending.tool_output"
PENDING_ASSISTANT_FRAME = "pi.pending.assistant_frame"

#: Namespaces whose addresses live in the operation scope (000 §5.1).
EPHEMERAL_NAMESPACES = frozenset({OP_TOOL_MEMO, PENDING_TOOL_OUTPUT, PENDING_ASSISTANT_FRAME})

Outcome = Literal["completed", "failed", "aborted", "cancelled", "interrupted"]
TERMINAL_OUTCOMES: tuple[Outcome, ...] = (
    "completed",
    "failed",
    "aborted",
    "cancelled",
    "interrupted",
)


class LifecycleError(Exception):
    """A step that does not apply in the current lane state (a harness precondition)."""


def _scope(op: str, scoped: bool) -> Scope:
    return ephemeral_scope(op) if scoped else SESSION


# -- addresses (000 §5.1: three constructors move to the operation scope) --------------------


def branch_tip(branch: str) -> ValueAddress[Any, Any]:
    return value(BRANCH_TIP, branch)


def lane_state(lane: str) -> ValueAddress[Any, Any]:
    return value(LANE_STATE, lane)


def operation_result(op: str) -> ValueAddress[Any, Any]:
    return value(RESULT, op)


def operation_meta(op: str) -> ValueAddress[Any, Any]:
    return value(OP_META, op)


def operation_state(op: str) -> ValueAddress[Any, Any]:
    return value(OP_STATE, op)


def operation_tool_args(op: str, invocation: str) -> ValueAddress[Any, Any]:
    return value(OP_TOOL_ARGS, f"{op}:{invocation}")


def operation_preparation(op: str) -> ValueAddress[Any, Any]:
    return value(OP_PREPARATION, op)


def pending_entry(entry: str) -> ValueAddress[Any, Any]:
    return value(PENDING_ENTRY, entry)


def operation_tool_memo(
    op: str, invocation: str, name: str, *, scoped: bool = True
) -> ValueAddress[Any, Any]:
    return value(OP_TOOL_MEMO, f"{op}:{invocation}:{name}", _scope(op, scoped))


def pending_tool_output(op: str, invocation: str, *, scoped: bool = True) -> ValueAddress[Any, Any]:
    return value(PENDING_TOOL_OUTPUT, f"{op}:{invocation}", _scope(op, scoped))


def pending_assistant_frames(
    op: str, response: str, *, scoped: bool = True
) -> ListAddress[Any, Any]:
    return value_list(PENDING_ASSISTANT_FRAME, f"{op}:{response}", _scope(op, scoped))


Address = ValueAddress[Any, Any] | ListAddress[Any, Any]


# -- the model's state -----------------------------------------------------------------------


@attrs.define
class Tool:
    name: str
    memo_names: tuple[str, ...]
    status: Literal["running", "outcome_ready", "unknown"] = "running"


@attrs.define
class Operation:
    """What the harness holds for one operation; ``frames``/``checkpoints``/``memos`` keep every
    committed progress value, current or residue."""

    id: str
    lane: str
    kind: str
    status: Literal["active", "cancelling", "recovering"] = "active"
    response: str | None = None
    responses: int = 0
    tools: dict[str, Tool] = attrs.field(factory=dict)
    frames: dict[str, list[Any]] = attrs.field(factory=dict)
    checkpoints: dict[str, Any] = attrs.field(factory=dict)
    memos: dict[tuple[str, str], Any] = attrs.field(factory=dict)
    prepared: bool = False
    settled: list[str] = attrs.field(factory=list)
    superseded: list[str] = attrs.field(factory=list)

    def state_json(self) -> dict[str, Any]:
        """The authoritative ``pi.op.state`` value: recovery derives every scoped address
        from it and from nothing else (000 §5.3)."""
        return {
            "status": self.status,
            "response": self.response,
            "responses": self.responses,
            # Status only: the tool's name and memo names are fixed at placement and live in
            # its ``pi.op.tool_args`` value, written once, rather than being rewritten with
            # every state transition (``scopecheck bench size``: settled bytes per operation).
            "tools": {inv: t.status for inv, t in self.tools.items()},
        }


@attrs.define
class Lane:
    name: str
    current: str | None = None
    last: str | None = None
    tip: str | None = None

    def state_json(self) -> dict[str, Any]:
        return {"currentOperationId": self.current, "lastOperationId": self.last, "inbox": []}


@attrs.frozen
class Tx:
    """One transaction the harness commits: ``step`` names the step (``terminal:cancelled``)."""

    step: str
    op: str
    writes: tuple[AnyWrite, ...]

    def scope_ids(self) -> frozenset[str | None]:
        """Scope IDs of the value/list writes (``None`` = session); entries, usage and
        retirements are session-scoped (000 §2.4)."""
        found: set[str | None] = set()
        for w in self.writes:
            if isinstance(w, (SetValue, DeleteValue, AppendList, DeleteList)):
                found.add(w.address.scope_id)
            else:
                found.add(None)
        return frozenset(found)


@attrs.frozen
class ProgressJob:
    """A progress write captured by a streaming/tool job before it reaches the commit line.

    ``target`` is the response id (frames) or invocation id (checkpoints, memos) it belongs to:
    the fence admits it only while that target is still current (000 §2.2).
    """

    op: str
    kind: Literal["frame", "checkpoint", "memo", "reset"]
    target: str
    tx: Tx
    payload: Any
    name: str | None = None


class Reader(Protocol):
    """The reads recovery may use (a Storage, a ReferenceSession or a recording wrapper)."""

    def get_value(self, address: ValueAddress[Any, Any]) -> ValueRecord | None: ...

    def read_list(
        self, address: ListAddress[Any, Any], *, cursor: int | None = None, limit: int | None = None
    ) -> tuple[ListElement, ...]: ...

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]: ...


# -- the lifecycle ---------------------------------------------------------------------------


class Lifecycle:
    """Several lanes, each with at most one active operation (002 §5.1).

    Subclasses in ``scopecheck/planted/ops.py`` override one hook each to plant a harness bug.
    """

    def __init__(self, lanes: Iterable[str] = ("main",), *, scoped: bool = True) -> None:
        self.scoped = scoped
        self.lanes: dict[str, Lane] = {name: Lane(name) for name in lanes}
        self.ops: dict[str, Operation] = {}
        self.terminated: dict[str, Outcome] = {}
        self._next_op = 0

    # -- queries --------------------------------------------------------------------------

    def active(self, lane: str) -> Operation | None:
        current = self.lanes[lane].current
        return None if current is None else self.ops[current]

    def _need(self, lane: str) -> Operation:
        op = self.active(lane)
        if op is None:
            raise LifecycleError(f"lane {lane!r} has no active operation")
        return op

    def _session(self, step: str, op: str, writes: list[AnyWrite]) -> Tx:
        return Tx(step, op, tuple(writes))

    def current_addresses(self) -> frozenset[tuple[str | None, str, str]]:
        """Physical identities of the scoped addresses derived from authoritative state: the
        current response's frames and each *running* tool's checkpoint and memos.  Everything
        else in an operation scope is residue (000 §5.3)."""
        found: set[tuple[str | None, str, str]] = set()
        for lane in self.lanes.values():
            if lane.current is None:
                continue
            op = self.ops[lane.current]
            for addr in self._current_of(op):
                found.add((addr.scope_id, addr.namespace, addr.key))
        return frozenset(found)

    def _current_of(self, op: Operation) -> list[Address]:
        out: list[Address] = []
        if op.response is not None:
            out.append(pending_assistant_frames(op.id, op.response, scoped=self.scoped))
        for inv, tool in op.tools.items():
            if tool.status == "running":
                out.append(pending_tool_output(op.id, inv, scoped=self.scoped))
                out.extend(
                    operation_tool_memo(op.id, inv, n, scoped=self.scoped) for n in tool.memo_names
                )
        return out

    def expected_recovery(self) -> dict[str, Any]:
        """What a reopen must recover for every active operation (000 §9.5)."""
        result: dict[str, Any] = {}
        for lane in self.lanes.values():
            if lane.current is None:
                continue
            op = self.ops[lane.current]
            result[op.id] = {
                "lane": lane.name,
                "response": op.response,
                "frames": list(op.frames.get(op.response, [])) if op.response else [],
                "tools": {
                    inv: {
                        "checkpoint": op.checkpoints.get(inv),
                        "memos": {n: op.memos.get((inv, n)) for n in t.memo_names},
                    }
                    for inv, t in op.tools.items()
                    if t.status == "running"
                },
            }
        return result

    # -- recovery (harness side; reads storage) --------------------------------------------

    def recover(self, reader: Reader) -> dict[str, Any]:
        """Rebuild active progress from storage alone: lane state → op state → derived
        addresses.  Never scans an operation scope and never reads residue (000 §5.3)."""
        result: dict[str, Any] = {}
        for name in self.lanes:
            record = reader.get_value(lane_state(name))
            if record is None or record.value.get("currentOperationId") is None:
                continue
            op_id: str = record.value["currentOperationId"]
            state_record = reader.get_value(operation_state(op_id))
            state = {} if state_record is None else state_record.value
            response = state.get("response")
            frames: list[Any] = []
            if response is not None:
                address = pending_assistant_frames(op_id, response, scoped=self.scoped)
                cursor: int | None = None
                while True:
                    page = reader.read_list(address, cursor=cursor, limit=1000)
                    frames.extend(e.value for e in page)
                    if len(page) < 1000:
                        break
                    cursor = page[-1].seq
            tools: dict[str, Any] = {}
            for inv, status in state.get("tools", {}).items():
                if status != "running":
                    continue
                args = reader.get_value(operation_tool_args(op_id, inv))
                memo_names = [] if args is None else args.value.get("memos", [])
                checkpoint = reader.get_value(pending_tool_output(op_id, inv, scoped=self.scoped))
                memos = {}
                for memo_name in memo_names:
                    memo = reader.get_value(
                        operation_tool_memo(op_id, inv, memo_name, scoped=self.scoped)
                    )
                    memos[memo_name] = None if memo is None else memo.value
                tools[inv] = {
                    "checkpoint": None if checkpoint is None else checkpoint.value,
                    "memos": memos,
                }
            result[op_id] = {"lane": name, "response": response, "frames": frames, "tools": tools}
        return result

    # -- session-scoped steps ---------------------------------------------------------------

    def start(self, lane: str, kind: str = "prompt") -> Tx:
        """Session-scoped acceptance: lane state + op state + op meta in one transaction."""
        the_lane = self.lanes[lane]
        if the_lane.current is not None:
            raise LifecycleError(f"lane {lane!r} already runs {the_lane.current!r} (002 §5.1)")
        self._next_op += 1
        op = Operation(f"{lane}.op{self._next_op}", lane, kind)
        self.ops[op.id] = op
        the_lane.current = op.id
        return self._session(
            "start",
            op.id,
            [
                set_value(lane_state(lane), the_lane.state_json()),
                set_value(operation_state(op.id), op.state_json()),
                set_value(operation_meta(op.id), {"lane": lane, "kind": kind}),
            ],
        )

    def prepare(self, lane: str) -> Tx:
        op = self._need(lane)
        op.prepared = True
        return self._session(
            "prepare",
            op.id,
            [
                set_value(operation_preparation(op.id), {"context": "prepared"}),
                set_value(operation_state(op.id), op.state_json()),
            ],
        )

    def begin_response(self, lane: str) -> Tx:
        op = self._need(lane)
        if op.response is not None:
            raise LifecycleError("a response is already streaming")
        op.responses += 1
        op.response = f"{op.id}.r{op.responses}"
        op.frames[op.response] = []
        return self._session(
            "begin_response",
            op.id,
            [
                set_value(pending_entry(op.response), {"operationId": op.id, "kind": "assistant"}),
                set_value(operation_state(op.id), op.state_json()),
            ],
        )

    def settle_writes(self, op: Operation, response: str) -> list[AnyWrite]:
        """Extra writes of the settle commit: none when scoped (000 §5.2); the pre-Step-1
        frame delete when unscoped.  A mutant adds the mixed-scope delete back."""
        if self.scoped:
            return []
        return [delete_list(pending_assistant_frames(op.id, response, scoped=False))]

    def settle_response(self, lane: str, usage: dict[str, Any] | None = None) -> Tx:
        """The response becomes an entry; its frames stay as unreachable residue (000 §5.3)."""
        op = self._need(lane)
        response = op.response
        if response is None:
            raise LifecycleError("no response to settle")
        the_lane = self.lanes[lane]
        text = "".join(str(f.get("delta", "")) for f in op.frames.get(response, []))
        parent = the_lane.tip
        the_lane.tip = response
        op.response = None
        op.settled.append(response)
        return self._session(
            "settle",
            op.id,
            [
                insert_entry(
                    response,
                    parent,
                    "message",
                    {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}},
                ),
                insert_usage(
                    f"{response}.usage",
                    usage or usage_value(input=100, output=len(op.frames.get(response, []))),
                    response,
                ),
                set_value(branch_tip(lane), response),
                delete_value(pending_entry(response)),
                *self.settle_writes(op, response),
                set_value(operation_state(op.id), op.state_json()),
            ],
        )

    def supersede_response(self, lane: str) -> Tx:
        """Deferred-response supersession: the response is dropped, its frames become residue."""
        op = self._need(lane)
        response = op.response
        if response is None:
            raise LifecycleError("no response to supersede")
        op.response = None
        op.superseded.append(response)
        return self._session(
            "supersede",
            op.id,
            [
                delete_value(pending_entry(response)),
                *self.settle_writes(op, response),
                set_value(operation_state(op.id), op.state_json()),
            ],
        )

    def start_tool(self, lane: str, name: str = "bash", memos: tuple[str, ...] = ("cursor",)) -> Tx:
        return self.start_tools(lane, [(name, memos)])

    def start_tools(self, lane: str, calls: Iterable[tuple[str, tuple[str, ...]]]) -> Tx:
        """Place a batch of tool calls (those of one assistant message) in one session
        transaction: each call's arguments, then the op state once — as the harness stages an
        assistant message's tool calls as one batch (upstream ``state.batch.calls``)."""
        op = self._need(lane)
        writes: list[AnyWrite] = []
        for name, memos in calls:
            invocation = f"t{len(op.tools) + 1}"
            op.tools[invocation] = Tool(name, tuple(memos))
            writes.append(
                set_value(
                    operation_tool_args(op.id, invocation),
                    {"tool": name, "args": {}, "memos": list(memos)},
                )
            )
        if not writes:
            raise LifecycleError("a tool batch needs at least one call")
        writes.append(set_value(operation_state(op.id), op.state_json()))
        return self._session("start_tool", op.id, writes)

    def running_tools(self, lane: str) -> list[str]:
        op = self.active(lane)
        if op is None:
            return []
        return [inv for inv, t in op.tools.items() if t.status == "running"]

    def outcome_writes(self, op: Operation, invocation: str) -> list[AnyWrite]:
        """Extra writes of tool outcome staging: none when scoped (000 §5.2)."""
        if self.scoped:
            return []
        tool = op.tools[invocation]
        return [
            delete_value(pending_tool_output(op.id, invocation, scoped=False)),
            *(
                delete_value(operation_tool_memo(op.id, invocation, n, scoped=False))
                for n in tool.memo_names
            ),
        ]

    def tool_outcome(self, lane: str, invocation: str, result: str = "ok") -> Tx:
        """The tool reaches ``outcome_ready``: a tool-result entry and op state, session-only;
        its checkpoint and memos stay as residue (000 §5.2, §5.3)."""
        op = self._need(lane)
        tool = op.tools.get(invocation)
        if tool is None or tool.status != "running":
            raise LifecycleError(f"tool {invocation!r} is not running")
        tool.status = "outcome_ready"
        the_lane = self.lanes[lane]
        entry = f"{op.id}.{invocation}.result"
        parent = the_lane.tip
        the_lane.tip = entry
        return self._session(
            "tool_outcome",
            op.id,
            [
                insert_entry(
                    entry,
                    parent,
                    "message",
                    {
                        "message": {
                            "role": "toolResult",
                            "toolCallId": invocation,
                            "toolName": tool.name,
                            "content": [{"type": "text", "text": result}],
                        }
                    },
                ),
                set_value(branch_tip(lane), entry),
                *self.outcome_writes(op, invocation),
                set_value(operation_state(op.id), op.state_json()),
            ],
        )

    def cancel(self, lane: str) -> Tx:
        """A cancellation decision: session state only, never a retirement (000 §9.5)."""
        op = self._need(lane)
        op.status = "cancelling"
        return self._session("cancel", op.id, [set_value(operation_state(op.id), op.state_json())])

    def recover_unknown(self, lane: str) -> Tx:
        """Unknown-outcome recovery after a fault: running tools become ``unknown``; their
        progress becomes residue; no retirement until terminal (000 §9.5)."""
        op = self._need(lane)
        running = [inv for inv, t in op.tools.items() if t.status == "running"]
        if not running:
            raise LifecycleError("no running tool has an unknown outcome")
        for inv in running:
            op.tools[inv].status = "unknown"
        if op.status == "active":  # a cancellation already decided stays the outcome
            op.status = "recovering"
        return self._session(
            "recover_unknown", op.id, [set_value(operation_state(op.id), op.state_json())]
        )

    def terminal_outcome(self, op: Operation, requested: Outcome) -> Outcome:
        if op.status == "cancelling":
            return "cancelled"
        if op.status == "recovering":
            return "interrupted"
        return requested

    def retirement(self, op: Operation, outcome: Outcome) -> list[AnyWrite]:
        """The universal terminal suffix: exactly one retirement of the operation scope
        (000 §5.2).  Unscoped: the pre-Step-1 per-address deletes of every progress address."""
        if self.scoped:
            return [retire_scope(ephemeral_scope(op.id))]
        writes: list[AnyWrite] = []
        for response in op.frames:
            writes.append(delete_list(pending_assistant_frames(op.id, response, scoped=False)))
        for inv, tool in op.tools.items():
            writes.append(delete_value(pending_tool_output(op.id, inv, scoped=False)))
            writes.extend(
                delete_value(operation_tool_memo(op.id, inv, n, scoped=False))
                for n in tool.memo_names
            )
        return writes

    def terminal(self, lane: str, outcome: Outcome = "completed") -> Tx:
        """Terminal cleanup: result + idle lane state + session deletes of op state/meta/tool
        args/preparation/pending entry, then the retirement suffix (000 §5.2)."""
        op = self._need(lane)
        final = self.terminal_outcome(op, outcome)
        the_lane = self.lanes[lane]
        the_lane.current = None
        the_lane.last = op.id
        writes: list[AnyWrite] = [
            set_value(operation_result(op.id), {"outcome": final}),
            set_value(lane_state(lane), the_lane.state_json()),
            delete_value(operation_state(op.id)),
            delete_value(operation_meta(op.id)),
            *(delete_value(operation_tool_args(op.id, inv)) for inv in op.tools),
        ]
        # Deletes only what the operation wrote, as upstream's cleanup deletes what its prefix
        # scans find: an unprepared operation has no preparation to delete.
        if op.prepared:
            writes.append(delete_value(operation_preparation(op.id)))
        if op.response is not None:
            writes.append(delete_value(pending_entry(op.response)))
        writes.extend(self.retirement(op, final))
        self.terminated[op.id] = final
        return self._session(f"terminal:{final}", op.id, writes)

    # -- progress (ephemeral) -------------------------------------------------------------

    def frame_job(self, lane: str, delta: str) -> ProgressJob:
        """Capture one assistant frame for the current response (not yet committed)."""
        op = self._need(lane)
        if op.response is None:
            raise LifecycleError("no response is streaming")
        index = len(op.frames[op.response])
        frame = {"type": "text_delta", "index": index, "delta": delta}
        address = pending_assistant_frames(op.id, op.response, scoped=self.scoped)
        return ProgressJob(
            op.id, "frame", op.response, Tx("frame", op.id, (append_list(address, frame),)), frame
        )

    def checkpoint_job(
        self, lane: str, invocation: str, snapshot: Any, memo: tuple[str, Any] | None = None
    ) -> ProgressJob:
        """Capture a whole-snapshot checkpoint (with an optional memo in the same single-scope
        transaction, 002 §3)."""
        op = self._need(lane)
        if invocation not in op.tools:
            raise LifecycleError(f"no tool {invocation!r}")
        writes: list[AnyWrite] = [
            set_value(pending_tool_output(op.id, invocation, scoped=self.scoped), snapshot)
        ]
        if memo is not None:
            writes.append(
                set_value(
                    operation_tool_memo(op.id, invocation, memo[0], scoped=self.scoped), memo[1]
                )
            )
        return ProgressJob(
            op.id,
            "checkpoint",
            invocation,
            Tx("checkpoint", op.id, tuple(writes)),
            (snapshot, memo),
        )

    def reset_job(self, lane: str, invocation: str) -> ProgressJob:
        """Safe replay's checkpoint reset: an ephemeral-only delete, legal because its
        transaction holds no session write (000 §5.2); fenced like any progress."""
        op = self._need(lane)
        if invocation not in op.tools:
            raise LifecycleError(f"no tool {invocation!r}")
        address = pending_tool_output(op.id, invocation, scoped=self.scoped)
        return ProgressJob(
            op.id, "reset", invocation, Tx("reset", op.id, (delete_value(address),)), None
        )

    def memo_job(self, lane: str, invocation: str, name: str, memo: Any) -> ProgressJob:
        op = self._need(lane)
        if invocation not in op.tools:
            raise LifecycleError(f"no tool {invocation!r}")
        address = operation_tool_memo(op.id, invocation, name, scoped=self.scoped)
        return ProgressJob(
            op.id, "memo", invocation, Tx("memo", op.id, (set_value(address, memo),)), memo, name
        )

    def admit(self, job: ProgressJob) -> bool:
        """The harness-side fence (000 §2.2): a job commits only while its operation is the
        lane's current one and its response is still streaming / its tool still running."""
        op = self.ops.get(job.op)
        if op is None or job.op in self.terminated or self.lanes[op.lane].current != op.id:
            return False
        if job.kind == "frame":
            return op.response == job.target
        tool = op.tools.get(job.target)
        return tool is not None and tool.status == "running"

    def deliver(self, job: ProgressJob) -> Tx | None:
        """Fence, then record the job's effect; returns the transaction to commit, or ``None``
        when the fence dropped it."""
        if not self.admit(job):
            return None
        op = self.ops[job.op]
        if job.kind == "frame":
            op.frames.setdefault(job.target, []).append(job.payload)
        elif job.kind == "checkpoint":
            snapshot, memo = job.payload
            op.checkpoints[job.target] = snapshot
            if memo is not None:
                op.memos[(job.target, memo[0])] = memo[1]
        elif job.kind == "reset":
            op.checkpoints.pop(job.target, None)
        else:
            assert job.name is not None
            op.memos[(job.target, job.name)] = job.payload
        return job.tx


def scope_of(op: str) -> EphemeralScope:
    """The operation scope of ``op`` (000 §2.1: harness scopes use the operation id)."""
    return ephemeral_scope(op)
