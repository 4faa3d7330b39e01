"""Conformance: JSONL against Memory on the same scenarios (REFERENCE §6, 000 §9.2; JSONL-22).

Each scenario runs on a Memory world and on JSONL worlds (real temp dir and pyfakefs); every
observation (commit results, reads, error codes) must be equal, and so must every Session's
snapshot after a restart.  The scenarios are the TypeScript conformance cases, named as there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from scopecheck.backends.resolve import resolve_backend
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.protocols import Repository
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

A = ephemeral_scope("op-A")
B = ephemeral_scope("op-B")
Obs = list[Any]


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return ("ok", fn(*args, **kwargs))
    except ScopecheckError as exc:
        return ("error", exc.code)


def run(scenario: Callable[[Repository, Obs], None], backend: str) -> tuple[Obs, Obs]:
    world = resolve_backend(backend).new_world(lambda: 1234)
    try:
        observed: Obs = []
        scenario(world.repository(), observed)
        repo = world.restart()
        after: Obs = []
        for session_id in repo.list():
            storage = repo.open(session_id)
            after.append((session_id, storage.snapshot()))
            storage.close()
        return observed, after
    finally:
        world.cleanup()


SCENARIOS: dict[str, Callable[[Repository, Obs], None]] = {}


def scenario(fn: Callable[[Repository, Obs], None]) -> Callable[[Repository, Obs], None]:
    SCENARIOS[fn.__name__] = fn
    return fn


# -- REFERENCE §6 storage cases --------------------------------------------------------------


@scenario
def commits_mixed_writes_atomically_in_write_order(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    obs.append(
        s.commit(
            [
                insert_entry("e1", None, "message", {"text": "hi"}),
                insert_usage("u1", usage_value(input=1, output=2, cost_total=0.5), entry_id="e1"),
                set_value(value("ns", "k"), 1),
                append_list(value_list("ns", "l"), "a"),
            ]
        )
    )
    obs.append(s.snapshot())


@scenario
def rolls_back_every_store_when_a_mixed_transaction_fails(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([insert_entry("e1", None, "message")])
    obs.append(
        attempt(
            s.commit,
            [
                set_value(value("ns", "k"), 1),
                append_list(value_list("ns", "l"), 1),
                insert_usage("u1", usage_value(input=1)),
                insert_entry("e1", None, "message"),
            ],
        )
    )
    obs.append(s.snapshot())
    obs.append(s.commit([set_value(value("ns", "k"), 2)]))


@scenario
def preserves_overwritten_and_deleted_values_when_a_transaction_fails(
    repo: Repository, obs: Obs
) -> None:
    s = repo.create("s")
    s.commit([set_value(value("ns", "a"), 1), set_value(value("ns", "b"), 2)])
    obs.append(
        attempt(
            s.commit,
            [
                set_value(value("ns", "a"), 9),
                delete_value(value("ns", "b")),
                insert_entry("x", "missing-parent", "message"),
            ],
        )
    )
    obs.append(s.snapshot())


@scenario
def enforces_one_shared_entry_and_usage_id_namespace(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([insert_entry("id1", None, "message")])
    obs.append(attempt(s.commit, [insert_usage("id1", usage_value(input=1))]))
    s.commit([insert_usage("u1", usage_value(input=1))])
    obs.append(attempt(s.commit, [insert_entry("u1", None, "message")]))
    obs.append(s.snapshot())


@scenario
def resolves_parents_only_from_prior_entries_and_earlier_writes(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    obs.append(attempt(s.commit, [insert_entry("c", "p", "t"), insert_entry("p", None, "t")]))
    obs.append(attempt(s.commit, [insert_entry("p", None, "t"), insert_entry("c", "p", "t")]))
    obs.append(attempt(s.commit, [insert_usage("u", usage_value(input=1), entry_id="nope")]))
    obs.append(attempt(s.commit, [insert_entry("d", "c", "t")]))
    obs.append(s.snapshot())


@scenario
def sets_replaces_deletes_and_recreates_values_without_tombstones(
    repo: Repository, obs: Obs
) -> None:
    s = repo.create("s")
    for write in (
        set_value(value("n", "k"), 1),
        set_value(value("n", "k"), 2),
        delete_value(value("n", "k")),
        delete_value(value("n", "k")),
        set_value(value("n", "k"), 3),
    ):
        obs.append(s.commit([write]))
        obs.append(s.get_value(value("n", "k")))
    obs.append(s.scan_values("n"))


@scenario
def applies_same_transaction_value_and_list_operations_in_write_order(
    repo: Repository, obs: Obs
) -> None:
    s = repo.create("s")
    s.commit(
        [
            set_value(value("n", "k"), 1),
            delete_value(value("n", "k")),
            set_value(value("n", "k"), 2),
            append_list(value_list("n", "l"), 1),
            delete_list(value_list("n", "l")),
            append_list(value_list("n", "l"), 2),
        ]
    )
    obs.append(s.snapshot())


@scenario
def pages_appends_by_global_sequence_and_deletes_whole_lists(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    for n in range(7):
        s.commit([append_list(value_list("n", "l"), n), set_value(value("n", "other"), n)])
    page = s.read_list(value_list("n", "l"), limit=3)
    obs.append(page)
    obs.append(s.read_list(value_list("n", "l"), cursor=page[-1].seq, limit=3))
    obs.append(s.read_list(value_list("n", "l"), order="desc", limit=2))
    obs.append(attempt(s.read_list, value_list("n", "l"), limit=0))
    s.commit([delete_list(value_list("n", "l"))])
    obs.append(s.read_list(value_list("n", "l")))


@scenario
def clamps_one_read_page_without_limiting_list_growth(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([append_list(value_list("n", "l"), n) for n in range(10_005)])
    obs.append(len(s.read_list(value_list("n", "l"), limit=50_000)))
    obs.append(len(s.read_list(value_list("n", "l"))))


@scenario
def commits_mixed_list_writes_atomically(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    obs.append(
        attempt(
            s.commit,
            [
                append_list(value_list("n", "a"), 1),
                append_list(value_list("n", "b"), 2),
                insert_entry("c", "nope", "t"),
            ],
        )
    )
    obs.append(
        s.commit(
            [
                append_list(value_list("n", "a"), 1),
                delete_list(value_list("n", "b")),
                append_list(value_list("n", "b"), 3, tag="t"),
            ]
        )
    )
    obs.append(s.snapshot())


@scenario
def keeps_stats_equal_to_message_count_and_ledger_totals(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit(
        [
            insert_entry("m1", None, "message"),
            insert_entry("x", "m1", "note"),
            insert_usage("u1", usage_value(input=3, total_tokens=5, cost_total=0.1)),
        ]
    )
    s.commit(
        [
            insert_entry("m2", "x", "message"),
            insert_usage(
                "u2",
                usage_value(output=4, cost_total=0.2, cost_input=0.05),
                entry_id="m2",
                adjustment=True,
                details={"why": "test"},
            ),
        ]
    )
    obs.append(s.stats())


@scenario
def serializes_back_to_back_commits_in_admission_order(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    seqs: list[int] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for _ in range(10):
            seq = s.commit([append_list(value_list("n", "l"), "x")])[0].seq
            with lock:
                seqs.append(seq)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    obs.append(sorted(seqs))
    obs.append(s.snapshot())


@scenario
def seals_admission_drains_admitted_commits_and_closes_idempotently(
    repo: Repository, obs: Obs
) -> None:
    s = repo.create("s")
    s.commit([set_value(value("n", "k", A), 1)])
    s.close()
    s.close()
    obs.append(attempt(s.commit, [set_value(value("n", "k"), 1)]))
    obs.append(attempt(s.get_value, value("n", "k", A)))
    obs.append(attempt(s.read_list, value_list("n", "k", A)))


# -- REFERENCE §6 repository cases -----------------------------------------------------------


@scenario
def creates_with_no_implicit_branch_and_rejects_duplicate_ids(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    obs.append(s.snapshot())
    obs.append(attempt(repo.create, "s"))
    s.close()
    obs.append(attempt(repo.create, "s"))
    obs.append(repo.list())


@scenario
def preserves_state_across_close_and_reopen(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([insert_entry("e", None, "message"), set_value(value("n", "k"), {"a": [1.5]})])
    s.commit([append_list(value_list("n", "l", A), "frame", tag="done")])
    before = s.snapshot()
    s.close()
    s = repo.open("s")
    obs.append(s.snapshot() == before)
    obs.append(s.commit([set_value(value("n", "z"), 0)]))


@scenario
def deletes_closed_sessions_without_affecting_others(repo: Repository, obs: Obs) -> None:
    for name in ("a", "b"):
        s = repo.create(name)
        s.commit([set_value(value("n", "k", A), name)])
        s.close()
    obs.append(attempt(repo.delete, "zz"))
    repo.delete("a")
    obs.append(repo.list())
    obs.append(attempt(repo.open, "a"))
    b = repo.open("b")
    obs.append(b.get_value(value("n", "k", A)))
    obs.append(attempt(repo.delete, "b"))


@scenario
def rejects_opening_an_already_open_session(repo: Repository, obs: Obs) -> None:
    repo.create("s")
    obs.append(attempt(repo.open, "s"))
    obs.append(attempt(repo.open, "missing"))


# -- 000 §9.2 shared scoped conformance --------------------------------------------------------


@scenario
def ephemeral_scalar_set_get_replace_delete(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    for write in (
        set_value(value("n", "k", A), 1),
        set_value(value("n", "k", A), 2),
        delete_value(value("n", "k", A)),
    ):
        s.commit([write])
        obs.append(s.get_value(value("n", "k", A)))
    obs.append(s.scan_values("n", scope=A))


@scenario
def independent_scopes_and_session_scope_do_not_alias(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([set_value(value("n", "k"), "main")])
    s.commit([set_value(value("n", "k", A), "a"), append_list(value_list("n", "k", A), 1)])
    s.commit([set_value(value("n", "k", B), "b")])
    obs.append([s.get_value(value("n", "k", sc)) for sc in (A, B)])
    obs.append(s.get_value(value("n", "k")))
    obs.append(s.snapshot())


@scenario
def mixed_scope_and_two_id_transactions_are_rejected_before_mutation(
    repo: Repository, obs: Obs
) -> None:
    s = repo.create("s")
    obs.append(attempt(s.commit, [set_value(value("n", "k"), 1), set_value(value("n", "k", A), 1)]))
    obs.append(attempt(s.commit, [set_value(value("n", "k", A), 1), retire_scope(B)]))
    obs.append(
        attempt(s.commit, [set_value(value("n", "k", A), 1), set_value(value("n", "k", B), 1)])
    )
    obs.append(s.snapshot())
    obs.append(s.commit([set_value(value("n", "k"), 1)]))


@scenario
def retirement_is_exact_atomic_legal_when_absent_and_reusable(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    s.commit([set_value(value("n", "k", A), 1), append_list(value_list("n", "l", A), 1)])
    s.commit([set_value(value("n", "k", B), 2)])
    obs.append(
        s.commit(
            [
                retire_scope(A),
                insert_entry("done", None, "message"),
                set_value(value("pi.op.state", "A"), None),
            ]
        )
    )
    obs.append(s.snapshot())
    obs.append(s.commit([retire_scope(ephemeral_scope("never-used"))]))
    s.commit([append_list(value_list("n", "l", A), 2)])
    s.commit([retire_scope(B), retire_scope(B)])
    s.commit([set_value(value("n", "k", B), 3)])
    obs.append(s.snapshot())


@scenario
def global_sequences_gaps_tags_and_stop_at_tag(repo: Repository, obs: Obs) -> None:
    s = repo.create("s")
    obs.append(s.commit([insert_entry("e", None, "message")]))
    obs.append(
        s.commit(
            [
                append_list(value_list("f", "x", A), n, tag="t" if n % 3 == 2 else None)
                for n in range(8)
            ]
        )
    )
    obs.append(s.commit([set_value(value("v", "k", B), 1)]))
    obs.append(s.commit([retire_scope(B)]))
    obs.append(s.commit([append_list(value_list("f", "x", A), "again")]))
    for order in ("asc", "desc"):
        obs.append(s.read_list(value_list("f", "x", A), order=order, stop_at_tag="t"))
        obs.append(s.read_list(value_list("f", "x", A), order=order, limit=2, stop_at_tag="t"))
    obs.append(s.stats())


@pytest.mark.rule("JSONL-22")
@pytest.mark.parametrize("backend", ["jsonl", "jsonl-fakefs"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_jsonl_matches_memory(name: str, backend: str) -> None:
    """JSONL observes and persists exactly what Memory does on this scenario."""
    expected = run(SCENARIOS[name], "memory")
    assert run(SCENARIOS[name], backend) == expected
