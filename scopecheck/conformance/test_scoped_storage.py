"""Shared backend conformance of 000 §9.2, run identically on every bundled backend."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scopecheck.conformance.helpers import lists_of, values_of
from scopecheck.models import errors
from scopecheck.models.addresses import value, value_list
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

OP = ephemeral_scope("op-1")
OTHER = ephemeral_scope("op-2")


def seqs(committed: Any) -> list[int]:
    return [c.seq for c in committed]


def reject(storage: Any, writes: list[Any], code: str) -> None:
    """The commit fails with ``code`` and the logical state is exactly as before (TX-4)."""
    before = storage.snapshot()
    with pytest.raises(errors.UsageError) as caught:
        storage.commit(writes)
    assert caught.value.code == code
    assert storage.snapshot() == before


@pytest.mark.rule("ADDR-1", "WRITE-2")
def test_ephemeral_scalar_set_get_replace_delete(storage: Any) -> None:
    """An ephemeral value can be set, read, replaced and deleted."""
    slot = value("app", "k", OP)
    assert storage.get_value(slot) is None
    storage.commit([set_value(slot, {"n": 1})])
    assert storage.get_value(slot).value == {"n": 1}
    storage.commit([set_value(slot, {"n": 2})])
    assert storage.get_value(slot).value == {"n": 2}
    storage.commit([delete_value(slot)])
    assert storage.get_value(slot) is None


@pytest.mark.rule("LIST-1", "LIST-8")
def test_ephemeral_list_append_page_whole_list_delete(storage: Any) -> None:
    """Ephemeral lists append, page by seq and are deleted whole."""
    frames = value_list("frames", "r1", OP)
    storage.commit([append_list(frames, i) for i in range(5)])
    page = storage.read_list(frames, limit=2)
    assert [e.value for e in page] == [0, 1]
    rest = storage.read_list(frames, cursor=page[-1].seq)
    assert [e.value for e in rest] == [2, 3, 4]
    storage.commit([delete_list(frames)])
    assert storage.read_list(frames) == ()
    storage.commit([append_list(frames, "again")])
    assert [e.value for e in storage.read_list(frames)] == ["again"]


@pytest.mark.rule("ADDR-1", "SCOPE-1")
def test_independent_scopes_with_equal_namespace_and_key(storage: Any) -> None:
    """Two ephemeral IDs with equal namespace/key are different physical slots."""
    storage.commit([set_value(value("app", "k", OP), "a")])
    storage.commit([set_value(value("app", "k", OTHER), "b")])
    assert storage.get_value(value("app", "k", OP)).value == "a"
    assert storage.get_value(value("app", "k", OTHER)).value == "b"


@pytest.mark.rule("ADDR-1")
def test_session_scope_independent_from_equal_ephemeral_address(storage: Any) -> None:
    """The session address and the ephemeral address with equal namespace/key never alias."""
    storage.commit([set_value(value("app", "k"), "main")])
    storage.commit([set_value(value("app", "k", OP), "scoped")])
    assert storage.get_value(value("app", "k")).value == "main"
    assert storage.get_value(value("app", "k", OP)).value == "scoped"
    storage.commit([retire_scope(OP)])
    assert storage.get_value(value("app", "k")).value == "main"


@pytest.mark.rule("TX-2", "TX-4")
def test_mixed_session_ephemeral_transaction_rejected_before_mutation(storage: Any) -> None:
    """A session write plus an ephemeral write is refused and changes nothing."""
    storage.commit([set_value(value("app", "k"), 0)])
    reject(
        storage,
        [set_value(value("app", "k"), 1), set_value(value("app", "k", OP), 2)],
        "invalid_transaction",
    )
    reject(
        storage,
        [insert_entry("e1", None, "message"), append_list(value_list("l", "", OP), 1)],
        "invalid_transaction",
    )
    reject(storage, [set_value(value("app", "k", OP), 1), retire_scope(OP)], "invalid_transaction")
    assert seqs(storage.commit([set_value(value("app", "k"), 3)])) == [2]


@pytest.mark.rule("TX-3", "TX-4", "TYPE-5")
def test_two_ephemeral_ids_in_one_transaction_rejected_before_mutation(storage: Any) -> None:
    """Writes of two ephemeral IDs in one transaction are refused at run time."""
    reject(
        storage,
        [set_value(value("app", "k", OP), 1), set_value(value("app", "k", OTHER), 2)],
        "invalid_transaction",
    )
    assert storage.snapshot().values == ()


@pytest.mark.rule("RETIRE-2")
def test_retirement_deletes_every_value_and_list_in_the_exact_scope_only(storage: Any) -> None:
    """Retiring OP removes all of OP's values and lists and nothing of OTHER or the session."""
    storage.commit([set_value(value("a", "1", OP), 1), append_list(value_list("l", "", OP), 1)])
    storage.commit(
        [set_value(value("a", "1", OTHER), 2), append_list(value_list("l", "", OTHER), 2)]
    )
    storage.commit([set_value(value("a", "1"), 3), append_list(value_list("l"), 3)])
    storage.commit([retire_scope(OP)])
    snap = storage.snapshot()
    assert values_of(snap) == {(None, "a", "1"): 3, ("op-2", "a", "1"): 2}
    assert lists_of(snap) == {(None, "l", ""): [3], ("op-2", "l", ""): [2]}


