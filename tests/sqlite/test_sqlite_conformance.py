"""SQLite and Memory run the same transactions and must agree on everything (SQLITE-13/14).

Each seed drives a mixed workload (entries, usage, values, lists, tags, scoped writes,
retirements, reuse) through both backends in lockstep, comparing committed seqs/timestamps,
point reads, scans, list pages and the full snapshot after every commit, with a close/reopen
every few transactions.  Independent of the lead's machine, which also runs on SQLite.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from scopecheck.backends.registry import BUNDLED
from scopecheck.crashsim.workload import StepClock, make_workload
from scopecheck.impl.memory import MemoryRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.scope import SESSION, ephemeral_scope
from scopecheck.models.writes import (
    append_list,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

SCOPES = [SESSION, *(ephemeral_scope(n) for n in ("op-1", "op/2", "op 3"))]
VALUE_KEYS = [("app", k) for k in "abc"] + [("pi.op.state", k) for k in ("k1", "k2")]
LIST_KEYS = [("log", k) for k in "abc"] + [("pi.frames", k) for k in ("k1", "k2")]


def compare_reads(rng: random.Random, left: Any, right: Any) -> None:
    for scope in SCOPES:
        for ns, key in VALUE_KEYS:
            assert left.get_value(value(ns, key, scope)) == right.get_value(value(ns, key, scope))
        for ns in ("app", "pi.op.state"):
            prefix = rng.choice(("", "a", "k", "k1", "z"))
            assert left.scan_values(ns, prefix, scope) == right.scan_values(ns, prefix, scope)
        for ns, key in LIST_KEYS:
            address = value_list(ns, key, scope)
            options: dict[str, Any] = {
                "order": rng.choice(("asc", "desc")),
                "limit": rng.choice((None, 1, 2, 3)),
                "cursor": rng.choice((None, None, rng.randint(0, 60))),
                "stop_at_tag": rng.choice((None, "mark", "done")),
            }
            assert left.read_list(address, **options) == right.read_list(address, **options)
    assert left.stats() == right.stats()


@pytest.mark.rule("SQLITE-13", "SQLITE-14", "SQLITE-2", "SQLITE-5", "SQLITE-7")
@pytest.mark.parametrize("seed", range(6))
def test_workload_matches_memory_commit_by_commit(make_repo: Any, seed: int) -> None:
    """Every commit result, read and snapshot equals Memory's, across close and reopen."""
    rng = random.Random(seed)
    workload = make_workload(seed, transactions=25, big_every=0)
    clock = StepClock()
    memory = MemoryRepository(clock).create("s")
    repo = make_repo(clock)
    sqlite = repo.create("s")
    for index, writes in enumerate(workload):
        clock.at(index)
        assert sqlite.commit(writes) == memory.commit(writes)
        assert sqlite.snapshot() == memory.snapshot()
        compare_reads(rng, sqlite, memory)
        if index % 7 == 6:
            sqlite.close()
            repo.close()
            repo = make_repo(clock)
            sqlite = repo.open("s")
            assert sqlite.snapshot() == memory.snapshot()


def _bad_transactions() -> list[list[Any]]:
    a, b = ephemeral_scope("A"), ephemeral_scope("B")
    return [
        [set_value(value("app", "x"), 1), insert_entry("e1", None, "message")],  # duplicate id
        [insert_entry("e9", "missing", "message")],
        [insert_usage("u9", usage_value(input=1), entry_id="missing")],
        [set_value(value("app", "x"), 1), set_value(value("ns", "k", a), 2)],
        [set_value(value("ns", "k", a), 1), append_list(value_list("l", "k", b), 2)],
        [retire_scope(a), append_list(value_list("l", "k", a), 2)],
        ["not a write"],
    ]


@pytest.mark.rule("SQLITE-13", "SQLITE-4")
def test_rejected_transactions_match_memory_and_change_nothing(make_repo: Any) -> None:
    """Invalid transactions fail with Memory's code and leave state and next_seq untouched."""
    clock = StepClock()
    memory = MemoryRepository(clock).create("s")
    sqlite = make_repo(clock).create("s")
    setup = [
        insert_entry("e1", None, "message", {"t": "hi"}),
        set_value(value("ns", "k", SESSION), True),
    ]
    assert sqlite.commit(setup) == memory.commit(setup)
    for bad in _bad_transactions():
        errors = []
        for storage in (memory, sqlite):
            with pytest.raises(ScopecheckError) as info:
                storage.commit(bad)
            errors.append(info.value.code)
        assert errors[0] == errors[1]
        assert sqlite.snapshot() == memory.snapshot()
    after = [set_value(value("ns", "k"), 2)]
    assert sqlite.commit(after) == memory.commit(after)
    assert sqlite.commit([]) == memory.commit([]) == ()


@pytest.mark.rule("SQLITE-13")
def test_usage_float_totals_equal_memory_bit_for_bit(make_repo: Any) -> None:
    """Usage totals accumulate in seq order, so awkward float sums agree exactly."""
    clock = StepClock()
    memory = MemoryRepository(clock).create("s")
    sqlite = make_repo(clock).create("s")
    rng = random.Random(7)
    for index in range(1100):
        usage = usage_value(input=2**53 - 1, cost_total=rng.random() / 3, cost_input=0.1)
        tx = [insert_usage(f"u{index}", usage)]
        assert sqlite.commit(tx) == memory.commit(tx)
    assert sqlite.stats() == memory.stats()
    assert sqlite.stats().usage.input == 1100 * (2**53 - 1)  # beyond int64: kept exact


@pytest.mark.rule("SQLITE-14")
@pytest.mark.parametrize("name", ["sqlite", "sqlite-shared"])
def test_registered_world_restart_preserves_state(name: str) -> None:
    """The registered worlds reopen the same files on restart()."""
    world = BUNDLED[name].new_world(StepClock())
    try:
        storage = world.repository().create("s")
        storage.commit([set_value(value("app", "k"), [1])])
        repo = world.restart()
        assert storage.closed
        reopened = repo.open("s")
        record = reopened.get_value(value("app", "k"))
        assert record is not None and record.value == [1]
        assert reopened.commit([set_value(value("app", "k"), 2)])[0].seq == 2
        assert repo.list() == ["s"]
    finally:
        world.cleanup()


@pytest.mark.rule("SQLITE-13", "SQLITE-2")
def test_scan_order_and_prefixes_match_memory_for_awkward_keys(make_repo: Any) -> None:
    """Code-point order (Python str order) equals SQLite's UTF-8 byte order, prefixes are not
    LIKE patterns, and scans stay inside their scope."""
    keys = ["", "a", "a%", "a_", "ab", "b", "\x7f", "é", "\uffff", "\U00010000", "~", "A"]
    scope = ephemeral_scope("s1")
    clock = StepClock()
    memory = MemoryRepository(clock).create("s")
    sqlite = make_repo(clock).create("s")
    for writes in (
        [set_value(value("ns", key), key) for key in keys],
        [set_value(value("ns", key, scope), key) for key in keys[:4]],
    ):
        assert sqlite.commit(writes) == memory.commit(writes)
    for prefix in ("", "a", "a%", "a_", "\uffff", "\U00010000", "zz"):
        for chosen in (None, scope):
            assert sqlite.scan_values("ns", prefix, chosen) == memory.scan_values(
                "ns", prefix, chosen
            )
    assert [k for k, _ in sqlite.scan_values("ns")] == sorted(keys)
