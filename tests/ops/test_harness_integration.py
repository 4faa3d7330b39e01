"""Focused tests named after the 000 §9.5 "Harness integration" bullets that a storage testbed
can check, on every bundled backend (the ``run`` fixture).  Bullets about harness source files
that do not exist here are rules with a ``gap`` in spec/rules/ops.toml (OP-14, OP-15).
"""

from __future__ import annotations

from typing import Any

import pytest

from scopecheck.machines.lifecycle import LifecycleMachine, check_transaction_shape, scoped_keys
from scopecheck.models.lifecycle import (
    EPHEMERAL_NAMESPACES,
    TERMINAL_OUTCOMES,
    operation_tool_memo,
    pending_assistant_frames,
    pending_tool_output,
)
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    RetireScope,
    SetValue,
    set_value,
)

A = "a"
#: Machine rules take a lane index among the lanes where the step applies: 0 is lane "a" here.
L = 0


def _progress(run: LifecycleMachine) -> str:
    """Start an op on lane a with a streaming response, a running tool with a checkpoint and
    a memo; returns the op id."""
    run.start(L)
    run.begin_response(L)
    run.frames(L, ["He", "llo"])
    run.start_tool(L, "bash", ("cursor",))
    run.checkpoint(L, 0, True)
    run.memo(L, 0, "cursor")
    op = run.life.active(A)
    assert op is not None
    return op.id


def _ephemeral_writes(writes: tuple[Any, ...]) -> list[Any]:
    return [
        w
        for w in writes
        if isinstance(w, (SetValue, DeleteValue, AppendList, DeleteList))
        and w.address.scope_id is not None
    ]


@pytest.mark.rule("OP-1", "OP-5")
def test_assistant_and_deferred_settlement_drop_mixed_scope_frame_deletes(run: Any) -> None:
    """Settle and supersede are session-only; the settled/superseded frames remain readable as
    residue in the still-active operation scope until terminal."""
    op = _progress(run)
    first = run.life.ops[op].response
    tx = run.life.settle_response(A)
    assert _ephemeral_writes(tx.writes) == []
    run._commit(tx)
    run.begin_response(L)
    run.frames(L, ["x"])
    second = run.life.ops[op].response
    tx = run.life.supersede_response(A)
    assert _ephemeral_writes(tx.writes) == []
    run._commit(tx)
    for response, count in ((first, 2), (second, 1)):
        residue = run.store.read_list(pending_assistant_frames(op, response))
        assert len(residue) == count
    run.lifecycle_rules()


@pytest.mark.rule("OP-1", "OP-5")
def test_tool_outcome_staging_drops_mixed_scope_checkpoint_and_memo_deletes(run: Any) -> None:
    op = _progress(run)
    tx = run.life.tool_outcome(A, "t1")
    assert _ephemeral_writes(tx.writes) == []
    run._commit(tx)
    assert run.store.get_value(pending_tool_output(op, "t1")) is not None
    assert run.store.get_value(operation_tool_memo(op, "t1", "cursor")) is not None
    run.lifecycle_rules()


@pytest.mark.rule("OP-10", "OP-5")
def test_unreachable_residue_is_never_consumed_by_snapshot_or_recovery(run: Any) -> None:
    """After the owning child settles, recovery (live, after close, after a fault) reads only
    the addresses op state names: the residue is physically there and never read."""
    op = _progress(run)
    run.settle(L, False)
    run.tool_outcome(L, 0)
    run.begin_response(L)
    run.frames(L, ["new"])
    keys = {k[2] for k in scoped_keys(run.store.snapshot(), op)}
    assert f"{op}:{op}.r1" in keys and f"{op}:t1" in keys  # residue present
    for step in (run.recover, run.close_and_reopen, run.fault):
        step()  # each asserts recovered == current and no residue read (OP-10)
    recovered = run.life.recover(run.store)[op]
    assert recovered["frames"] == [{"type": "text_delta", "index": 0, "delta": "new"}]
    assert recovered["tools"] == {}


