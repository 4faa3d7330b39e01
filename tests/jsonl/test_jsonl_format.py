"""Format, durability and failure handling of the JSONL main log (REFERENCE §1)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import (
    OP_APPEND,
    BadRecord,
    check_record,
    entry_payload_json,
    fast_ops,
    index_transaction,
    record_op,
)
from scopecheck.machines.strategies import storable_float
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import CorruptError, StorageIOError, UsageError
from scopecheck.models.fork import TreeFork
from scopecheck.models.payload import encode_json
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
from scopecheck.tools.inspect_jsonl import inspect_session
from tests.jsonl.conftest import RepoFactory, tree

A = ephemeral_scope("op-A")


def main_lines(root: str, session: str = "s") -> list[bytes]:
    with open(os.path.join(root, f"{session}.jsonl"), "rb") as handle:
        return handle.read().splitlines()


@pytest.mark.rule("JSONL-1", "JSONL-3", "JSONL-4")
def test_header_and_write_shapes_follow_format_4(make_repo: RepoFactory, root: str) -> None:
    """Header keys, one line per transaction, object vs array, and record key names."""
    storage = make_repo().create("s")
    storage.commit([])  # writes nothing
    storage.commit([insert_entry("e1", None, "message", {"role": "user"})])
    storage.commit(
        [
            insert_usage(
                "u1", usage_value(input=2, cost_total=0.25), entry_id="e1", details={"k": 1}
            ),
            set_value(value("ns", "k"), [1, "x"]),
            delete_value(value("ns", "gone")),
            append_list(value_list("ns", "l"), {"a": None}, tag="mark"),
            delete_list(value_list("ns", "old")),
            retire_scope(A),
        ]
    )
    content = main_lines(root)
    assert len(content) == 3
    header = orjson.loads(content[0])
    assert list(header) == ["v", "kind", "id", "storageVersion", "createdAt", "cwd"]
    assert header["v"] == 4 and header["storageVersion"] == 1 and header["id"] == "s"
    entry = orjson.loads(content[1])
    assert entry == {
        "kind": "entry",
        "id": "e1",
        "parentId": None,
        "type": "message",
        "role": "user",
        "seq": 1,
        "timestamp": entry["timestamp"],
    }
    tx = orjson.loads(content[2])
    assert [r["seq"] for r in tx] == [2, 3, 4, 5, 6, 7]
    assert tx[0] == {
        "kind": "usage",
        "id": "u1",
        "usage": usage_value(input=2, cost_total=0.25),
        "entryId": "e1",
        "adjustment": False,
        "details": {"k": 1},
        "seq": 2,
    }  # no timestamp: upstream's usage row has none (WRITE-9)
    assert list(tx[0]) == ["kind", "id", "usage", "entryId", "adjustment", "details", "seq"]
    assert tx[1] == {
        "kind": "value",
        "op": "set",
        "seq": 3,
        "namespace": "ns",
        "key": "k",
        "value": [1, "x"],
    }
    assert tx[2] == {"kind": "value", "op": "delete", "seq": 4, "namespace": "ns", "key": "gone"}
    assert tx[3] == {
        "kind": "list",
        "op": "append",
        "seq": 5,
        "namespace": "ns",
        "key": "l",
        "value": {"a": None},
        "tag": "mark",
    }
    assert tx[4] == {"kind": "list", "op": "delete", "seq": 6, "namespace": "ns", "key": "old"}
    assert tx[5] == {"kind": "scope", "op": "retire", "seq": 7, "scopeId": "op-A"}


@pytest.mark.rule("JSONL-7")
def test_fast_indexer_recognises_every_shape_the_writer_produces(
    make_repo: RepoFactory, root: str
) -> None:
    """Open indexes each line with the inline recogniser and only falls back to the slow
    documented checks for lines it does not recognise (JSONL-7: open speed).  Every record
    shape the writer produces, in the main log and in a sidecar, one write per line and several,
    must take the fast path, in both the full and the lean (fork) form -- else open is slower
    for no reason while every result stays the same."""
    storage = make_repo().create("s")
    storage.commit([insert_entry("e1", None, "message", {"role": "user"})])
    storage.commit([insert_entry("e2", "e1", "note")])
    storage.commit([insert_usage("u1", usage_value(input=2), entry_id="e1", details={"k": 1})])
    storage.commit([insert_usage("u2", usage_value(input=1), adjustment=True)])
    writes = [
        set_value(value("ns", "k"), [1, "x"]),
        delete_value(value("ns", "gone")),
        append_list(value_list("ns", "l"), {"a": None}, tag="mark"),
        append_list(value_list("ns", "l"), 3),
        delete_list(value_list("ns", "old")),
    ]
    for write in writes:
        storage.commit([write])
    storage.commit(writes)
    scoped = [
        set_value(value("ns", "k", scope=A), 1),
        delete_value(value("ns", "gone", scope=A)),
        append_list(value_list("ns", "l", scope=A), 2, tag="t"),
        append_list(value_list("ns", "l", scope=A), 3),
        delete_list(value_list("ns", "old", scope=A)),
    ]
    for write in scoped:
        storage.commit([write])
    storage.commit(scoped)
    main = os.path.join(root, "s.jsonl")
    with open(session_paths.sidecar_path(main, A.id), "rb") as handle:
        sidecar = handle.read().splitlines()[1:]
    storage.commit([retire_scope(A)])
    storage.close()
    files = [(main_lines(root)[1:], None), (sidecar, A.id)]
    assert [len(lines) for lines, _ in files] == [4 + len(writes) + 1 + 1, len(scoped) + 1]
    for lines, scope in files:
        for line in lines:
            obj = orjson.loads(line)
            records, where = ((obj,), -1) if type(obj) is dict else (obj, 0)
            for lean in (False, True):
                fast = fast_ops(records, line, where, scope, lean)
                assert fast is not None, f"fast path refused a writer's line {line!r} ({lean=})"


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize(
    "record",
    [
        {"kind": "list", "op": "append", "seq": 1, "namespace": "n", "key": "k", "value": 1,
         "tag": ""},
        {"kind": "bogus", "op": "retire", "seq": 1, "scopeId": "op-A"},
        {"kind": "scope", "op": "retire", "seq": 1, "scopeId": "op-A", "extra": 1},
        {"kind": "scope", "op": "delete", "seq": 1, "scopeId": "op-A"},
    ],
    ids=["empty-tag", "unknown-kind-shaped-as-retire", "retire-extra-key", "scope-not-retire"],
)  # fmt: skip
def test_fast_indexer_rejects_near_misses_of_the_writer_shapes(record: dict[str, Any]) -> None:
    """Records one detail away from a writer shape: the inline recogniser must not accept what
    ``check_record`` rejects (JSONL-6), alone or inside a transaction array."""
    with pytest.raises(BadRecord):
        check_record(record, None)
    line = orjson.dumps(record)
    with pytest.raises(BadRecord):
        index_transaction(orjson.loads(line), line, None)
    pair = [
        {"kind": "value", "op": "delete", "seq": 1, "namespace": "n", "key": "k"},
        dict(record, seq=2),
    ]
    line = orjson.dumps(pair)
    for lean in (False, True):
        with pytest.raises(BadRecord):
            index_transaction(orjson.loads(line), line, None, lean=lean)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53 - 1), 2**53 - 1)  # WRITE-8
    | st.floats(allow_nan=False, allow_infinity=False).filter(storable_float)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.rule("JSONL-4")
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=json_values, extra=st.dictionaries(st.text(), json_values, max_size=3))
def test_payloads_read_back_byte_identical_after_reopen(
    make_repo: RepoFactory, root: str, payload: Any, extra: dict[str, Any]
) -> None:
    """Values, list elements and entry payloads re-encode to exactly the committed bytes."""
    extra = {
        k: v
        for k, v in extra.items()
        if k not in {"kind", "id", "parentId", "type", "seq", "timestamp"}
    }
    repo = make_repo()
    name = f"p{len(repo.list())}"
    storage = repo.create(name)
    committed = storage.commit(
        [
            set_value(value("v", "k", A), payload),
            append_list(value_list("l", "k", A), payload),
        ]
    )
    storage.commit([insert_entry("e", None, "t", extra)])
    storage.close()
    reopened = make_repo().open(name)
    record = reopened.get_value(value("v", "k", A))
    assert record is not None and record.value_json == committed[0].write.value_json  # type: ignore[attr-defined]
    element = reopened.read_list(value_list("l", "k", A))[0]
    assert element.value_json == committed[1].write.element_json  # type: ignore[attr-defined]
    entry = reopened.get_entry("e")
    frozen = encode_json(extra)  # numbers spelled as JavaScript writes them (JSONL-25)
    assert entry is not None and entry.payload_json == frozen
    line = orjson.loads(main_lines(root, name)[1])
    assert entry_payload_json(line) == frozen
    reopened.close()


@pytest.mark.rule("JSONL-18")
def test_torn_main_tail_is_dropped_and_republished_with_next_seq(
    make_repo: RepoFactory, root: str
) -> None:
    """An unterminated final main line is dropped; the prefix is rewritten with nextSeq."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    storage.commit([set_value(value("v", "k", A), 2)])  # seq 2 in the sidecar
    expected = storage.snapshot()
    path = os.path.join(root, "s.jsonl")
    with open(path, "ab") as handle:
        handle.write(b'{"kind":"value","op":"set","seq":3,"namespace":"v","key":"k","value":3}')
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    content = main_lines(root)
    assert orjson.loads(content[0])["nextSeq"] == 3
    assert len(content) == 2
    assert not os.path.exists(path + ".tmp")
    assert reopened.commit([set_value(value("v", "k"), 4)])[0].seq == 3


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize("where", ["interior", "last"])
def test_complete_malformed_main_line_fails_open_with_line_and_touches_nothing(
    make_repo: RepoFactory, root: str, where: str
) -> None:
    """A malformed complete line, interior or last, fails open naming its 1-based line."""
    storage = make_repo().create("s")
    for n in range(3):
        storage.commit([set_value(value("v", "k"), n)])
    storage.close()
    path = os.path.join(root, "s.jsonl")
    content = main_lines(root)
    index = 2 if where == "interior" else len(content) - 1
    content[index] = b'{"kind":"nope","seq":99}'
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    before = tree(root)
    with pytest.raises(CorruptError) as info:
        make_repo().open("s")
    assert info.value.code == "corrupt"
    assert info.value.details == {"file": path, "line": index + 1}
    assert tree(root) == before


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize("content", [b"", b'{"v":4,"kind":"header"', b"[1,2]\n"])
def test_missing_or_unterminated_header_fails_open(
    make_repo: RepoFactory, root: str, content: bytes
) -> None:
    """An empty file, a torn header or a non-header first line is corrupt at line 1."""
    repo = make_repo()
    with open(os.path.join(root, "s.jsonl"), "wb") as handle:
        handle.write(content)
    with pytest.raises(CorruptError) as info:
        repo.open("s")
    assert info.value.details["line"] == 1


