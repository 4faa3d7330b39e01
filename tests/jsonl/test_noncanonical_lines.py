"""Lines no writer produces but upstream's reader opens (JSONL-23, JSONL-24), and the
mixed-writer hazard (JSONL-27).

Each hand-made main-log form opens with the state upstream reads from it, leaves every byte on
disk as it was, and ``scopecheck inspect`` notes it with its line; the same form in a sidecar
(scopecheck's own format, with no other writer) stays corrupt.  A header keeps every field,
known or not, when open rewrites the file to drop a torn tail.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.codec import encode_scope_header
from scopecheck.models.addresses import value
from scopecheck.models.errors import CorruptError
from scopecheck.models.records import ValueRecord
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import set_value
from scopecheck.tools.inspect_jsonl import inspect_session, render
from tests.jsonl.conftest import tree

HEADER = {"v": 4, "kind": "header", "id": "s", "storageVersion": 1, "createdAt": 1, "cwd": "/"}


def rec(seq: int, key: str = "k", val: object = 1, **extra: object) -> dict[str, object]:
    return {"kind": "value", "op": "set", "seq": seq, "namespace": "n", "key": key, "value": val,
            **extra}  # fmt: skip


def usage_row(seq: int, **extra: object) -> dict[str, object]:
    usage = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3,
             "cost": {"input": 0.5, "output": 0.25, "cacheRead": 0, "cacheWrite": 0,
                      "total": 0.75}}  # fmt: skip
    return {"kind": "usage", "seq": seq, "id": f"u{seq}", "usage": usage, "adjustment": False,
            **extra}  # fmt: skip


#: form → (main-log lines after the header, what the note says, (key, seq, value) read back)
FORMS: dict[str, tuple[list[object], str, tuple[str, int, bytes] | None]] = {
    "one-element array": ([[rec(1)]], "a transaction array of 1 write", ("k", 1, b"1")),
    "empty array": ([rec(1), []], "a transaction array of 0 writes", ("k", 1, b"1")),
    "gap inside a transaction": (
        [[rec(1, "a"), rec(3, "k", 2)]],
        "a seq gap inside one transaction ([1, 3])",
        ("k", 3, b"2"),
    ),
    "unknown key on a value record": (
        [rec(1, extra_field=True)],
        "value set record with unknown keys ['extra_field']",
        ("k", 1, b"1"),
    ),
    "unknown key on a list record": (
        [
            {
                "kind": "list",
                "op": "append",
                "seq": 1,
                "namespace": "n",
                "key": "l",
                "value": 0,
                "by": "someone",
            }
        ],
        "list append record with unknown keys ['by']",
        None,
    ),
    "unknown key on a usage record": (
        [usage_row(1, timestamp=5)],
        "usage record with unknown keys ['timestamp']",
        None,
    ),
    "unknown header key": (
        [],
        "header keys upstream does not define, kept as they are: ['tool']",
        None,
    ),
}


def write_main(root: str, lines: list[object], header: dict[str, object] = HEADER) -> str:
    path = os.path.join(root, "s.jsonl")
    os.makedirs(root, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(orjson.dumps(header) + b"\n")
        for line in lines:
            handle.write(orjson.dumps(line) + b"\n")
    return path


@pytest.mark.rule("JSONL-23", "JSONL-24")
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_hand_made_main_log_line_opens_and_is_noted(root: str, form: str) -> None:
    lines, note, read_back = FORMS[form]
    header = dict(HEADER, tool="x") if form == "unknown header key" else HEADER
    main = write_main(root, lines, header)
    before = tree(root)
    storage = JsonlRepository(root).open("s")
    if read_back is not None:
        key, seq, raw = read_back
        assert storage.get_value(value("n", key)) == ValueRecord(seq, raw)
    if form == "unknown key on a list record":
        [(_, elements)] = storage.snapshot().lists
        assert [e.value_json for e in elements] == [b"0"]
    if form == "unknown key on a usage record":
        assert [row.id for row in storage.snapshot().usage] == ["u1"]
    storage.close()
    assert tree(root) == before  # reading a non-canonical form never rewrites it
    report = inspect_session(main)
    assert report["open"] == "succeeds" and report["problems"] == []
    line = 1 if form == "unknown header key" else len(lines) + 1
    assert report["notes"] == [{"file": main, "line": line, "message": note}]
    assert f"line {line:>5}  NOTE" in render(report)
    assert tree(root) == before


@pytest.mark.rule("JSONL-23")
@pytest.mark.parametrize(
    "line",
    [
        [rec(2, scopeId="op")],
        [],
        [rec(2, scopeId="op"), rec(4, "j", scopeId="op")],
        rec(2, scopeId="op", extra_field=True),
    ],
    ids=["one-element array", "empty array", "gap", "unknown key"],
)
def test_the_same_forms_in_a_sidecar_stay_corrupt(root: str, line: object) -> None:
    """A sidecar is scopecheck's own file; no other writer makes one, so nothing in it is
    excused (000 §6.3: malformed records fail open)."""
    write_main(root, [rec(1)])
    scopes = os.path.join(root, "s.jsonl.scopes")
    os.mkdir(scopes)
    with open(os.path.join(scopes, "scope-op.scope"), "wb") as handle:
        handle.write(encode_scope_header("s", "op") + b"\n" + orjson.dumps(line) + b"\n")
    before = tree(root)
    with pytest.raises(CorruptError):
        JsonlRepository(root).open("s")
    assert tree(root) == before
    assert inspect_session(root)["open"].startswith("fails: ")


@pytest.mark.rule("JSONL-24")
def test_every_header_field_survives_the_torn_tail_rewrite(root: str) -> None:
    header = dict(
        HEADER,
        parentSessionId="p",
        legacyParentSessionPath="/old/2024-01-01T00-00-00-000Z_abc.jsonl",
        nextSeq=7,
        tool={"name": "x", "v": [1, 2]},
    )
    main = write_main(root, [rec(1)], header)
    first_line = Path(main).read_bytes().split(b"\n")[0]
    with open(main, "ab") as handle:
        handle.write(b'{"kind":"value","op":"se')  # a torn tail: open republishes the file
    storage = JsonlRepository(root).open("s")
    storage.commit([set_value(value("n", "j"), 2)])
    assert storage.get_value(value("n", "j")) == ValueRecord(7, b"2")  # header nextSeq holds
    assert storage.parent_session_id == "p"
    storage.close()
    lines = Path(main).read_bytes().split(b"\n")
    assert lines[0] == first_line
    assert lines[1:] == [orjson.dumps(rec(1)), orjson.dumps(rec(7, "j", 2)), b""]


@pytest.mark.rule("JSONL-24")
@pytest.mark.parametrize(
    "field", [{"nextSeq": "7"}, {"parentSessionId": 3}, {"legacyParentSessionPath": []}]
)
def test_a_header_field_of_the_wrong_type_is_corrupt(root: str, field: dict[str, object]) -> None:
    write_main(root, [rec(1)], dict(HEADER, **field))
    before = tree(root)
    with pytest.raises(CorruptError):
        JsonlRepository(root).open("s")
    assert tree(root) == before


def pre_scope_append(main: str, record: dict[str, object]) -> None:
    """Append as a writer that predates sidecars does: its next seq is one above the highest
    seq it sees -- the main log's records and the header's ``nextSeq`` -- and nothing else."""
    seen = [0]
    with open(main, "rb") as handle:
        for raw in handle:
            obj = orjson.loads(raw)
            for item in obj if isinstance(obj, list) else [obj]:
                seen.append(item.get("seq", 0))
                seen.append(item.get("nextSeq", 1) - 1 if item.get("kind") == "header" else 0)
    with open(main, "ab") as handle:
        handle.write(orjson.dumps(dict(record, seq=max(seen) + 1)) + b"\n")


@pytest.mark.rule("JSONL-27")
def test_the_mixed_writer_hazard_is_named_with_both_files_lines_and_seq(root: str) -> None:
    """The highest seq sits in a live sidecar; a pre-scope writer appends to the main log and
    reuses it.  Open refuses, nothing on disk changes, and inspect says what happened."""
    repo = JsonlRepository(root)
    storage = repo.create("s")
    storage.commit([set_value(value("n", "k"), 1)])
    storage.commit([set_value(value("n", "k", ephemeral_scope("op")), 2)])  # seq 2, sidecar
    storage.close()
    main = repo.path_of("s")
    pre_scope_append(main, rec(0, "k2", 3))  # lands as seq 2 on main-log line 3
    before = tree(root)
    with pytest.raises(CorruptError) as info:
        JsonlRepository(root).open("s")
    assert "JSONL-27" in str(info.value)
    report = inspect_session(main)
    assert tree(root) == before
    sidecar = os.path.join(root, "s.jsonl.scopes", "scope-op.scope")
    [problem] = [p for p in report["problems"] if p["kind"] == "corrupt"]
    assert (problem["file"], problem["line"]) == (sidecar, 2)
    assert problem["message"].startswith(f"seq 2 is held by both {sidecar}:2 and {main}:3: ")
    assert "a writer that knows nothing of sidecars" in problem["message"]
    assert "(JSONL-27)" in problem["message"]
    assert "line     2  CORRUPT: seq 2 is held by both" in render(report)