@pytest.mark.rule("OP-11")
def test_safe_replay_ephemeral_only_delete_remains_ordered_and_fenced(run: Any) -> None:
    op = _progress(run)
    job = run.life.reset_job(A, "t1")
    assert job.tx.scope_ids() == frozenset({op})
    before = run.store.snapshot()
    run._deliver(job)
    seqs = [r.seq for _, r in run.store.snapshot().values]
    assert run.store.get_value(pending_tool_output(op, "t1")) is None
    assert max(seqs) < run.ref.log[-1].first_seq  # the delete took the latest seq, in order
    assert before != run.store.snapshot()
    late = run.life.reset_job(A, "t1")
    run.terminal(L, "completed")
    commits = run.commits
    run._deliver(late)
    assert run.commits == commits  # fenced after terminal
    run.lifecycle_rules()


@pytest.mark.rule("OP-3")
@pytest.mark.parametrize("path", ["completed", "failed", "aborted", "cancelled", "interrupted"])
def test_every_terminal_leaf_emits_one_retirement_in_the_cleanup_position(
    run: Any, path: str
) -> None:
    """One retirement, as the last write, after the session deletes of op state, meta, tool
    args, preparation and pending entry."""
    op = _progress(run)
    run.prepare(L)
    if path == "cancelled":
        run.cancel(L)
    if path == "interrupted":
        run.recover_unknown(L)
    tx = run.life.terminal(A, path if path in TERMINAL_OUTCOMES[:3] else "completed")
    assert tx.step == f"terminal:{path}"
    retirements = [w for w in tx.writes if isinstance(w, RetireScope)]
    assert retirements == [tx.writes[-1]] and tx.writes[-1].retired == ephemeral_scope(op)
    deleted = {
        (w.address.namespace, w.address.key) for w in tx.writes if isinstance(w, DeleteValue)
    }
    assert {
        ("pi.op.state", op),
        ("pi.op.meta", op),
        ("pi.op.tool_args", f"{op}:t1"),
        ("pi.op.preparation", op),
        ("pi.pending.entry", f"{op}.r1"),
    } <= deleted
    assert _ephemeral_writes(tx.writes) == []
    run._commit(tx)
    run._check_terminated(op)
    assert scoped_keys(run.store.snapshot(), op) == []


@pytest.mark.rule("OP-6")
@pytest.mark.parametrize("how", ["close", "fault"])
def test_close_and_fault_emit_no_retirement_and_reopen_recovers_progress(
    run: Any, how: str
) -> None:
    op = _progress(run)
    commits = run.commits
    (run.close_and_reopen if how == "close" else run.fault)()  # asserts recovery (OP-6)
    assert run.commits == commits and run.retired[op] == 0
    recovered = run.life.recover(run.store)[op]
    assert [f["delta"] for f in recovered["frames"]] == ["He", "llo"]
    assert recovered["tools"]["t1"]["checkpoint"] is not None
    assert recovered["tools"]["t1"]["memos"]["cursor"] is not None
    run.frames(L, ["!"])  # progress continues in the same lifetime
    run.lifecycle_rules()


@pytest.mark.rule("OP-9")
def test_cancellation_and_unknown_outcome_recovery_retire_only_at_terminal(run: Any) -> None:
    op = _progress(run)
    run.cancel(L)
    run.fault()
    run.recover_unknown(L)
    run.close_and_reopen()
    assert run.retired[op] == 0 and scoped_keys(run.store.snapshot(), op) != []
    run.terminal(L, "completed")
    assert run.life.terminated[op] == "cancelled" and run.retired[op] == 1


@pytest.mark.rule("OP-7")
@pytest.mark.parametrize("kind", ["frame", "checkpoint", "memo", "reset"])
def test_late_queued_progress_cannot_commit_after_terminal_retirement_or_reopen_scope(
    run: Any, kind: str
) -> None:
    op = _progress(run)
    run.queue_progress(L, kind)
    assert run.queued
    run.terminal(L, "completed")
    run.fault()
    run.deliver_queued()  # asserts nothing committed (OP-7)
    assert scoped_keys(run.store.snapshot(), op) == []
    run.lifecycle_rules()


