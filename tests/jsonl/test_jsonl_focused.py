"""The JSONL focused tests of seed 000 §9.3, one test (or more) per bullet, named after it.

One bullet is a gap recorded in ``spec/rules/jsonl.toml``: forks (JSONL-20); the legacy v3
bullet (JSONL-19) is covered by ``tests/legacy/``.  "Crash" here means: stop using a handle
without closing it and open a fresh repository over the same directory, after shaping the
files the way the crash would have left them (a torn line, a sidecar that survived its unlink).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson
import pytest

from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.load import load_session
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import CorruptError, StorageIOError
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    append_list,
    delete_list,
    insert_entry,
    retire_scope,
    set_value,
)
from tests.jsonl.conftest import RepoFactory, sidecar_files, tree, unlink_fails

A = ephemeral_scope("op-A")
B = ephemeral_scope("op-B")


def lines(path: str) -> list[bytes]:
    with open(path, "rb") as handle:
        return handle.read().splitlines()


def sidecar(root: str, session: str, scope_id: str) -> str:
    return os.path.join(root, f"{session}.jsonl.scopes", f"scope-{scope_id}.scope")


@pytest.mark.rule("JSONL-2", "JSONL-3")
def test_first_scoped_write_creates_exactly_one_valid_sidecar_and_no_main_value_record(
    make_repo: RepoFactory, root: str
) -> None:
    """The first scoped write creates one sidecar with the exact header; main gets nothing."""
    repo = make_repo()
    storage = repo.create("s")
    main_before = lines(os.path.join(root, "s.jsonl"))
    storage.commit([set_value(value("ns", "k", A), {"x": 1})])
    assert sidecar_files(root) == ["s.jsonl.scopes/scope-op-A.scope"]
    side = lines(sidecar(root, "s", "op-A"))
    assert side[0] == (
        b'{"v":4,"kind":"scope_header","sessionId":"s","scopeId":"op-A","storageVersion":1}'
    )
    assert orjson.loads(side[1]) == {
        "kind": "value",
        "op": "set",
        "seq": 1,
        "namespace": "ns",
        "key": "k",
        "value": {"x": 1},
        "scopeId": "op-A",
    }
    assert lines(os.path.join(root, "s.jsonl")) == main_before
    assert not [p for p in tree(root) if p.endswith(".tmp")]


@pytest.mark.rule("JSONL-3")
def test_several_writes_in_one_scoped_transaction_remain_one_physical_sidecar_line(
    make_repo: RepoFactory, root: str
) -> None:
    """Three scoped writes in one commit are one array line in the sidecar."""
    storage = make_repo().create("s")
    storage.commit(
        [
            set_value(value("ns", "k", A), 1),
            append_list(value_list("ns", "l", A), "a", tag="t"),
            append_list(value_list("ns", "l", A), "b"),
        ]
    )
    side = lines(sidecar(root, "s", "op-A"))
    assert len(side) == 2
    records = orjson.loads(side[1])
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert records[1]["tag"] == "t" and "tag" not in records[2]


@pytest.mark.rule("JSONL-7", "JSONL-22")
def test_main_and_multiple_sidecars_replay_in_global_sequence_order(
    make_repo: RepoFactory,
) -> None:
    """Interleaved main/A/B commits reopen to the same state with the same seqs."""
    repo = make_repo()
    storage = repo.create("s")
    storage.commit([insert_entry("e1", None, "message", {"n": 1})])
    storage.commit([append_list(value_list("f", "x", A), 1)])
    storage.commit([append_list(value_list("f", "x", B), 2)])
    storage.commit([set_value(value("v", "k"), "main")])
    storage.commit([append_list(value_list("f", "x", A), 3), set_value(value("v", "k", A), 4)])
    storage.commit([set_value(value("v", "k", B), 5)])
    before = storage.snapshot()
    storage.close()
    reopened = make_repo().open("s")
    assert reopened.snapshot() == before
    assert [e.seq for e in reopened.read_list(value_list("f", "x", A))] == [2, 5]
    assert reopened.commit([set_value(value("v", "z"), 0)])[0].seq == 8


@pytest.mark.rule("JSONL-8")
def test_header_next_seq_and_all_complete_sidecar_records_contribute_to_reopen_high_water(
    make_repo: RepoFactory, root: str
) -> None:
    """The first commit after reopen is above both the header nextSeq and every sidecar seq."""
    repo = make_repo()
    storage = repo.create("s")
    for n in range(3):
        storage.commit([set_value(value("v", str(n), A), n)])  # seqs 1..3 only in the sidecar
    storage.close()
    assert make_repo().open("s").commit([set_value(value("v", "k"), 0)])[0].seq == 4
    # A rewritten header with nextSeq above every record also counts.
    main = os.path.join(root, "s.jsonl")
    content = lines(main)
    header = orjson.loads(content[0])
    header["nextSeq"] = 50
    with open(main, "wb") as handle:
        handle.write(b"\n".join([orjson.dumps(header), *content[1:]]) + b"\n")
    repo2 = make_repo()
    assert repo2.open("s").commit([set_value(value("v", "k"), 1)])[0].seq == 50


@pytest.mark.rule("JSONL-18")
def test_torn_sidecar_final_transaction_is_discarded_wholly_and_repaired(
    make_repo: RepoFactory, root: str
) -> None:
    """A torn two-write sidecar line is dropped as a whole and the file republished."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    expected = storage.snapshot()
    path = sidecar(root, "s", "op-A")
    torn_line = orjson.dumps(
        [
            {
                "kind": "value",
                "op": "set",
                "seq": 2,
                "namespace": "v",
                "key": "k",
                "value": 2,
                "scopeId": "op-A",
            },
            {
                "kind": "value",
                "op": "set",
                "seq": 3,
                "namespace": "v",
                "key": "j",
                "value": 3,
                "scopeId": "op-A",
            },
        ]
    )
    with open(path, "ab") as handle:
        handle.write(torn_line[:-7])  # crash mid-append
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    with open(path, "rb") as handle:
        assert handle.read().endswith(b"\n")
    assert len(lines(path)) == 2
    assert reopened.commit([set_value(value("v", "k", A), 9)])[0].seq == 2  # torn seq reused