@pytest.mark.rule("JSONL-7")
def test_duplicate_seq_across_files_fails_open(make_repo: RepoFactory, root: str) -> None:
    """A sidecar transaction reusing a main seq is corruption naming both places."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    storage.commit([set_value(value("v", "k", A), 2)])
    storage.close()
    side = os.path.join(root, "s.jsonl.scopes", "scope-op-A.scope")
    content = Path(side).read_bytes().replace(b'"seq":2', b'"seq":1')
    with open(side, "wb") as handle:
        handle.write(content)
    with pytest.raises(CorruptError, match="is held by both") as info:
        make_repo().open("s")
    main = os.path.join(root, "s.jsonl")
    assert info.value.details == {"file": side, "line": 2}  # the later of the two places
    assert f"{main}:2" in str(info.value)  # and the earlier one


class AppendFault:
    """Fail the n-th append after writing part of it; optionally make truncate fail too."""

    def __init__(self, *, partial: int, truncate_fails: bool = False, fsync_fails: bool = False):
        self.partial = partial
        self.truncate_fails = truncate_fails
        self.fsync_fails = fsync_fails
        self.armed = False

    def __call__(self, op: str, path: str) -> Any:
        if not self.armed:
            return None
        if op == "append" and not self.fsync_fails:
            return (OSError(errno.ENOSPC, "injected: disk full"), self.partial)
        if op == "fsync" and self.fsync_fails:
            return OSError(errno.EIO, "injected: fsync failed")
        if op == "truncate" and self.truncate_fails:
            return OSError(errno.EIO, "injected: truncate failed")
        return None


@pytest.mark.rule("JSONL-12")
def test_failed_append_is_cut_back_so_the_next_append_starts_a_clean_line(
    make_repo: RepoFactory, root: str
) -> None:
    """A partial append is truncated away; the commit fails and later commits reuse its seq."""
    fault = AppendFault(partial=10)
    storage = make_repo(fault=fault).create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    before = main_lines(root)
    fault.armed = True
    with pytest.raises(StorageIOError) as info:
        storage.commit([set_value(value("v", "k"), 2)])
    assert info.value.code == "io_error" and info.value.details["fs_code"] == "no_space"
    assert main_lines(root) == before
    assert storage.get_value(value("v", "k")).value == 1  # type: ignore[union-attr]
    fault.armed = False
    assert storage.commit([set_value(value("v", "k"), 3)])[0].seq == 2
    expected = storage.snapshot()
    storage.close()
    assert make_repo().open("s").snapshot() == expected


@pytest.mark.rule("JSONL-12")
@pytest.mark.parametrize("kind", ["truncate_fails", "fsync_fails"])
def test_append_that_cannot_be_undone_makes_the_handle_unusable(
    make_repo: RepoFactory, root: str, kind: str
) -> None:
    """When the partial line cannot be removed (or fsync failed) later commits get
    ``unusable`` and reopen sees a consistent log."""
    fault = AppendFault(partial=10, **{kind: True})
    storage = make_repo(fault=fault).create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    fault.armed = True
    with pytest.raises(StorageIOError) as info:
        storage.commit([set_value(value("v", "k"), 2)])
    assert info.value.code == "io_error"
    fault.armed = False
    with pytest.raises(StorageIOError) as info:
        storage.commit([set_value(value("v", "k"), 3)])
    assert info.value.code == "unusable"
    assert storage.get_value(value("v", "k")).value == 1  # type: ignore[union-attr]
    storage.close()
    reopened = make_repo().open("s")  # the partial line, if left, is a torn tail
    assert reopened.get_value(value("v", "k")).value == 1  # type: ignore[union-attr]


@pytest.mark.rule("JSONL-10", "JSONL-11")
def test_durability_policy_fsyncs_before_acknowledging(make_repo: RepoFactory, root: str) -> None:
    """Create publishes via temp+fsync+rename+dir fsync; each append is fsynced; a sidecar is
    created the same way inside .scopes; a retirement unlink is followed by a dir fsync."""
    repo = make_repo(tracing=True)
    fs = repo.fs
    storage = repo.create("s")
    main = os.path.join(root, "s.jsonl")
    scopes = main + ".scopes"
    side = os.path.join(scopes, "scope-op-A.scope")
    ops = [op for op in fs.trace if op[0] != "remove"]  # type: ignore[attr-defined]
    assert ops[-4:] == [
        ("write", main + ".tmp"),
        ("fsync_file", main + ".tmp"),
        ("rename", main),
        ("fsync_dir", root),
    ]
    fs.trace.clear()  # type: ignore[attr-defined]
    storage.commit([set_value(value("v", "k"), 1)])
    assert fs.trace == [("open_append", main), ("append", main), ("fsync", main)]  # type: ignore[attr-defined]
    fs.trace.clear()  # type: ignore[attr-defined]
    storage.commit([set_value(value("v", "k", A), 1)])
    assert fs.trace == [  # type: ignore[attr-defined]
        ("create_dir", scopes),
        ("fsync_dir", root),
        ("write", side + ".tmp"),
        ("fsync_file", side + ".tmp"),
        ("rename", side),
        ("fsync_dir", scopes),
        ("open_append", side),
        ("append", side),
        ("fsync", side),
    ]
    fs.trace.clear()  # type: ignore[attr-defined]
    storage.commit([retire_scope(A)])
    assert fs.trace == [  # type: ignore[attr-defined]
        ("append", main),
        ("fsync", main),
        ("close", side),
        ("unlink", side),
        ("fsync_dir", scopes),
    ]


HOSTILE = [
    "..",
    ".",
    "/",
    "%2F",
    "\\",
    "../../etc/passwd",
    "a/../../b",
    "..%2F..",
    "scope-..",
    "..\\..",
    "x" * 60,
    "é/ü",
    ".jsonl",
    ".scopes",
    "~",
    "*",
    "'()!",
]


@pytest.mark.rule("JSONL-14")
@pytest.mark.parametrize("name", ["..", ".", "a/b", "../x", "/etc"])
def test_the_last_path_guard_refuses_names_that_leave_the_directory(name: str) -> None:
    """Encoded names never leave their directory; the guard under every path join refuses
    one that would anyway, as an invalid session id (a bug upstream must not write outside
    the root)."""
    with pytest.raises(UsageError) as info:
        session_paths.child_path("/root/sessions", name)
    assert info.value.code == "invalid_session_id"
    assert session_paths.child_path("/root/sessions", "s.jsonl") == "/root/sessions/s.jsonl"


def _session_with_a_foreign_header(make_repo: RepoFactory, root: str) -> str:
    """Session ``s`` with one commit whose header then names session ``other``; its path."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("a", "k"), 1)])
    storage.close()
    content = main_lines(root)
    header = orjson.loads(content[0])
    header["id"] = "other"
    content[0] = orjson.dumps(header)
    path = os.path.join(root, "s.jsonl")
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    return path


