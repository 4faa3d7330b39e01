"""The oracle's own reads against hand-derived expectations (LIST-2..LIST-5, LIST-9).

Everything else checks backends *against* the reference model; when model and backend agree,
the machines cannot tell whether both are right.  A mutation run (docs/mutation.md)
found model reads the fast machine budget never compared -- descending pages with a cursor,
scans of an ephemeral scope, bad scan arguments -- so these tests pin them to the contract.
"""

from __future__ import annotations

import pytest

from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import UsageError
from scopecheck.models.reference import ReferenceRepository, ReferenceSession
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import append_list, set_value

OP = ephemeral_scope("op")
LIST = value_list("ns", "l")


@pytest.fixture
def session() -> ReferenceSession:
    s = ReferenceRepository().create("s")
    s.commit([append_list(LIST, n, tag="mark" if n == 2 else None) for n in (1, 2, 3, 4)], 1)
    s.commit([append_list(value_list("ns", "l", OP), "scoped")], 2)
    s.commit(
        [
            set_value(value("ns", "b"), "B"),
            set_value(value("ns", "ab"), "AB"),
            set_value(value("ns", "a"), "A"),
            set_value(value("other", "a"), "X"),
        ],
        3,
    )
    s.commit([set_value(value("ns", "a", OP), "opA"), set_value(value("ns", "ax", OP), "opAX")], 4)
    return s


def _values(page: tuple[object, ...]) -> list[object]:
    return [e.value for e in page]  # type: ignore[attr-defined]


@pytest.mark.rule("LIST-2", "LIST-4")
def test_descending_pages_run_newest_first_below_the_cursor(session: ReferenceSession) -> None:
    page = session.read_list(LIST, order="desc")
    assert _values(page) == [4, 3, 2, 1]
    assert [e.seq for e in page] == sorted((e.seq for e in page), reverse=True)
    below = session.read_list(LIST, order="desc", cursor=page[1].seq)
    assert _values(below) == [2, 1]
    above = session.read_list(LIST, order="asc", cursor=page[1].seq)
    assert _values(above) == [4]
    assert _values(session.read_list(LIST, order="desc", limit=2)) == [4, 3]


@pytest.mark.rule("LIST-5")
def test_stop_at_tag_keeps_the_marker_in_either_order(session: ReferenceSession) -> None:
    assert _values(session.read_list(LIST, stop_at_tag="mark")) == [1, 2]
    assert _values(session.read_list(LIST, order="desc", stop_at_tag="mark")) == [4, 3, 2]
    assert _values(session.read_list(LIST, order="desc", limit=1, stop_at_tag="mark")) == [4]


@pytest.mark.rule("LIST-4")
@pytest.mark.parametrize("order", ["DESC", "", None, 1])
def test_unknown_order_is_invalid_query(session: ReferenceSession, order: object) -> None:
    with pytest.raises(UsageError) as caught:
        session.read_list(LIST, order=order)
    assert caught.value.code == "invalid_query"


@pytest.mark.rule("LIST-9")
def test_scan_reads_one_scope_by_prefix_in_code_point_order(session: ReferenceSession) -> None:
    assert [(k, r.value) for k, r in session.scan_values("ns")] == [
        ("a", "A"),
        ("ab", "AB"),
        ("b", "B"),
    ]
    assert [k for k, _ in session.scan_values("ns", "a")] == ["a", "ab"]
    assert [(k, r.value) for k, r in session.scan_values("ns", "", OP)] == [
        ("a", "opA"),
        ("ax", "opAX"),
    ]
    assert session.scan_values("ns", "", ephemeral_scope("nobody")) == ()


@pytest.mark.rule("LIST-9")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("a\x00b",), "invalid_address"),
        ((3,), "invalid_address"),
        (("ns", "p\x00"), "invalid_address"),
        (("ns", None), "invalid_address"),
        (("ns", "", "op"), "invalid_scope"),
    ],
)
def test_bad_scan_arguments_are_usage_errors(
    session: ReferenceSession, args: tuple[object, ...], code: str
) -> None:
    with pytest.raises(UsageError) as caught:
        session.scan_values(*args)  # type: ignore[arg-type]
    assert caught.value.code == code


@pytest.mark.rule("REPO-1", "REPO-3", "REPO-4")
def test_model_repository_refusals_have_the_contract_codes() -> None:
    """The model refuses what every backend refuses, with the same codes: a missing Session is
    ``not_found`` for open and delete, an existing one ``already_exists``, an open one cannot be
    opened again or deleted, a bad id is ``invalid_session_id``."""
    repo = ReferenceRepository()

    def code(call: object) -> str:
        with pytest.raises(UsageError) as caught:
            call()  # type: ignore[operator]
        return caught.value.code

    assert code(lambda: repo.open("s")) == "not_found"
    assert code(lambda: repo.delete("s")) == "not_found"
    repo.create("s")
    assert code(lambda: repo.create("s")) == "already_exists"
    assert code(lambda: repo.open("s")) == "already_open"
    assert code(lambda: repo.delete("s")) == "already_open"
    repo.close_session("s")
    repo.delete("s")
    assert repo.list() == []
    for bad in ("", "a\x00", "\ud800", 3):
        assert code(lambda bad=bad: repo.create(bad)) == "invalid_session_id"


@pytest.mark.rule("TX-1")
@pytest.mark.parametrize("writes", ["set", b"x", 3, None, [1]])
def test_model_refuses_a_transaction_that_is_no_list_of_writes(writes: object) -> None:
    session = ReferenceRepository().create("s")
    with pytest.raises(UsageError) as caught:
        session.commit(writes, 1)
    assert caught.value.code == "invalid_transaction"
    assert session.snapshot() == ReferenceRepository().create("t").snapshot()
