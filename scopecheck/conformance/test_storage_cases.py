"""The storage and repository conformance cases of the TypeScript suites (REFERENCE §6)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scopecheck.conformance.helpers import lists_of, values_of
from scopecheck.models import errors
from scopecheck.models.addresses import value, value_list
from scopecheck.models.records import MAX_LIST_LIMIT
from scopecheck.models.writes import (
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    set_value,
    usage_value,
)


def code_of(call: Any) -> str:
    with pytest.raises(errors.ScopecheckError) as caught:
        call()
    return caught.value.code


@pytest.mark.rule("TX-6", "SEQ-1", "SEQ-5")
def test_commits_mixed_writes_atomically_in_write_order(storage: Any, clock: Any) -> None:
    """Entries, usage, values and lists of one commit get consecutive seqs and one timestamp."""
    clock.now = 42
    done = storage.commit(
        [
            insert_entry("e1", None, "message", {"text": "hi"}),
            insert_usage("u1", usage_value(input=1, output=2), "e1"),
            set_value(value("v"), 1),
            append_list(value_list("l"), "x"),
        ]
    )
    assert [c.seq for c in done] == [1, 2, 3, 4]
    assert {c.timestamp for c in done} == {42}
    assert storage.get_entry("e1").payload == {"text": "hi"}
    assert storage.get_entry("e1").timestamp == 42


@pytest.mark.rule("TX-4", "TX-6")
def test_rolls_back_every_store_when_a_mixed_transaction_fails(storage: Any) -> None:
    """A failure in the last write leaves entries, usage, values and lists untouched."""
    storage.commit([insert_entry("e1", None, "message")])
    before = storage.snapshot()
    assert (
        code_of(
            lambda: storage.commit(
                [
                    insert_entry("e2", "e1", "message"),
                    insert_usage("u1", usage_value(), "e2"),
                    set_value(value("v"), 1),
                    append_list(value_list("l"), 1),
                    insert_entry("e3", "missing", "message"),
                ]
            )
        )
        == "unknown_reference"
    )
    assert storage.snapshot() == before
    assert storage.stats().message_count == 1


@pytest.mark.rule("TX-4")
def test_preserves_overwritten_and_deleted_values_when_a_transaction_fails(storage: Any) -> None:
    """Values a failed transaction would overwrite or delete keep their old contents."""
    storage.commit([set_value(value("a"), "keep"), set_value(value("b"), "keep too")])
    assert (
        code_of(
            lambda: storage.commit(
                [
                    set_value(value("a"), "lost"),
                    delete_value(value("b")),
                    insert_entry("e", "nope", "m"),
                ]
            )
        )
        == "unknown_reference"
    )
    assert values_of(storage.snapshot()) == {(None, "a", ""): "keep", (None, "b", ""): "keep too"}


@pytest.mark.rule("WRITE-5")
def test_enforces_one_shared_entry_and_usage_id_namespace(storage: Any) -> None:
    """A usage row may not reuse an entry id, nor an entry a usage id, nor either itself."""
    storage.commit([insert_entry("x", None, "message"), insert_usage("u", usage_value())])
    assert code_of(lambda: storage.commit([insert_usage("x", usage_value())])) == "duplicate_id"
    assert code_of(lambda: storage.commit([insert_entry("u", None, "message")])) == "duplicate_id"
    assert (
        code_of(
            lambda: storage.commit([insert_entry("n", None, "m"), insert_usage("n", usage_value())])
        )
        == "duplicate_id"
    )


@pytest.mark.rule("WRITE-6")
def test_resolves_parents_only_from_prior_entries_and_earlier_writes(storage: Any) -> None:
    """A parent must already exist or come earlier in the same transaction, never later."""
    storage.commit([insert_entry("a", None, "message"), insert_entry("b", "a", "message")])
    assert (
        code_of(lambda: storage.commit([insert_entry("c", "d", "m"), insert_entry("d", "b", "m")]))
        == "unknown_reference"
    )
    assert (
        code_of(
            lambda: storage.commit(
                [insert_usage("u", usage_value(), "later"), insert_entry("later", None, "m")]
            )
        )
        == "unknown_reference"
    )
    storage.commit([insert_entry("c", "b", "message")])
    assert storage.get_entry("c").parent_id == "b"


@pytest.mark.rule("WRITE-2")
def test_sets_replaces_deletes_and_recreates_values_without_tombstones(storage: Any) -> None:
    """Set, replace, delete, recreate; a deleted value leaves nothing in scans or snapshots."""
    slot = value("ns", "k")
    storage.commit([set_value(slot, 1)])
    storage.commit([set_value(slot, 2)])
    storage.commit([delete_value(slot)])
    assert storage.get_value(slot) is None
    assert storage.scan_values("ns") == ()
    assert storage.commit([delete_value(slot)])[0].seq == 4  # deleting the absent still consumes
    storage.commit([set_value(slot, 3)])
    assert storage.get_value(slot).seq == 5


@pytest.mark.rule("WRITE-7")
def test_applies_same_transaction_value_and_list_operations_in_write_order(storage: Any) -> None:
    """set→delete ends absent, delete→set ends present; append→delete→append keeps the last."""
    storage.commit(
        [
            set_value(value("a"), 1),
            delete_value(value("a")),
            delete_value(value("b")),
            set_value(value("b"), 2),
        ]
    )
    storage.commit(
        [
            append_list(value_list("l"), 1),
            delete_list(value_list("l")),
            append_list(value_list("l"), 2),
        ]
    )
    assert values_of(storage.snapshot()) == {(None, "b", ""): 2}
    assert lists_of(storage.snapshot()) == {(None, "l", ""): [2]}


@pytest.mark.rule("LIST-1", "LIST-2", "LIST-4")
def test_pages_appends_by_global_sequence_and_deletes_whole_lists(storage: Any) -> None:
    """Interleaved appends to two lists page by seq in both orders with exclusive cursors."""
    a, b = value_list("l", "a"), value_list("l", "b")
    storage.commit(
        [
            append_list(a, 1),
            append_list(b, 1),
            append_list(a, 2),
            append_list(b, 2),
            append_list(a, 3),
        ]
    )
    assert [e.seq for e in storage.read_list(a)] == [1, 3, 5]
    assert [e.seq for e in storage.read_list(a, order="desc")] == [5, 3, 1]
    assert [e.seq for e in storage.read_list(a, cursor=3)] == [5]
    assert [e.seq for e in storage.read_list(a, cursor=3, order="desc")] == [1]
    assert [e.seq for e in storage.read_list(a, cursor=2)] == [3, 5]
    storage.commit([delete_list(a)])
    assert storage.read_list(a) == ()
    assert [e.seq for e in storage.read_list(b)] == [2, 4]


@pytest.mark.rule("LIST-3")
def test_clamps_one_read_page_without_limiting_list_growth(storage: Any) -> None:
    """A page holds at most 10,000 elements (default 1,000) while the list keeps growing."""
    big = value_list("big")
    for start in range(0, MAX_LIST_LIMIT + 5, 2_500):
        storage.commit(
            [append_list(big, i) for i in range(start, min(start + 2_500, MAX_LIST_LIMIT + 5))]
        )
    assert len(storage.read_list(big)) == 1_000
    page = storage.read_list(big, limit=MAX_LIST_LIMIT * 3)
    assert len(page) == MAX_LIST_LIMIT
    assert [e.value for e in storage.read_list(big, cursor=page[-1].seq)] == list(
        range(MAX_LIST_LIMIT, MAX_LIST_LIMIT + 5)
    )


@pytest.mark.rule("LIST-2", "LIST-3", "LIST-4", "LIST-5")
@pytest.mark.parametrize(
    "options",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": 1.5},
        {"cursor": -1},
        {"cursor": "1"},
        {"cursor": False},
        {"order": "up"},
        {"stop_at_tag": ""},
        {"stop_at_tag": 1},
    ],
)
def test_bad_list_read_options_raise_invalid_query(storage: Any, options: dict[str, Any]) -> None:
    """Every malformed read option is refused with ``invalid_query``."""
    assert code_of(lambda: storage.read_list(value_list("l"), **options)) == "invalid_query"


@pytest.mark.rule("TX-6")
def test_commits_mixed_list_writes_atomically(storage: Any) -> None:
    """Appends to several lists and a whole-list delete in one commit apply together or not."""
    storage.commit([append_list(value_list("a"), 0)])
    before = storage.snapshot()
    assert (
        code_of(
            lambda: storage.commit(
                [
                    append_list(value_list("a"), 1),
                    delete_list(value_list("a")),
                    append_list(value_list("b"), 2),
                    "junk",
                ]
            )
        )
        == "invalid_transaction"
    )
    assert storage.snapshot() == before
    storage.commit(
        [
            append_list(value_list("a"), 1),
            delete_list(value_list("a")),
            append_list(value_list("b"), 2),
        ]
    )
    assert lists_of(storage.snapshot()) == {(None, "b", ""): [2]}


@pytest.mark.rule("STATS-1", "STATS-2")
def test_keeps_stats_equal_to_message_count_and_ledger_totals(storage: Any) -> None:
    """messageCount counts ``message`` entries; usage totals sum the ledger, costs included."""
    storage.commit(
        [
            insert_entry("m1", None, "message"),
            insert_entry("c1", "m1", "custom"),
            insert_entry("m2", "c1", "message"),
            insert_usage(
                "u1",
                usage_value(
                    input=5,
                    output=7,
                    cache_read=1,
                    cache_write=2,
                    total_tokens=15,
                    cost_input=0.1,
                    cost_output=0.2,
                    cost_total=0.3,
                ),
                "m1",
            ),
            insert_usage("u2", usage_value(input=1, output=1, cost_total=0.25), adjustment=True),
        ]
    )
    stats = storage.stats()
    assert stats.message_count == 2
    assert (
        stats.usage.input,
        stats.usage.output,
        stats.usage.cache_read,
        stats.usage.cache_write,
    ) == (6, 8, 1, 2)
    assert stats.usage.total_tokens == 15 + 2
    assert stats.usage.cost_total == 0.3 + 0.25


@pytest.mark.rule("SEQ-2", "LIFE-3")
def test_serializes_back_to_back_commits_in_admission_order(storage: Any) -> None:
    """Concurrent commits get disjoint, increasing seq ranges; a failed one blocks nothing."""
    results: list[Any] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        writes = [append_list(value_list("l"), n), append_list(value_list("l"), n)]
        if n % 5 == 0:
            writes.append("junk")  # type: ignore[arg-type]
        try:
            done = storage.commit(writes)
        except errors.UsageError:
            return
        with lock:
            results.append([c.seq for c in done])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [[2 * i + 1, 2 * i + 2] for i in range(16)]
    values = [e.value for e in storage.read_list(value_list("l"))]
    assert all(values[i] == values[i + 1] for i in range(0, len(values), 2))


@pytest.mark.rule("LIFE-1", "LIFE-2")
def test_seals_admission_drains_admitted_commits_and_closes_idempotently(storage: Any) -> None:
    """close() twice is fine; after it every call raises ``closed``."""
    storage.commit([set_value(value("a"), 1)])
    storage.close()
    storage.close()
    for call in (
        lambda: storage.commit([set_value(value("a"), 2)]),
        lambda: storage.commit([]),
        lambda: storage.get_value(value("a")),
        storage.snapshot,
        lambda: storage.scan_values("a"),
        lambda: storage.get_entry("e"),
        lambda: storage.get_usage("u"),
    ):
        assert code_of(call) == "closed"


@pytest.mark.rule("SEQ-4")
def test_empty_commit_writes_nothing_and_consumes_no_sequence(storage: Any) -> None:
    """``commit([])`` returns ``()`` and the next write still gets seq 1."""
    assert storage.commit([]) == ()
    assert storage.commit([set_value(value("a"), 1)])[0].seq == 1


@pytest.mark.rule("LIST-9")
def test_scan_values_orders_keys_by_code_point(storage: Any) -> None:
    """Prefix scans return one scope's keys sorted by Unicode code point."""
    keys = ["b", "a", "é", "B", "ab", "\U0001f600", "\uffff"]
    storage.commit([set_value(value("ns", k), k) for k in keys])
    assert [k for k, _ in storage.scan_values("ns")] == sorted(keys)
    assert [k for k, _ in storage.scan_values("ns", "a")] == ["a", "ab"]
    assert storage.scan_values("other") == ()