@pytest.mark.rule("JSONL-6", "FORK-14")
def test_fork_of_a_closed_source_with_a_foreign_header_is_corrupt_at_line_1(
    make_repo: RepoFactory, root: str
) -> None:
    """The fork checks the source's header as open does: a header naming another session is
    corruption at line 1, and nothing is published."""
    _session_with_a_foreign_header(make_repo, root)
    with pytest.raises(CorruptError) as info:
        make_repo().fork("s", TreeFork(id="d"))
    assert info.value.details["line"] == 1
    assert not os.path.exists(os.path.join(root, "d.jsonl"))


@pytest.mark.rule("JSONL-6")
def test_inspector_reports_a_foreign_header_as_a_corrupt_line(
    make_repo: RepoFactory, root: str
) -> None:
    """``scopecheck inspect`` names the damage open fails on: a header naming another session
    is a *corrupt* line 1 of the main file (not a torn tail)."""
    path = _session_with_a_foreign_header(make_repo, root)
    report = inspect_session(path)
    problems = [(p["kind"], p["file"], p["line"]) for p in report["problems"]]
    assert problems == [("corrupt", path, 1)]
    assert report["open"].startswith("fails: corrupt")


@pytest.mark.rule("JSONL-4")
def test_record_op_of_a_tagged_append_keeps_seq_value_and_tag() -> None:
    """The slow path's (and the legacy import's) replay operation of a list append carries
    the element exactly: seq, value bytes and tag."""
    rec = {"kind": "list", "op": "append", "seq": 9, "namespace": "n", "key": "k",
           "value": {"a": [1]}, "tag": "mark"}  # fmt: skip
    code, address, element = record_op(rec, "op-A", b"", -1)
    assert code == OP_APPEND and address == ("op-A", "n", "k")
    assert (element.seq, orjson.loads(element.value_json), element.tag) == (9, {"a": [1]}, "mark")
    untagged = record_op({k: v for k, v in rec.items() if k != "tag"}, None, b"", -1)
    assert untagged[2].tag is None