@pytest.mark.rule("JSONL-6", "JSONL-16")
def test_malformed_interior_active_sidecar_fails_open(make_repo: RepoFactory, root: str) -> None:
    """A complete malformed line inside a live sidecar fails open with file and line."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.commit([set_value(value("v", "k", A), 2)])
    storage.close()
    path = sidecar(root, "s", "op-A")
    content = lines(path)
    content[1] = b'{"kind":"value",'
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    before = tree(root)
    with pytest.raises(CorruptError) as info:
        make_repo().open("s")
    assert info.value.code == "corrupt"
    assert info.value.details == {"file": path, "line": 2}
    assert tree(root) == before


@pytest.mark.rule("JSONL-5")
def test_sidecar_header_identity_mismatch_fails_open(make_repo: RepoFactory, root: str) -> None:
    """A sidecar whose header names another session or scope is corruption, not data."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.close()
    path = sidecar(root, "s", "op-A")
    for field, wrong in (("sessionId", "other"), ("scopeId", "op-B")):
        content = lines(path)
        header = orjson.loads(content[0])
        original = header[field]
        header[field] = wrong
        with open(path, "wb") as handle:
            handle.write(b"\n".join([orjson.dumps(header), *content[1:]]) + b"\n")
        with pytest.raises(CorruptError) as info:
            make_repo().open("s")
        assert info.value.details["line"] == 1 and wrong in str(info.value)
        header[field] = original
        with open(path, "wb") as handle:
            handle.write(b"\n".join([orjson.dumps(header), *content[1:]]) + b"\n")
    make_repo().open("s").close()


@pytest.mark.rule("JSONL-5")
def test_main_header_identity_mismatch_fails_open(make_repo: RepoFactory, root: str) -> None:
    """A main log whose header names another session fails open."""
    make_repo().create("s").close()
    os.rename(os.path.join(root, "s.jsonl"), os.path.join(root, "t.jsonl"))
    with pytest.raises(CorruptError) as info:
        make_repo().open("t")
    assert info.value.details["line"] == 1


@pytest.mark.rule("JSONL-9", "JSONL-18")
def test_crash_before_retirement_leaves_scoped_data_live(make_repo: RepoFactory, root: str) -> None:
    """A retirement torn off the main log never happened: the scope reopens live."""
    storage = make_repo().create("s")
    storage.commit([append_list(value_list("f", "x", A), "frame")])
    expected = storage.snapshot()
    with open(os.path.join(root, "s.jsonl"), "ab") as handle:
        handle.write(b'{"kind":"scope","op":"retire","seq":2,"sco')  # crash mid-append
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    assert sidecar_files(root) == ["s.jsonl.scopes/scope-op-A.scope"]