@pytest.mark.rule("OP-7")
def test_progress_for_a_settled_response_or_finished_tool_is_fenced_too(run: Any) -> None:
    _progress(run)
    run.queue_progress(L, "frame")
    run.queue_progress(L, "checkpoint")
    run.settle(L, False)
    run.tool_outcome(L, 0)
    commits = run.commits
    run.deliver_queued()
    assert run.commits == commits
    run.lifecycle_rules()


@pytest.mark.rule("OP-8")
def test_without_the_fence_a_late_write_starts_a_new_lifetime(run: Any) -> None:
    """The storage fact behind the fence: a scoped write after retirement is accepted and
    begins a new lifetime holding only that write (000 §2.2)."""
    op = _progress(run)
    run.terminal(L, "completed")
    late = set_value(pending_tool_output(op, "t1"), {"text": "late"})
    committed = run.store.commit([late])
    run.ref.commit([late], run.now)
    assert scoped_keys(run.store.snapshot(), op) == [(op, "pi.pending.tool_output", f"{op}:t1")]
    assert run.store.get_value(pending_tool_output(op, "t1")).seq == committed[0].seq
    assert run.store.get_value(operation_tool_memo(op, "t1", "cursor")) is None
    assert run.store.read_list(pending_assistant_frames(op, f"{op}.r1")) == ()


@pytest.mark.rule("OP-12")
def test_terminal_cleanup_no_longer_scans_memo_or_output_prefixes(run: Any) -> None:
    """Terminal writes come from op state alone: the harness model holds no storage handle, so
    it cannot scan; it emits no per-address ephemeral delete; and it exports exactly three
    scoped address constructors and no prefix constructors (000 §5.2)."""
    import scopecheck.models.lifecycle as lifecycle

    _progress(run)
    assert not any(
        isinstance(v, object) and hasattr(v, "scan_values") for v in vars(run.life).values()
    )
    tx = run.life.terminal(A, "completed")
    assert [w for w in tx.writes if isinstance(w, (DeleteValue, DeleteList))
            and w.address.namespace in EPHEMERAL_NAMESPACES] == []  # fmt: skip
    assert not [n for n in dir(lifecycle) if n.lower().endswith("prefix")]
    scoped = [
        lifecycle.operation_tool_memo("op", "t", "n"),
        lifecycle.pending_tool_output("op", "t"),
        lifecycle.pending_assistant_frames("op", "r"),
    ]
    assert {a.scope_id for a in scoped} == {"op"}
    assert {a.namespace for a in scoped} == EPHEMERAL_NAMESPACES
    run._commit(tx)


@pytest.mark.rule("OP-1", "OP-16")
@pytest.mark.parametrize("kind", ["prompt", "steer", "compaction"])
def test_each_operation_family_and_cancellation_reach_terminal_with_one_retirement(
    run: Any, kind: str
) -> None:
    for outcome in ("completed", "cancelled"):
        tx = run.life.start(A, kind)
        run._commit(tx)
        run.begin_response(L)
        run.frames(L, ["a"])
        if outcome == "cancelled":
            run.cancel(L)
        op = run.life.active(A).id
        run.terminal(L, "completed")
        assert run.life.terminated[op] == outcome and run.retired[op] == 1
    run.lifecycle_rules()


@pytest.mark.rule("OP-1")
def test_shape_check_rejects_mixed_and_two_scope_transactions() -> None:
    from scopecheck.models.lifecycle import Tx, operation_state

    mixed = Tx(
        "bad",
        "op",
        (set_value(operation_state("op"), {}), set_value(pending_tool_output("op", "t"), 1)),
    )
    two = Tx(
        "bad",
        "op",
        (
            set_value(pending_tool_output("op", "t"), 1),
            set_value(pending_tool_output("op2", "t"), 1),
        ),
    )
    for tx in (mixed, two):
        with pytest.raises(AssertionError, match="mixes scopes"):
            check_transaction_shape(tx)