@pytest.mark.rule("RETIRE-2", "TX-6")
def test_retirement_atomic_with_session_sibling_writes(storage: Any) -> None:
    """A retirement and its session siblings commit together, with consecutive seqs."""
    storage.commit([set_value(value("pi.op.state", "op-1"), "running")])
    storage.commit([append_list(value_list("frames", "r", OP), "f1")])
    done = storage.commit(
        [
            delete_value(value("pi.op.state", "op-1")),
            retire_scope(OP),
            set_value(value("pi.result", "op-1"), "ok"),
        ]
    )
    assert seqs(done) == [3, 4, 5]
    snap = storage.snapshot()
    assert values_of(snap) == {(None, "pi.result", "op-1"): "ok"}
    assert snap.lists == ()


@pytest.mark.rule("RETIRE-5")
def test_retirement_of_absent_state_is_legal(storage: Any) -> None:
    """Retiring a scope that never had state succeeds and consumes a seq."""
    assert seqs(storage.commit([retire_scope(OP)])) == [1]
    assert seqs(storage.commit([retire_scope(OP), retire_scope(OTHER)])) == [2, 3]


@pytest.mark.rule("RETIRE-4", "SCOPE-1")
def test_write_after_retirement_recreates_a_new_lifetime(storage: Any) -> None:
    """After retirement a write under the same ID starts empty; old state never returns."""
    storage.commit(
        [set_value(value("a", "old", OP), 1), append_list(value_list("l", "", OP), "old")]
    )
    storage.commit([retire_scope(OP)])
    storage.commit([append_list(value_list("l", "", OP), "new")])
    snap = storage.snapshot()
    assert values_of(snap) == {}
    assert lists_of(snap) == {("op-1", "l", ""): ["new"]}


@pytest.mark.rule("RETIRE-5", "RETIRE-3")
def test_repeated_retirement_advances_the_boundary_without_hiding_later_writes(
    storage: Any,
) -> None:
    """Each retirement ends only what came before it; later writes stay live."""
    storage.commit([set_value(value("a", "", OP), 1)])
    storage.commit([retire_scope(OP)])
    storage.commit([set_value(value("a", "", OP), 2)])
    storage.commit([retire_scope(OP)])
    storage.commit([set_value(value("a", "", OP), 3)])
    assert storage.get_value(value("a", "", OP)).value == 3
    storage.commit([retire_scope(OP)])
    assert storage.get_value(value("a", "", OP)) is None