@pytest.mark.rule("JSONL-9", "JSONL-16")
def test_crash_after_main_retirement_before_unlink_leaves_data_absent_and_cleanup_retries(
    make_repo: RepoFactory, root: str
) -> None:
    """A sidecar that outlived its committed retirement is ignored and removed on reopen."""
    storage = make_repo().create("s")
    storage.commit([append_list(value_list("f", "x", A), "frame")])
    path = sidecar(root, "s", "op-A")
    saved = Path(path).read_bytes()
    storage.commit([retire_scope(A), set_value(value("op", "done"), True)])
    expected = storage.snapshot()
    assert not os.path.exists(path)
    with open(path, "wb") as handle:  # the state a crash before the unlink leaves
        handle.write(saved)
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    assert reopened.read_list(value_list("f", "x", A)) == ()
    assert not os.path.exists(path)


@pytest.mark.rule("JSONL-9")
def test_unlink_failure_does_not_reject_the_already_committed_terminal_transaction(
    make_repo: RepoFactory, root: str
) -> None:
    """The retirement commit succeeds although its unlink fails; reopen retries the unlink."""
    storage = make_repo(fault=unlink_fails).create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    committed = storage.commit([retire_scope(A), insert_entry("done", None, "note")])
    assert [c.seq for c in committed] == [2, 3]
    assert storage.get_value(value("v", "k", A)) is None
    assert [scope for scope, _ in storage.cleanup_failures] == ["op-A"]
    assert os.path.exists(sidecar(root, "s", "op-A"))
    expected = storage.snapshot()
    storage.close()
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    assert sidecar_files(root) == []


@pytest.mark.rule("JSONL-16")
def test_reuse_after_retirement_replays_only_records_after_the_latest_retirement(
    make_repo: RepoFactory, root: str
) -> None:
    """Old-lifetime records left in a sidecar stay invisible; the new lifetime reopens."""
    storage = make_repo(fault=unlink_fails).create("s")
    storage.commit([set_value(value("v", "old", A), 1), append_list(value_list("l", "x", A), 1)])
    storage.commit([retire_scope(A)])
    storage.commit([append_list(value_list("l", "x", A), 2)])  # same physical file, new lifetime
    expected = storage.snapshot()
    storage.close()
    load = load_session(make_repo().fs, os.path.join(root, "s.jsonl"), "s")
    assert load.boundaries == {"op-A": 3}
    assert [tx.first for tx in load.sidecars["op-A"].txs] == [1, 4]
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    assert [e.value for e in reopened.read_list(value_list("l", "x", A))] == [2]
    assert reopened.get_value(value("v", "old", A)) is None


@pytest.mark.rule("JSONL-16")
def test_multiple_retirement_reuse_cycles_choose_the_latest_boundary(
    make_repo: RepoFactory, root: str
) -> None:
    """With three lifetimes in one surviving sidecar only the last is live."""
    storage = make_repo(fault=unlink_fails).create("s")
    for cycle in range(3):
        storage.commit([append_list(value_list("l", "x", A), cycle)])
        storage.commit([retire_scope(A)])
    storage.commit([append_list(value_list("l", "x", A), "live")])
    storage.close()
    load = load_session(make_repo().fs, os.path.join(root, "s.jsonl"), "s")
    assert load.boundaries == {"op-A": 6}
    reopened = make_repo().open("s")
    assert [e.value for e in reopened.read_list(value_list("l", "x", A))] == ["live"]
    reopened.commit([retire_scope(A)])
    reopened.close()
    assert make_repo().open("s").read_list(value_list("l", "x", A)) == ()


