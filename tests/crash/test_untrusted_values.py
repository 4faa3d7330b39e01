"""What a reopened store gives back is judged and described, never trusted (CRASH-FS-13): the
describer takes any value and gives bounded, escaped JSON; backends that read back garbage
after a crash -- a payload that is not JSON, a number where an entry is, a list where an object
is, 24 MiB, bytes that are not UTF-8, lone surrogates -- fail a crash rule whose report says
what they gave, and every report, reproducer and verdict is written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.backends.crash_explorers import GenericCrashExplorer
from scopecheck.backends.factory import load_factory
from scopecheck.crashsim import shown
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.shown import describe, dumps, jsonable, payload
from scopecheck.machines.storage import MismatchError, describe_difference, same
from scopecheck.models.payload import encode_json
from scopecheck.models.records import (
    EntryRecord,
    ListElement,
    Snapshot,
    Stats,
    UsageRecord,
    ValueRecord,
)
from scopecheck.run.fuzz import save_reproducer

ROOT = Path(__file__).resolve().parents[2]
GARBLED = f"{ROOT}/tests/data/garbled_backend.py"
KINDS = ("corrupt_json", "wrong_types", "list_for_dict", "huge", "invalid_utf8", "lone_surrogate")
#: A bound on the JSON of one described state: ITEMS records of LIMIT characters, escaped.
BOUND = 6 * shown.ITEMS * (shown.LIMIT + 4 * shown.IDS) * 2

# -- the describer, over anything ----------------------------------------------------------


class RaisingRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


#: Text with every kind of code point, lone surrogates included.
texts = st.text(st.characters(codec=None, categories=None), max_size=40)
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**200)
    | st.floats()
    | texts
    | st.binary(max_size=60)
    | st.builds(RaisingRepr),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(texts | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)
payloads = st.binary(max_size=60) | st.sampled_from(
    [b'{"a": 1,,', b'"\xff\xfe"', '"\ud800"'.encode("utf-8", "surrogatepass"), b"[1,2]", b"{}"]
)
records = st.one_of(
    st.builds(EntryRecord, texts | junk, texts | st.none(), texts, payloads | junk, junk, junk),
    st.builds(UsageRecord, texts, payloads, texts | st.none(), st.booleans(), payloads, junk),
    junk,
)
keys = st.tuples(texts | st.none(), texts, texts) | junk
snapshots = st.builds(
    Snapshot,
    st.lists(records, max_size=4).map(tuple) | junk,
    st.lists(records, max_size=4).map(tuple) | junk,
    st.lists(st.tuples(keys, st.builds(ValueRecord, junk, payloads) | junk), max_size=4).map(tuple)
    | junk,
    st.lists(
        st.tuples(keys, st.lists(st.builds(ListElement, junk, payloads, texts) | junk).map(tuple))
        | junk,
        max_size=3,
    ).map(tuple)
    | junk,
    st.just(Stats()) | junk,
)


@pytest.mark.rule("CRASH-FS-13")
@given(snapshots | junk)
def test_any_state_is_described_as_bounded_json_without_raising(state: Any) -> None:
    """Whatever a backend handed back as a Session state, its description is JSON that
    orjson writes, bounded in size."""
    described = describe(state)
    written = orjson.dumps(described)
    assert len(written) < BOUND
    orjson.dumps(jsonable(state))  # and the last guard writes the thing itself


@pytest.mark.rule("CRASH-FS-13")
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    )
)
def test_a_canonical_payload_is_shown_as_the_value_it_holds(value: Any) -> None:
    """What every write stores -- canonical JSON -- is shown as its value, as before."""
    raw = encode_json(value)
    if len(raw) <= shown.LIMIT:
        assert orjson.loads(orjson.dumps(payload(raw))) == orjson.loads(raw)


@pytest.mark.rule("CRASH-FS-13")
@given(st.binary(max_size=600))
def test_any_bytes_are_shown_escaped_and_cut(raw: bytes) -> None:
    """Bytes that are not canonical JSON are said in words: invalid UTF-8 as ``\\xNN``, cut
    at the limit with the length."""
    got = payload(raw)
    try:
        canonical = encode_json(orjson.loads(raw)) == raw
    except Exception:
        canonical = False
    if canonical and len(raw) <= shown.LIMIT:
        return
    assert isinstance(got, str) and got.startswith("<")
    got.encode("utf-8")
    assert len(got) < 6 * shown.LIMIT
    if len(raw) > shown.LIMIT:
        assert f"{len(raw):,} bytes" in got
    try:
        raw[: shown.LIMIT].decode("utf-8")
    except UnicodeDecodeError:
        assert "\\x" in got


@pytest.mark.rule("CRASH-FS-13")
@given(texts, st.integers(0, 50))
def test_text_escapes_lone_surrogates_and_says_its_length(value: str, limit: int) -> None:
    got = shown.text(value, limit)
    got.encode("utf-8")
    assert len(got) <= 6 * limit + 40
    if len(value) > limit:
        assert f"({len(value):,} characters)" in got


@pytest.mark.rule("CRASH-FS-13")
def test_a_huge_payload_is_cut_with_its_length_and_odd_ones_are_named() -> None:
    huge = b'"' + b"x" * (30 << 20) + b'"'
    assert payload(huge).startswith(f'<{len(huge):,} bytes: "xxx')
    assert len(payload(huge)) < 2 * shown.LIMIT
    assert payload(b'{"a": 1,,').startswith("<not JSON (unexpected character")
    assert payload(b'"\xff"') == '<not JSON (str is not valid UTF-8: surrogates not allowed: ' \
        'line 1 column 1 (char 0)): "\\xff">'  # fmt: skip
    assert payload(b'{"a":1.0}') == '<not canonical JSON: {"a":1.0}>'
    assert payload("text") == "<not bytes: str 'text'>"
    state = Snapshot((5,), (UsageRecord("u", b"[1]", None, False, None, 1),), (), (), [])  # type: ignore[arg-type]
    assert describe(state) == {
        "entries": ["<not an EntryRecord: int 5>"],
        "usage": [{"id": "u", "usage": "<not a JSON object: list [1]>"}],
        "values": {},
        "lists": {},
        "next_seq_hint": 1,
        "stats": "<not a Stats: list []>",
    }


@pytest.mark.rule("CRASH-FS-13")
def test_a_key_given_twice_is_shown_twice() -> None:
    """Two rows under one key (a store that lost its index) are both in the description."""
    row = ((None, "ns", "k"), ValueRecord(1, b"1"))
    values = describe(Snapshot((), (), (row, row), (), Stats()))["values"]
    assert values == {"-/ns/k": 1, "-/ns/k (2)": 1}


@pytest.mark.rule("CRASH-FS-13")
def test_writers_escape_what_orjson_cannot_write(tmp_path: Path) -> None:
    """A reproducer or a verdict holding a lone surrogate or an integer past 64 bits is
    written, with the odd parts escaped or in words."""
    record = {"backend": "b\ud800", "seed": 1, "error": "e\udcff", "n": 2**70, 3: RaisingRepr()}
    path = save_reproducer(tmp_path, record)
    back = orjson.loads(path.read_bytes())
    assert back["backend"] == "b\\ud800" and back["error"] == "e\\udcff"
    assert back["n"] == f"int {2**70}" and back["int 3"].startswith("RaisingRepr <RaisingRepr")
    assert orjson.loads(dumps([math.nan])) == [None]


@pytest.mark.rule("CRASH-FS-13")
def test_a_mismatch_message_stays_bounded() -> None:
    """The machine's messages quote what the backend returned, cut: 24 MiB come out as a few
    thousand characters, and a snapshot that is no Snapshot is said to be one."""
    big = ValueRecord(1, b'"' + b"x" * (24 << 20) + b'"')
    with pytest.raises(MismatchError) as raised:
        same("get_value", ("ok", None), ("ok", big))
    assert len(str(raised.value)) < 5 * shown.LIMIT * 4
    assert "characters)" in str(raised.value)
    model = Snapshot((), (), (), (), Stats())
    text = describe_difference("s", model, {"entries": 5})
    assert "snapshot() returned {'entries': 5}" in text
    text = describe_difference(
        "s", model, Snapshot((), (), (((None, "n", "k"), big),), (), Stats())
    )
    assert len(text) < 5 * shown.LIMIT * 4


# -- backends that read back garbage after a crash, explored in-process ---------------------


@pytest.mark.rule("CRASH-FS-13", "CRASH-FS-2", "CRASH-FS-6", "CRASH-FS-9")
@pytest.mark.parametrize("kind", KINDS)
def test_garbage_read_back_after_a_crash_fails_a_crash_rule_and_is_described(
    kind: str, tmp_path: Path
) -> None:
    """The file example whose Session reads back garbage once a torn line was cut off:
    crash exploration fails it under the state rules (the garbage is no state any prefix
    gives), each failure says what was read back, and each reproducer is written and read."""
    name, factory = load_factory(f"{GARBLED}:make_file_{kind}")
    explorer = GenericCrashExplorer(factory, name)
    _, _, records = explorer.explore_with_faults(1.0, 0)
    assert records, f"{kind}: the garbage was not found"
    assert {r["rule"] for r in records} <= {"CRASH-FS-2", "CRASH-FS-6", "CRASH-FS-9"}, records
    said = {
        "corrupt_json": "<not JSON (unexpected character",
        "wrong_types": "<not an EntryRecord: int 5>",
        "list_for_dict": "<not a Stats: list [1, 2]>",
        "huge": "<25,165,826 bytes: ",
        "invalid_utf8": "\\\\xff\\\\xfe\\\\x80 not UTF-8",
        "lone_surrogate": "e\\\\ud800",
    }[kind]
    for record in records:
        path = save_reproducer(tmp_path, record)
        text = path.read_text()
        assert len(text) < 400_000, f"{kind}: a reproducer of {len(text):,} characters"
        failure = CrashFailure.from_json(orjson.loads(text))
        failure.details().encode("utf-8")
    assert any(said in save_reproducer(tmp_path, r).read_text() for r in records), said