@pytest.mark.rule("SEQ-1", "SEQ-2", "SEQ-6")
def test_main_scope_a_scope_b_retirement_and_reused_a_get_increasing_seqs(storage: Any) -> None:
    """One global counter across main, scope A, scope B, retirement and reused A."""
    got = []
    got += seqs(storage.commit([set_value(value("m"), 1), insert_entry("e1", None, "message")]))
    got += seqs(
        storage.commit([set_value(value("a", "", OP), 1), append_list(value_list("l", "", OP), 1)])
    )
    got += seqs(storage.commit([set_value(value("b", "", OTHER), 1)]))
    got += seqs(storage.commit([retire_scope(OP)]))
    got += seqs(storage.commit([set_value(value("a", "", OP), 2)]))
    assert got == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.rule("SEQ-3", "SEQ-7", "REPO-2")
def test_retired_and_deleted_elements_leave_gaps_and_reopen_allocates_above(
    world: Any, repo: Any
) -> None:
    """Gaps from deletes and retirements are legal; after reopen the next seq is above all."""
    storage = repo.create("gaps")
    storage.commit([append_list(value_list("l"), i) for i in range(3)])
    storage.commit([append_list(value_list("l", "", OP), i) for i in range(3)])
    storage.commit([delete_list(value_list("l")), retire_scope(OP)])
    storage.commit([append_list(value_list("l"), "after")])
    assert [e.seq for e in storage.read_list(value_list("l"))] == [9]
    storage.close()
    reopened = world.restart().open("gaps")
    assert seqs(reopened.commit([set_value(value("x"), 1)])) == [10]
    assert [e.seq for e in reopened.read_list(value_list("l"))] == [9]


@pytest.mark.rule("LIST-5", "LIST-6")
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_list_tags_round_trip_and_stop_at_tag_includes_the_marker(storage: Any, order: str) -> None:
    """Tags come back unchanged; stop_at_tag stops at and includes the marker in both orders."""
    frames = value_list("frames", "r", OP)
    tags = [None, "base", None, None, "base", None]
    storage.commit([append_list(frames, i, tag) for i, tag in enumerate(tags)])
    whole = storage.read_list(frames, order=order)
    assert [e.tag for e in whole] == (tags if order == "asc" else tags[::-1])
    page = storage.read_list(frames, order=order, stop_at_tag="base")
    expected = [0, 1] if order == "asc" else [5, 4]
    assert [e.value for e in page] == expected
    assert page[-1].tag == "base"


@pytest.mark.rule("LIST-5", "LIST-3")
def test_stop_at_tag_never_searches_beyond_the_page_limit(storage: Any) -> None:
    """With the tag beyond the limit the page ends at the limit; the next page finds it."""
    frames = value_list("frames", "r", OP)
    storage.commit([append_list(frames, i, "base" if i == 4 else None) for i in range(6)])
    first = storage.read_list(frames, limit=3, stop_at_tag="base")
    assert [e.value for e in first] == [0, 1, 2]
    second = storage.read_list(frames, cursor=first[-1].seq, limit=3, stop_at_tag="base")
    assert [e.value for e in second] == [3, 4]


@pytest.mark.rule("STATS-3", "STATS-1", "STATS-2")
def test_stats_ignore_scoped_values_lists_and_retirement(storage: Any) -> None:
    """Stats count messages and usage only."""
    storage.commit(
        [
            insert_entry("e1", None, "message"),
            insert_usage("u1", usage_value(input=3, output=4), "e1"),
        ]
    )
    before = storage.stats()
    storage.commit([set_value(value("a", "", OP), 1), append_list(value_list("l", "", OP), 1)])
    storage.commit([retire_scope(OP), set_value(value("s"), 1)])
    assert storage.stats() == before
    assert before.message_count == 1
    assert (before.usage.input, before.usage.output) == (3, 4)