@pytest.mark.rule("JSONL-16", "JSONL-9")
def test_retirement_cleanup_is_serialized_so_a_later_reuse_cannot_be_deleted(
    make_repo: RepoFactory, root: str
) -> None:
    """Retire/reuse commits racing from threads never lose an acknowledged reuse."""
    storage = make_repo().create("s")
    acknowledged: list[int] = []
    lock = threading.Lock()

    def retire() -> None:
        for _ in range(30):
            storage.commit([retire_scope(A)])

    def reuse() -> None:
        for n in range(30):
            seq = storage.commit([append_list(value_list("l", "x", A), n)])[0].seq
            with lock:
                acknowledged.append(seq)

    threads = [threading.Thread(target=retire), threading.Thread(target=reuse)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    storage.commit([append_list(value_list("l", "x", A), "after")])
    expected = storage.snapshot()
    assert expected.lists  # the last write is after every retirement, so it is live
    storage.close()
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    # Right after a retire commit returns, the sidecar is gone; a reuse recreates it.
    reopened.commit([retire_scope(A)])
    assert sidecar_files(root) == []
    reopened.commit([set_value(value("v", "k", A), 1)])
    assert sidecar_files(root) == ["s.jsonl.scopes/scope-op-A.scope"]


@pytest.mark.rule("JSONL-8")
def test_ignored_pre_boundary_records_still_prevent_sequence_reuse(
    make_repo: RepoFactory, root: str
) -> None:
    """Records ignored because of retirement still count towards the high-water mark."""
    storage = make_repo(fault=unlink_fails).create("s")
    for n in range(4):
        storage.commit([set_value(value("v", str(n), A), n)])  # seqs 1..4
    storage.commit([retire_scope(A)])  # seq 5; the sidecar survives its unlink
    storage.close()
    load = load_session(make_repo().fs, os.path.join(root, "s.jsonl"), "s")
    assert load.retained == [(None, load.main.txs[0])]  # nothing of the sidecar is replayed
    assert [tx.last for tx in load.sidecars["op-A"].txs] == [1, 2, 3, 4]
    assert load.high_water == 5 and load.next_seq == 6
    reopened = make_repo().open("s")
    assert reopened.commit([set_value(value("v", "k"), 0)])[0].seq == 6
    assert reopened.commit([set_value(value("v", "k", A), 0)])[0].seq == 7


@pytest.mark.rule("JSONL-13")
def test_sidecars_and_temp_files_never_appear_in_repository_listing(
    make_repo: RepoFactory, root: str
) -> None:
    """list() shows main logs only, whatever else lies in the root."""
    repo = make_repo()
    storage = repo.create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    repo.create("t").close()
    for junk in ("s.jsonl.tmp", "x.scope", "scope-y.scope", "notes.txt", "a%2fb.jsonl"):
        with open(os.path.join(root, junk), "wb") as handle:
            handle.write(b"{}\n")
    os.mkdir(os.path.join(root, "dir.jsonl"))
    with open(os.path.join(root, "s.jsonl.scopes", "scope-z.scope.tmp"), "wb") as handle:
        handle.write(b"")
    assert repo.list() == ["s", "t"]


@pytest.mark.rule("JSONL-15")
def test_repository_deletion_removes_all_sidecars(make_repo: RepoFactory, root: str) -> None:
    """delete() removes the main log and the whole .scopes directory, and nothing else."""
    repo = make_repo()
    storage = repo.create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.commit([set_value(value("v", "k", B), 1)])
    other = repo.create("s2")
    other.commit([set_value(value("v", "k", A), 1)])
    other.close()
    storage.close()
    repo.delete("s")
    assert sorted(tree(root)) == ["s2.jsonl", "s2.jsonl.scopes/scope-op-A.scope"]
    assert not os.path.exists(os.path.join(root, "s.jsonl.scopes"))
    assert repo.list() == ["s2"]


@pytest.mark.rule("JSONL-15")
def test_create_removes_a_leftover_scopes_directory(make_repo: RepoFactory, root: str) -> None:
    """Sidecars left by a delete interrupted after the main file went never join a new
    Session of the same id."""
    repo = make_repo()
    storage = repo.create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.close()
    os.unlink(os.path.join(root, "s.jsonl"))  # crash inside delete()
    fresh = repo.create("s")
    fresh.close()
    assert make_repo().open("s").snapshot().values == ()


@pytest.mark.rule("JSONL-17")
def test_close_reopen_preserves_active_operation_progress_and_does_not_retire_it(
    make_repo: RepoFactory, root: str
) -> None:
    """Closing with a live scope keeps its sidecar and its frames/checkpoints reopen."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("pi.op.state", "op-A"), {"phase": "running"})])
    storage.commit([append_list(value_list("pi.pending.assistant_frame", "op-A:r1", A), "f1")])
    storage.commit([set_value(value("pi.pending.tool_output", "op-A:t1", A), {"partial": 1})])
    expected = storage.snapshot()
    storage.close()
    main = lines(os.path.join(root, "s.jsonl"))
    assert not any(b'"retire"' in line for line in main)
    reopened = make_repo().open("s")
    assert reopened.snapshot() == expected
    assert sidecar_files(root) == ["s.jsonl.scopes/scope-op-A.scope"]
    reopened.commit([delete_list(value_list("pi.pending.assistant_frame", "op-A:r1", A))])


@pytest.mark.rule("JSONL-18", "JSONL-16")
def test_undeletable_retired_sidecar_with_torn_tail_is_repaired_before_reuse(
    make_repo: RepoFactory, root: str
) -> None:
    """A retired sidecar that cannot be unlinked loses its torn tail at open, so a reuse that
    appends to the same file never follows a partial line."""
    storage = make_repo(fault=unlink_fails).create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.commit([retire_scope(A)])
    storage.close()
    with open(sidecar(root, "s", "op-A"), "ab") as handle:
        handle.write(b'{"kind":"value","op":"se')
    reopened = make_repo(fault=unlink_fails).open("s")
    reopened.commit([set_value(value("v", "k", A), 2)])
    expected = reopened.snapshot()
    reopened.close()
    assert make_repo(fault=unlink_fails).open("s").snapshot() == expected


@pytest.mark.rule("JSONL-6", "JSONL-16")
def test_malformed_line_inside_a_retired_lifetime_does_not_fail_open(
    make_repo: RepoFactory, root: str
) -> None:
    """A damaged line followed by records at or before the retirement is provably retired; the
    open succeeds and the dead sidecar is removed (000 §6.3: only *active* sidecars fail)."""
    storage = make_repo(fault=unlink_fails).create("s")
    for n in range(3):
        storage.commit([set_value(value("v", "k", A), n)])
    storage.commit([retire_scope(A)])
    storage.close()
    path = sidecar(root, "s", "op-A")
    content = lines(path)
    content[1] = b"garbage"
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    reopened = make_repo().open("s")
    assert reopened.get_value(value("v", "k", A)) is None
    assert sidecar_files(root) == []


@pytest.mark.rule("JSONL-6", "JSONL-16")
def test_a_record_at_the_retirement_seq_proves_a_damaged_line_retired(
    make_repo: RepoFactory, root: str
) -> None:
    """The record after the damaged line carries the retirement's own seq (no writer does
    that): stage 6 drops it as retired (only seqs *greater* than the retirement are kept), so
    it proves the line before it retired too; the two tests agree and open succeeds."""
    storage = make_repo(fault=unlink_fails).create("s")
    for n in range(3):
        storage.commit([set_value(value("v", "k", A), n)])
    storage.commit([retire_scope(A)])
    storage.close()
    retired_at = orjson.loads(lines(session_paths.main_path(root, "s"))[-1])["seq"]
    path = sidecar(root, "s", "op-A")
    content = lines(path)
    content[-2] = b"garbage"  # the only record after it is the one at the retirement's seq
    content[-1] = orjson.dumps(dict(orjson.loads(content[-1]), seq=retired_at))
    with open(path, "wb") as handle:
        handle.write(b"\n".join(content) + b"\n")
    reopened = make_repo().open("s")
    assert reopened.get_value(value("v", "k", A)) is None
    assert sidecar_files(root) == []


@pytest.mark.rule("JSONL-16", "JSONL-13")
def test_unrelated_and_temp_files_in_the_scopes_directory_are_ignored_or_cleaned(
    make_repo: RepoFactory, root: str
) -> None:
    """Foreign names are left alone, interrupted sidecar temp files are removed, and neither
    becomes a sidecar."""
    storage = make_repo().create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.close()
    scopes = os.path.join(root, "s.jsonl.scopes")
    for name, data in (("notes.txt", b"x"), ("scope-%zz.scope", b"{"), ("scope-B.scope.tmp", b"{")):
        with open(os.path.join(scopes, name), "wb") as handle:
            handle.write(data)
    reopened = make_repo().open("s")
    assert reopened.get_value(value("v", "k", A)).value == 1  # type: ignore[union-attr]
    assert sorted(os.listdir(scopes)) == ["notes.txt", "scope-%zz.scope", "scope-op-A.scope"]


@pytest.mark.rule("JSONL-15")
def test_scope_directory_cleanup_failure_rejects_delete_after_the_main_file_is_gone(
    make_repo: RepoFactory, root: str
) -> None:
    """delete() reports a failed .scopes removal; the Session is gone from list() and a later
    create() of the same id clears the leftovers (000 §6.5)."""

    armed = False

    def remove_fails(op: str, path: str) -> OSError | None:
        if armed and op == "remove" and path.endswith(".scopes"):
            return PermissionError(13, "injected: rmtree refused")
        return None

    repo = make_repo(fault=remove_fails)
    storage = repo.create("s")
    storage.commit([set_value(value("v", "k", A), 1)])
    storage.close()
    armed = True
    with pytest.raises(StorageIOError) as info:
        repo.delete("s")
    assert info.value.details["op"] == "remove"
    assert repo.list() == []
    assert sidecar_files(root) == ["s.jsonl.scopes/scope-op-A.scope"]
    fresh = make_repo().create("s")
    assert fresh.snapshot().values == () and sidecar_files(root) == []
