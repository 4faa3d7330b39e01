"""What the lifecycle workload leaves in storage reads as a pi transcript (000 §5, 002 §5).

The lifecycle machine compares model and backend on the *same* harness transactions, so it
cannot notice a harness that writes the wrong thing consistently (a mutation run showed that:
docs/mutation.md).  These tests read one lane's operation back from storage and check
what a reader of the session relies on: the settled response is an assistant message with the
streamed text, chained to the previous tip; its usage row points at it; a tool outcome is a
``toolResult`` message naming its call and tool, chained after the response; the branch tip
follows; lane state, op meta, op state, tool args and the final result say what happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.lifecycle import LifecycleMachine, make_lifecycle_machine
from scopecheck.models.lifecycle import (
    branch_tip,
    lane_state,
    operation_meta,
    operation_preparation,
    operation_result,
    operation_state,
    operation_tool_args,
    operation_tool_memo,
    pending_entry,
    pending_tool_output,
)

A = "a"
L = 0  # lane index of "a" among the lanes a step applies to

_Memory = make_lifecycle_machine(BUNDLED["memory"])


@pytest.fixture
def run() -> Iterator[LifecycleMachine]:
    machine = _Memory()
    try:
        yield machine
    finally:
        machine.teardown()


def _value(run: LifecycleMachine, address: Any) -> Any:
    record = run.store.get_value(address)
    return None if record is None else record.value


def _op(run: LifecycleMachine) -> str:
    op = run.life.active(A)
    assert op is not None
    return op.id


def test_a_settled_response_is_an_assistant_message_with_the_streamed_text(
    run: LifecycleMachine,
) -> None:
    run.start(L)
    op = _op(run)
    assert _value(run, lane_state(A))["currentOperationId"] == op
    assert _value(run, operation_meta(op)) == {"lane": A, "kind": "prompt"}
    assert _value(run, operation_state(op))["status"] == "active"
    run.begin_response(L)
    response = run.life.ops[op].response
    assert response is not None
    assert _value(run, pending_entry(response)) == {"operationId": op, "kind": "assistant"}
    assert _value(run, operation_state(op))["response"] == response
    run.frames(L, ["He", "llo", " wörld"])
    run.settle(L, False)

    entry = run.store.get_entry(response)
    assert entry is not None
    assert (entry.parent_id, entry.type) == (None, "message")
    assert entry.payload["message"] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello wörld"}],
    }
    usage = run.store.get_usage(f"{response}.usage")
    assert usage is not None and usage.entry_id == response
    # One output token per streamed frame, so `scopecheck bench size` counts are predictable.
    assert usage.usage["output"] == 3 and usage.usage["input"] > 0
    assert _value(run, branch_tip(A)) == response
    assert run.store.get_value(pending_entry(response)) is None
    assert _value(run, operation_state(op))["response"] is None

    # The next response chains after the first one.
    run.begin_response(L)
    second = run.life.ops[op].response
    run.frames(L, ["x"])
    run.settle(L, False)
    assert second is not None and second != response
    later = run.store.get_entry(second)
    assert later is not None and later.parent_id == response
    assert later.payload["message"]["content"][0]["text"] == "x"
    assert _value(run, branch_tip(A)) == second


def test_a_superseded_response_leaves_no_entry_and_no_pending_marker(
    run: LifecycleMachine,
) -> None:
    run.start(L)
    op = _op(run)
    run.begin_response(L)
    response = run.life.ops[op].response
    assert response is not None
    run.frames(L, ["He"])
    run.settle(L, True)
    assert run.store.get_entry(response) is None
    assert run.store.get_value(pending_entry(response)) is None
    assert run.store.get_value(branch_tip(A)) is None
    assert _value(run, operation_state(op))["response"] is None


def test_a_tool_outcome_is_a_tool_result_message_after_the_response(
    run: LifecycleMachine,
) -> None:
    run.start(L)
    op = _op(run)
    run.prepare(L)
    assert _value(run, operation_preparation(op)) == {"context": "prepared"}
    run.begin_response(L)
    response = run.life.ops[op].response
    run.frames(L, ["call"])
    run.settle(L, False)
    run.start_tool(L, "read", ("cursor",))
    args = {"tool": "read", "args": {}, "memos": ["cursor"]}
    assert _value(run, operation_tool_args(op, "t1")) == args
    assert _value(run, operation_state(op))["tools"] == {"t1": "running"}
    run.checkpoint(L, 0, True)
    assert run.store.get_value(pending_tool_output(op, "t1")) is not None
    assert run.store.get_value(operation_tool_memo(op, "t1", "cursor")) is not None
    run.tool_outcome(L, 0)

    result_id = f"{op}.t1.result"
    entry = run.store.get_entry(result_id)
    assert entry is not None
    assert (entry.parent_id, entry.type) == (response, "message")
    assert entry.payload["message"] == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "read",
        "content": [{"type": "text", "text": "ok"}],
    }
    assert _value(run, branch_tip(A)) == result_id
    assert _value(run, operation_state(op))["tools"] == {"t1": "outcome_ready"}
    assert run.life.running_tools(A) == []

    run.terminal(L, "completed")
    assert _value(run, operation_result(op)) == {"outcome": "completed"}
    lane = _value(run, lane_state(A))
    assert (lane["currentOperationId"], lane["lastOperationId"]) == (None, op)
    for address in (
        operation_state(op),
        operation_meta(op),
        operation_tool_args(op, "t1"),
        operation_preparation(op),
    ):
        assert run.store.get_value(address) is None, address
    # The transcript outlives the operation.
    assert run.store.get_entry(result_id) is not None


def test_a_cancelled_operation_ends_cancelled_and_an_unknown_tool_interrupted(
    run: LifecycleMachine,
) -> None:
    run.start(L)
    op = _op(run)
    run.cancel(L)
    assert _value(run, operation_state(op))["status"] == "cancelling"
    run.terminal(L, "completed")
    assert _value(run, operation_result(op)) == {"outcome": "cancelled"}

    run.start(L)
    second = _op(run)
    run.start_tool(L, "bash", ())
    run.recover_unknown(L)
    state = _value(run, operation_state(second))
    assert state["status"] == "recovering" and state["tools"] == {"t1": "unknown"}
    run.terminal(L, "completed")
    assert _value(run, operation_result(second)) == {"outcome": "interrupted"}


def test_harness_addresses_are_the_reference_namespaces() -> None:
    """REFERENCE §5 spells every harness address; the lifecycle must use exactly those (forks
    and recovery find lanes, tips and results by these names).  Spelled out here, not taken from
    the module's constants, so a renamed namespace fails."""
    from scopecheck.models.addresses import value, value_list
    from scopecheck.models.lifecycle import pending_assistant_frames
    from scopecheck.models.scope import ephemeral_scope

    op = ephemeral_scope("a.op1")
    assert branch_tip("main") == value("pi.branch.tip", "main")
    assert lane_state("main") == value("pi.lane.state", "main")
    assert operation_result("a.op1") == value("pi.result", "a.op1")
    assert operation_meta("a.op1") == value("pi.op.meta", "a.op1")
    assert operation_state("a.op1") == value("pi.op.state", "a.op1")
    assert operation_tool_args("a.op1", "t1") == value("pi.op.tool_args", "a.op1:t1")
    assert operation_preparation("a.op1") == value("pi.op.preparation", "a.op1")
    assert pending_entry("a.op1.r1") == value("pi.pending.entry", "a.op1.r1")
    assert operation_tool_memo("a.op1", "t1", "cursor") == value(
        "pi.op.tool_memo", "a.op1:t1:cursor", op
    )
    assert pending_tool_output("a.op1", "t1") == value("pi.pending.tool_output", "a.op1:t1", op)
    assert pending_assistant_frames("a.op1", "a.op1.r1") == value_list(
        "pi.pending.assistant_frame", "a.op1:a.op1.r1", op
    )
    # The unscoped baseline (scopecheck bench size) keeps the same names in the session scope.
    assert pending_tool_output("a.op1", "t1", scoped=False) == value(
        "pi.pending.tool_output", "a.op1:t1"
    )
    assert operation_tool_memo("a.op1", "t1", "m", scoped=False) == value(
        "pi.op.tool_memo", "a.op1:t1:m"
    )
    assert pending_assistant_frames("a.op1", "r", scoped=False) == value_list(
        "pi.pending.assistant_frame", "a.op1:r"
    )