@pytest.mark.rule("LIFE-1", "LIFE-2")
def test_close_drains_admitted_scoped_commits_and_rejects_later_reads_and_writes(
    storage: Any,
) -> None:
    """Commits admitted before close finish; afterwards reads and writes fail ``closed``."""
    started = threading.Barrier(5)
    results: list[Any] = []

    def writer(n: int) -> None:
        started.wait()
        try:
            results.append(storage.commit([append_list(value_list("l", "", OP), n)]))
        except errors.ScopecheckError as exc:
            results.append(exc.code)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    storage.close()
    for thread in threads:
        thread.join()
    committed = [r for r in results if r != "closed"]
    assert all(isinstance(r, tuple) for r in committed)
    assert sorted(r[0].seq for r in committed) == list(range(1, len(committed) + 1))
    for call in (
        lambda: storage.commit([]),
        lambda: storage.get_value(value("a")),
        storage.stats,
        lambda: storage.read_list(value_list("l", "", OP)),
    ):
        with pytest.raises(errors.ClosedError):
            call()
    storage.close()  # idempotent


@pytest.mark.rule("ADDR-3")
def test_values_and_lists_at_the_same_address_are_independent(storage: Any) -> None:
    """A value and a list with equal scope/namespace/key never see each other's writes."""
    storage.commit(
        [set_value(value("ns", "k", OP), "v"), append_list(value_list("ns", "k", OP), "l")]
    )
    storage.commit([delete_list(value_list("ns", "k", OP))])
    assert storage.get_value(value("ns", "k", OP)).value == "v"
    storage.commit(
        [delete_value(value("ns", "k", OP)), append_list(value_list("ns", "k", OP), "l2")]
    )
    assert [e.value for e in storage.read_list(value_list("ns", "k", OP))] == ["l2"]


@pytest.mark.rule("TX-5")
def test_several_faults_report_in_the_fixed_order(storage: Any) -> None:
    """Item type before scope rule before references; references in write order."""
    storage.commit([insert_entry("e1", None, "message")])
    mixed = [set_value(value("a"), 1), set_value(value("a", "", OP), 2)]
    reject(storage, [*mixed, "junk"], "invalid_transaction")
    reject(storage, [insert_entry("e1", "missing", "m"), *mixed], "invalid_transaction")
    reject(
        storage,
        [insert_entry("e2", "missing", "m"), insert_entry("e1", None, "m")],
        "unknown_reference",
    )
    reject(
        storage,
        [insert_entry("e1", "missing", "m"), insert_entry("e3", "nope", "m")],
        "duplicate_id",
    )


@pytest.mark.rule("RETIRE-6")
def test_scoped_state_outlives_its_owner_until_retired(world: Any, repo: Any) -> None:
    """Deleting the operation state that 'owns' a scope does not end it; only retirement does."""
    storage = repo.create("owner")
    storage.commit([set_value(value("pi.op.state", "op-1"), {"at": "running"})])
    storage.commit([set_value(value("pi.pending.tool_output", "op-1:t", OP), "partial")])
    storage.commit([delete_value(value("pi.op.state", "op-1"))])
    storage.close()
    reopened = world.restart().open("owner")
    assert reopened.get_value(value("pi.pending.tool_output", "op-1:t", OP)).value == "partial"
    reopened.commit([retire_scope(OP)])
    assert reopened.get_value(value("pi.pending.tool_output", "op-1:t", OP)) is None


@pytest.mark.rule("RETIRE-7")
def test_close_and_reopen_never_retires_a_scope(world: Any, repo: Any) -> None:
    """Unretired scoped values and lists survive close, reopen and restart."""
    storage = repo.create("progress")
    storage.commit([append_list(value_list("frames", "r", OP), i) for i in range(3)])
    storage.commit([set_value(value("memo", "m", OP), {"n": 1})])
    before = storage.snapshot()
    storage.close()
    assert repo.open("progress").snapshot() == before
    assert world.restart().open("progress").snapshot() == before


@pytest.mark.rule("LIST-7")
def test_storage_never_reads_a_tag_from_the_element(storage: Any) -> None:
    """An element that *contains* a tag-like field is not tagged; only the write's tag counts."""
    frames = value_list("frames", "r", OP)
    storage.commit(
        [
            append_list(frames, {"tag": "base"}),
            append_list(frames, 1),
            append_list(frames, 2, "base"),
        ]
    )
    page = storage.read_list(frames, stop_at_tag="base")
    assert [e.tag for e in page] == [None, None, "base"]