@pytest.mark.rule("JSONL-14")
@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_session_and_scope_ids_stay_inside_the_root(
    make_repo: RepoFactory, root: str, hostile: str
) -> None:
    """Every file a hostile id leads to is a direct child of the root or of its .scopes dir,
    and the id round-trips through list(), open() and delete()."""
    repo = make_repo()
    outside_before = set(os.listdir(os.path.dirname(root)))
    storage = repo.create(hostile)
    scope = ephemeral_scope(hostile)
    storage.commit([set_value(value("v", "k", scope), 1)])
    storage.commit([set_value(value("v", "k", ephemeral_scope("..")), 1)])
    storage.close()
    for path in tree(root):
        parts = path.split(os.sep)
        assert len(parts) == 1 or (len(parts) == 2 and parts[0].endswith(".jsonl.scopes"))
        assert ".." not in parts and "." not in parts
    assert set(os.listdir(os.path.dirname(root))) == outside_before
    assert repo.list() == [hostile]
    reopened = repo.open(hostile)
    assert reopened.get_value(value("v", "k", scope)).value == 1  # type: ignore[union-attr]
    reopened.close()
    repo.delete(hostile)
    assert tree(root) == {}


@pytest.mark.rule("JSONL-14")
@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", "x" * 300, "/" * 80])
def test_unusable_session_ids_are_refused_before_any_file_access(
    make_repo: RepoFactory, root: str, bad: str
) -> None:
    """Empty, NUL, lone-surrogate and over-long ids get invalid_session_id and touch nothing."""
    repo = make_repo(tracing=True)
    repo.fs.trace.clear()  # type: ignore[attr-defined]
    for call in (repo.create, repo.open, repo.delete):
        with pytest.raises(Exception) as info:
            call(bad)
        assert getattr(info.value, "code", None) == "invalid_session_id"
    assert repo.fs.trace == []  # type: ignore[attr-defined]