def test_the_unscoped_baseline_deletes_every_progress_address_itself(
    run: LifecycleMachine,
) -> None:
    """``scoped=False`` (the pre-Step-1 baseline of ``scopecheck bench size``) keeps progress
    in the session scope and must delete it explicitly: settled and superseded frames at once,
    a finished tool's output and memos at its outcome, a still-running tool's at terminal."""
    from scopecheck.machines.lifecycle import LANES
    from scopecheck.models.lifecycle import Lifecycle, pending_assistant_frames

    run.life = Lifecycle(LANES, scoped=False)
    run.start(L)
    op = _op(run)
    run.begin_response(L)
    first = run.life.ops[op].response
    assert first is not None
    run.frames(L, ["a", "b"])
    frames = pending_assistant_frames(op, first, scoped=False)
    assert frames.scope_id is None and len(run.store.read_list(frames)) == 2
    assert (None, frames.namespace, frames.key) in run.life.current_addresses()
    run.settle(L, False)
    assert run.store.read_list(frames) == ()
    run.begin_response(L)
    second = run.life.ops[op].response
    assert second is not None
    run.frames(L, ["c"])
    run.settle(L, True)
    assert run.store.read_list(pending_assistant_frames(op, second, scoped=False)) == ()
    run.start_tool(L, "bash", ("cursor",))
    run.checkpoint(L, 0, True)
    assert run.store.get_value(pending_tool_output(op, "t1", scoped=False)) is not None
    run._commit(run.life.terminal(A, "completed"))  # no retirement: the machine's rule would object
    assert run.store.get_value(pending_tool_output(op, "t1", scoped=False)) is None
    assert run.store.get_value(operation_tool_memo(op, "t1", "cursor", scoped=False)) is None
    assert run.life.current_addresses() == frozenset()
