"""Open's fast line indexer is exactly as strict as the record checker (JSONL-6).

``index_transaction`` recognises the writer's shapes inline for speed; these tests pin that it
accepts and rejects precisely what ``transaction_records`` + ``check_record`` + consecutive seqs
accept and reject, over records mutated in every way the checker looks at, in the main log and
in a sidecar, and that the operations it returns describe the records.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopecheck.impl.jsonl.codec import (
    OP_APPEND,
    OP_CLEAR,
    OP_DELETE,
    OP_ENTRY,
    OP_MESSAGE,
    OP_RETIRE,
    OP_SET,
    OP_USAGE,
    BadRecord,
    check_record,
    index_transaction,
    op_record,
    transaction_records,
)
from scopecheck.models.writes import usage_value

SCOPE = "op-1"

BASES: list[dict[str, Any]] = [
    {"kind": "entry", "id": "e1", "parentId": None, "type": "message", "role": "user", "seq": 1,
     "timestamp": 5},
    {"kind": "entry", "id": "e2", "parentId": "e1", "type": "note", "seq": 1, "timestamp": 5},
    {"kind": "usage", "id": "u1", "usage": usage_value(input=1), "entryId": "e1",
     "adjustment": False, "seq": 1},
    {"kind": "usage", "id": "u2", "usage": usage_value(), "adjustment": True, "details": [1],
     "seq": 1},
    {"kind": "value", "op": "set", "seq": 1, "namespace": "n", "key": "k", "value": {"a": 1}},
    {"kind": "value", "op": "delete", "seq": 1, "namespace": "n", "key": "k"},
    {"kind": "list", "op": "append", "seq": 1, "namespace": "n", "key": "k", "value": [1]},
    {"kind": "list", "op": "append", "seq": 1, "namespace": "n", "key": "k", "value": 2,
     "tag": "t"},
    {"kind": "list", "op": "delete", "seq": 1, "namespace": "n", "key": "k"},
    {"kind": "scope", "op": "retire", "seq": 1, "scopeId": SCOPE},
]  # fmt: skip

FIELDS = sorted({key for base in BASES for key in base} | {"extra"})
ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    7,
    True,
    1.5,
    "",
    "x",
    "set",
    "delete",
    "append",
    "retire",
    "entry",
    "value",
    "list",
    "usage",
    "scope",
    SCOPE,
    "op-2",
    [],
    {},
]


def reference(obj: Any, scope: str | None) -> list[int] | None:
    """The seqs the slow, documented checks accept, or ``None`` if they reject the line."""
    try:
        records = transaction_records(obj)
        seqs = [check_record(rec, scope) for rec in records]
    except BadRecord:
        return None
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        return None
    if scope is not None and any(b != a + 1 for a, b in itertools.pairwise(seqs)):
        return None  # a main log may skip seqs inside a transaction (JSONL-23), a sidecar not
    return seqs


def mutated(base: dict[str, Any], edits: list[tuple[str, str, Any]]) -> dict[str, Any]:
    rec = dict(base)
    for action, field, value in edits:
        if action == "drop":
            rec.pop(field, None)
        elif action == "set":
            rec[field] = value
        else:  # move the field to the end (key order must not matter)
            if field in rec:
                rec[field] = rec.pop(field)
    return rec


edits = st.lists(
    st.tuples(
        st.sampled_from(["drop", "set", "move"]),
        st.sampled_from(FIELDS),
        st.sampled_from(ODD_VALUES),
    ),
    max_size=3,
)


@pytest.mark.rule("JSONL-6")
@settings(max_examples=600, deadline=None)
@given(
    picks=st.lists(st.tuples(st.sampled_from(BASES), edits, st.booleans()), min_size=1, max_size=3),
    sidecar=st.booleans(),
    gap=st.booleans(),
)
def test_fast_indexer_accepts_exactly_what_the_checker_accepts(
    picks: list[tuple[dict[str, Any], list[tuple[str, str, Any]], bool]],
    sidecar: bool,
    gap: bool,
) -> None:
    scope = SCOPE if sidecar else None
    records = []
    for n, (base, changes, scoped) in enumerate(picks):
        rec = dict(base, seq=n + 1 + (1 if gap and n else 0))
        if scoped and rec["kind"] in ("value", "list"):
            rec["scopeId"] = SCOPE
        records.append(mutated(rec, changes))
    obj: Any = records[0] if len(records) == 1 else records
    line = orjson.dumps(obj)
    expected = reference(orjson.loads(line), scope)
    try:
        lean = index_transaction(orjson.loads(line), line, scope, lean=True)
    except BadRecord:
        lean = None
    try:
        first, last, ops = index_transaction(orjson.loads(line), line, scope)
    except BadRecord:
        assert expected is None, f"fast indexer rejected a line the checker accepts: {line!r}"
        assert lean is None, f"lean indexer accepted a line the checker rejects: {line!r}"
        return
    assert expected is not None, f"fast indexer accepted a line the checker rejects: {line!r}"
    assert lean is not None and lean[:2] == (first, last)
    # Lean: the operations of the records other than entries, each ending with its seq.
    kept = [(op, expected[n]) for n, op in enumerate(ops) if op[0] not in (OP_ENTRY, OP_MESSAGE)]
    assert [(op[0], op[1], op[-1]) for op in lean[2]] == [(op[0], op[1], seq) for op, seq in kept]
    assert (first, last) == (expected[0], expected[-1])
    decoded = transaction_records(orjson.loads(line))
    assert len(ops) == len(decoded)
    for op, rec in zip(ops, decoded, strict=True):
        code = op[0]
        if code in (OP_ENTRY, OP_MESSAGE, OP_USAGE, OP_SET):
            assert op_record(op) == rec
        if code in (OP_ENTRY, OP_MESSAGE):
            assert rec["kind"] == "entry" and op[1] == rec["id"]
            assert (code == OP_MESSAGE) == (rec["type"] == "message")
        elif code == OP_USAGE:
            assert rec["kind"] == "usage" and op[1] == rec["id"] and op[4] == rec["usage"]
        elif code == OP_RETIRE:
            assert rec["kind"] == "scope" and op[1:] == (rec["scopeId"], rec["seq"])
        else:
            assert op[1] == (scope, rec["namespace"], rec["key"])
            kind_op = {
                OP_SET: ("value", "set"),
                OP_DELETE: ("value", "delete"),
                OP_APPEND: ("list", "append"),
                OP_CLEAR: ("list", "delete"),
            }[code]
            assert (rec["kind"], rec["op"]) == kind_op
            if code == OP_APPEND:
                element = op[2]
                assert element.seq == rec["seq"] and element.tag == rec.get("tag")
                assert orjson.loads(element.value_json) == rec["value"]


@pytest.mark.rule("JSONL-6")
def test_fast_indexer_rejects_each_base_record_in_the_wrong_file() -> None:
    """Entries, usage rows and retirements only in the main log; scoped records only in their
    own sidecar (000 §6.1)."""
    for base in BASES:
        if base["kind"] in ("entry", "usage", "scope"):
            line = orjson.dumps(base)
            with pytest.raises(BadRecord):
                index_transaction(orjson.loads(line), line, SCOPE)
        else:
            scoped = dict(base, scopeId="op-2")
            line = orjson.dumps(scoped)
            with pytest.raises(BadRecord):
                index_transaction(orjson.loads(line), line, SCOPE)
            with pytest.raises(BadRecord):
                index_transaction(orjson.loads(line), line, None)