@pytest.mark.rule("JSONL-14")
def test_sidecar_names_decode_only_canonical_spellings() -> None:
    """Only ``scope-<canonical encodeURIComponent>.scope`` names a sidecar; temp files and
    non-canonical spellings are ignored."""
    assert session_paths.decode_sidecar_name("scope-a%2Fb.scope") == "a/b"
    assert session_paths.decode_sidecar_name("scope-a%2fb.scope") is None
    assert session_paths.decode_sidecar_name("scope-..scope") == "."  # a name, never a path segment
    assert session_paths.decode_sidecar_name("scope-...scope") == ".."
    assert session_paths.decode_sidecar_name("scope-x.scope.tmp") is None
    assert session_paths.decode_sidecar_name("scope-%ZZ.scope") is None
    assert session_paths.decode_sidecar_name("scope-%ED%A0%80.scope") is None  # lone surrogate
    assert session_paths.decode_main_name("a%2Fb.jsonl") == "a/b"
    assert session_paths.decode_main_name(".jsonl") is None


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize(
    ("line", "change"),
    [
        (2, {"op": "put"}),  # a value record of an op no writer makes
        (2, {"key": 7}),
        (3, {"parentId": None}),  # an entry record without parentId (null is a root, absent is bad)
        (3, {"parentId": 7}),
    ],
    ids=["value-unknown-op", "value-key-not-str", "entry-without-parent", "entry-parent-not-str"],
)
def test_records_of_the_wrong_shape_fail_open_with_their_line(
    make_repo: RepoFactory, root: str, line: int, change: dict[str, Any]
) -> None:
    """A record missing a key or holding a mistyped one is corruption at that line, not a crash
    and not a silently different record (an unknown extra key upstream's reader ignores is
    read and noted: ``tests/jsonl/test_noncanonical_lines.py``)."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    storage.commit([insert_entry("e1", None, "message", {"role": "user"})])
    storage.close()
    path = os.path.join(root, "s.jsonl")
    content = main_lines(root)
    record = orjson.loads(content[line - 1])
    for key, bad in change.items():
        if key == "parentId" and bad is None:
            del record[key]
        else:
            record[key] = bad
    content[line - 1] = orjson.dumps(record)
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    with pytest.raises(CorruptError) as info:
        make_repo().open("s")
    assert info.value.details == {"file": path, "line": line}
