"""Payload validation at the boundary: what is storable JSON, and that it is frozen (WRITE-3)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.machines.strategies import storable_float
from scopecheck.models import errors
from scopecheck.models.addresses import value, value_list
from scopecheck.models.payload import MAX_SAFE_INTEGER, decode_json, encode_json
from scopecheck.models.writes import append_list, insert_entry, insert_usage, set_value, usage_value

json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False).filter(storable_float)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.rule("WRITE-3")
@given(json)
def test_storable_json_round_trips_byte_for_byte(payload: Any) -> None:
    """Any storable value encodes to bytes that decode and re-encode identically (the
    canonical form is a fixed point), and that any JSON parser reads."""
    data = encode_json(payload)
    assert encode_json(decode_json(data)) == data
    assert orjson.loads(data) == decode_json(data)
    assert set_value(value("ns"), payload).value_json == data


@pytest.mark.rule("WRITE-3", "ERR-3")
@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        {1: "x"},
        {"a": {2}},
        b"bytes",
        object(),
        2**64,
        -(2**63) - 1,
        2**53,
        -(2**53),
        2**53 + 1,
        2**60,
        1e17,
        "\ud800",
        {"\udfff": 1},
        [float("nan")],
    ],
)
def test_unstorable_values_raise_invalid_payload(bad: Any) -> None:
    """NaN, infinities, non-str keys, sets, bytes, huge ints and lone surrogates are refused."""
    for build in (lambda: set_value(value("ns"), bad), lambda: append_list(value_list("l"), bad)):
        with pytest.raises(errors.UsageError) as caught:
            build()
        assert caught.value.code == "invalid_payload"


@pytest.mark.rule("WRITE-3")
def test_payload_is_frozen_when_the_write_is_built() -> None:
    """Mutating the caller's dict after building a write changes neither the write nor reads."""
    payload = {"a": [1]}
    write = set_value(value("ns"), payload)
    payload["a"].append(float("nan"))
    assert write.value == {"a": [1]}
    first = write.value
    first["a"].append(2)
    assert write.value == {"a": [1]}


@pytest.mark.rule("WRITE-4")
@pytest.mark.parametrize("key", ["kind", "id", "parentId", "type", "seq", "timestamp"])
def test_entry_payload_may_not_shadow_record_keys(key: str) -> None:
    """An entry payload carrying one of the record's own keys is refused."""
    with pytest.raises(errors.UsageError) as caught:
        insert_entry("e", None, "message", {key: 1})
    assert caught.value.code == "invalid_payload"


@pytest.mark.rule("WRITE-3")
@pytest.mark.parametrize(
    "usage",
    [{"input": "1"}, {"input": 1.5}, {"cost": 3}, {"cost": {"total": "x"}}, [], {"output": True}],
)
def test_malformed_usage_rows_raise_invalid_payload(usage: Any) -> None:
    """Token counts are ints and costs are numbers."""
    with pytest.raises(errors.UsageError) as caught:
        insert_usage("u", usage)
    assert caught.value.code == "invalid_payload"


@pytest.mark.rule("WRITE-1")
@pytest.mark.parametrize("ident", ["", "a\x00", None, 5])
def test_entry_and_usage_ids_must_be_non_empty_strings(ident: Any) -> None:
    """Entry and usage ids are non-empty strings without NUL."""
    for build in (
        lambda: insert_entry(ident, None, "message"),
        lambda: insert_usage(ident, usage_value()),
    ):
        with pytest.raises(errors.UsageError) as caught:
            build()
        assert caught.value.code == "invalid_payload"


@pytest.mark.rule("ERR-1", "ERR-2")
def test_errors_form_one_family_with_stable_codes() -> None:
    """User mistakes, corruption and I/O failures are distinct ScopecheckErrors with codes."""
    assert issubclass(errors.UsageError, ValueError)
    assert issubclass(errors.StorageIOError, OSError)
    assert not issubclass(errors.CorruptError, errors.UsageError)
    err = errors.CorruptError("corrupt", "bad line", file="x.jsonl", line=3)
    assert (err.code, err.details) == ("corrupt", {"file": "x.jsonl", "line": 3})
    assert str(err) == "corrupt: bad line"
    import pickle

    again = pickle.loads(pickle.dumps(err))
    assert (type(again), again.code, again.details) == (errors.CorruptError, "corrupt", err.details)


@pytest.mark.rule("WRITE-3")
def test_payload_errors_point_at_the_bad_part() -> None:
    """``details['path']`` locates the offending part from the write's own name for it
    (``value``, ``element``, ``payload`` ...) down through list indexes and object keys."""
    from scopecheck.models.addresses import value, value_list
    from scopecheck.models.errors import UsageError
    from scopecheck.models.writes import append_list, set_value

    cases = [
        (lambda: set_value(value("ns"), [0, {"x": float("nan")}]), "value[1].x"),
        (lambda: append_list(value_list("ns"), {"k": {1: 2}}), "element.k"),
    ]
    for build, path in cases:
        with pytest.raises(UsageError) as caught:
            build()
        assert caught.value.code == "invalid_payload"
        assert caught.value.details["path"] == path


@pytest.mark.rule("WRITE-3")
def test_nesting_is_bounded_at_200_levels() -> None:
    from scopecheck.models.errors import UsageError
    from scopecheck.models.payload import encode_json

    def nested(levels: int) -> object:
        out: object = 0
        for _ in range(levels):
            out = [out]
        return out

    assert encode_json(nested(200)) == b"[" * 200 + b"0" + b"]" * 200
    with pytest.raises(UsageError) as caught:
        encode_json(nested(201))
    assert caught.value.code == "invalid_payload"
    assert caught.value.details["path"] == "value" + "[0]" * 201  # the innermost 0