# -- repository ---------------------------------------------------------------------------


@pytest.mark.rule("REPO-1")
def test_creates_with_no_implicit_branch_and_rejects_duplicate_ids(repo: Any) -> None:
    """A new Session is empty; creating the same id again raises ``already_exists``."""
    storage = repo.create("one")
    snap = storage.snapshot()
    assert (snap.entries, snap.values, snap.lists, snap.usage) == ((), (), (), ())
    storage.close()
    assert code_of(lambda: repo.create("one")) == "already_exists"


@pytest.mark.rule("REPO-2")
def test_preserves_state_across_close_and_reopen(world: Any, repo: Any) -> None:
    """Close/reopen and a repository restart both give back the same state and next seq."""
    storage = repo.create("keep")
    storage.commit(
        [
            insert_entry("e", None, "message"),
            set_value(value("a"), [1]),
            append_list(value_list("l"), 1, "t"),
        ]
    )
    before = storage.snapshot()
    storage.close()
    again = repo.open("keep")
    assert again.snapshot() == before
    again.close()
    restarted = world.restart().open("keep")
    assert restarted.snapshot() == before
    assert restarted.commit([set_value(value("b"), 1)])[0].seq == 4


@pytest.mark.rule("REPO-6", "REPO-3")
def test_deletes_closed_sessions_without_affecting_others(repo: Any) -> None:
    """delete() removes a closed Session; an open one is refused; others are untouched."""
    doomed, kept = repo.create("doomed"), repo.create("kept")
    kept.commit([set_value(value("a"), 1)])
    assert code_of(lambda: repo.delete("doomed")) == "already_open"
    doomed.close()
    repo.delete("doomed")
    assert repo.list() == ["kept"]
    assert code_of(lambda: repo.open("doomed")) == "not_found"
    assert code_of(lambda: repo.delete("doomed")) == "not_found"
    assert kept.get_value(value("a")).value == 1


@pytest.mark.rule("REPO-4")
def test_rejects_opening_an_already_open_session(repo: Any) -> None:
    """A second open of an open Session raises ``already_open``; after close it opens."""
    first = repo.create("s")
    assert code_of(lambda: repo.open("s")) == "already_open"
    first.close()
    repo.open("s").close()


@pytest.mark.rule("REPO-5")
@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", None, 3])
def test_invalid_session_ids_reject(repo: Any, bad: Any) -> None:
    """Empty, NUL, lone-surrogate and non-str session ids raise ``invalid_session_id``."""
    assert code_of(lambda: repo.create(bad)) == "invalid_session_id"
    assert code_of(lambda: repo.open(bad)) == "invalid_session_id"
    assert repo.list() == []


@pytest.mark.rule("REPO-7")
def test_list_returns_exactly_the_sessions_sorted(repo: Any) -> None:
    """list() is sorted and holds nothing but Session ids."""
    for sid in ("b", "a", "c"):
        repo.create(sid).commit([set_value(value("x"), 1)])
    assert repo.list() == ["a", "b", "c"]
