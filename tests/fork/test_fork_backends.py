"""Backend-specific fork properties: JSONL source non-mutation and fixed-prefix capture, SQLite
staging and the independent reader (001 §5 "Bounded memory and source non-mutation",
"Coordination and ordering")."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.crashsim.tracing_fs import TracingFileSystem
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.codec import transaction_records
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import BranchFork, TreeFork
from scopecheck.models.writes import append_list, delete_list, delete_value, insert_entry, set_value
from tests.fork.conftest import IDLE

CLOCK = lambda: 1_750_000_000_000  # noqa: E731


def _source(storage: Any) -> None:
    storage.commit([insert_entry("e1", None, "message"), insert_entry("e2", "e1", "message")])
    storage.commit(
        [
            set_value(value("pi.branch.tip", "main"), "e2"),
            set_value(value("pi.lane.config", "main"), {}),
            set_value(value("pi.lane.state", "main"), IDLE),
        ]
    )
    storage.commit([set_value(value("my-app.s"), 1)])
    storage.commit([set_value(value("my-app.s"), 2)])
    storage.commit([append_list(value_list("my-app.l"), 1)])
    storage.commit([delete_list(value_list("my-app.l"))])
    storage.commit([append_list(value_list("my-app.l"), 2)])
    storage.commit([set_value(value("my-app.gone"), 1)])
    storage.commit([delete_value(value("my-app.gone"))])


# -- JSONL -----------------------------------------------------------------------------------


@pytest.mark.rule("FORK-14", "JSONL-20")
def test_jsonl_torn_tail_source_is_never_repaired(tmp_path: Any) -> None:
    """A closed torn-tail source forks; the torn transaction is wholly absent; the source bytes
    are unchanged; no ``.tmp`` beside it."""
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    storage.close()
    path = repo.path_of("src")
    with open(path, "ab") as handle:
        handle.write(b'[{"kind":"value","op":"set","seq":99,"namespace":"my-app.t","key":"","val')
    before = Path(path).read_bytes()
    dest = repo.open(repo.fork("src", TreeFork(id="d")))
    assert Path(path).read_bytes() == before
    assert dest.get_value(value("my-app.t")) is None
    assert dest.commit([set_value(value("x"), 1)])[0].seq == 13  # torn seq 99 did not count
    assert not glob.glob(str(tmp_path / "*.tmp"))
    repo.close()


@pytest.mark.rule("JSONL-6", "JSONL-20")
def test_jsonl_fork_of_a_corrupt_source_names_its_file_and_line(tmp_path: Any) -> None:
    """A complete malformed line in a closed source fails the fork as open fails: ``corrupt``
    with the same ``file`` and 1-based ``line`` details; the source is untouched."""
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    storage.close()
    path = repo.path_of("src")
    with open(path, "ab") as handle:
        handle.write(b"not json\n")
    before = Path(path).read_bytes()
    line = before.count(b"\n")
    with pytest.raises(ScopecheckError) as forked:
        repo.fork("src", TreeFork(id="d"))
    with pytest.raises(ScopecheckError) as opened:
        repo.open("src")
    assert forked.value.code == opened.value.code == "corrupt"
    assert forked.value.details["file"] == opened.value.details["file"] == path
    assert forked.value.details["line"] == opened.value.details["line"] == line
    assert Path(path).read_bytes() == before
    assert "d" not in repo.list()
    repo.close()


@pytest.mark.rule("FORK-14", "JSONL-20")
def test_jsonl_fork_reads_the_source_only_through_the_prefix_reader(tmp_path: Any) -> None:
    """Instrumented: no whole-file read and no write of the source on the fork path."""
    fs = TracingFileSystem(OsFileSystem())
    repo = JsonlRepository(str(tmp_path), fs, clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    source = repo.path_of("src")
    fs.trace.clear()
    repo.fork("src", BranchFork("main", id="d"))
    touching = [op for op, path in fs.trace if path == source]
    assert set(touching) == {"read_prefix"}, touching
    repo.close()


@pytest.mark.rule("JSONL-20")
def test_jsonl_destination_holds_only_current_rows_in_seq_order(tmp_path: Any) -> None:
    """No deletes, no superseded sets, no dead list history; tip/state in place; header
    records parentSessionId and nextSeq."""
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    repo.fork("src", TreeFork(id="d"))
    lines = Path(repo.path_of("d")).read_bytes().splitlines()
    header = orjson.loads(lines[0])
    assert header["parentSessionId"] == "src" and header["nextSeq"] == 13
    records = destination_records(lines[1:])
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs)
    assert all(r.get("op") in (None, "set", "append") for r in records)
    assert [r["value"] for r in records if r.get("namespace") == "my-app.s"] == [2]
    assert [r["value"] for r in records if r.get("namespace") == "my-app.l"] == [2]
    assert not [r for r in records if r.get("namespace") == "my-app.gone"]
    state = [r for r in records if r.get("namespace") == "pi.lane.state"]
    assert state == [
        {
            "kind": "value",
            "op": "set",
            "seq": 5,
            "namespace": "pi.lane.state",
            "key": "main",
            "value": IDLE,
        }
    ]
    repo.close()


@pytest.mark.rule("FORK-12", "JSONL-20")
def test_jsonl_append_after_capture_is_absent(tmp_path: Any, monkeypatch: Any) -> None:
    """A source commit that completes after the boundary capture, while the fork streams, is
    wholly absent from that fork; a later fork includes it."""
    import scopecheck.impl.jsonl.storage as jsonl_storage

    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    real = jsonl_storage.fork_jsonl

    def late_append(*args: Any) -> None:
        storage.commit([set_value(value("late.a"), 1), set_value(value("late.b"), 1)])
        real(*args)

    monkeypatch.setattr(jsonl_storage, "fork_jsonl", late_append)
    first = repo.open(repo.fork("src", TreeFork(id="d1")))
    monkeypatch.setattr(jsonl_storage, "fork_jsonl", real)
    assert first.scan_values("late.a") == () and first.scan_values("late.b") == ()
    second = repo.open(repo.fork("src", TreeFork(id="d2")))
    assert second.get_value(value("late.a")) is not None
    assert second.get_value(value("late.b")) is not None
    repo.close()


@pytest.mark.rule("FORK-1", "JSONL-20")
def test_jsonl_failed_fork_leaves_no_temp_or_index(tmp_path: Any) -> None:
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _source(storage)
    storage.commit([set_value(value("pi.future"), 1)])
    with pytest.raises(ScopecheckError) as info:
        repo.fork("src", TreeFork(id="d"))
    assert info.value.code == "unknown_namespace"
    assert sorted(os.listdir(tmp_path)) == ["src.jsonl"]
    repo.close()


# -- SQLite ----------------------------------------------------------------------------------


def _sqlite(tmp_path: Any, shared: bool) -> Any:
    if shared:
        return SqliteContainerRepository(str(tmp_path / "c.sqlite"), CLOCK)
    return SqliteRepository(str(tmp_path), CLOCK)


def _stages(tmp_path: Any) -> list[str]:
    return [n for n in os.listdir(tmp_path) if ".stage" in n or n.endswith(".tmp")]


@pytest.mark.rule("FORK-13", "SQLITE-15")
@pytest.mark.parametrize("shared", [False, True])
def test_sqlite_stage_removed_on_success_and_failure(tmp_path: Any, shared: bool) -> None:
    repo = _sqlite(tmp_path, shared)
    storage = repo.create("src")
    _source(storage)
    repo.fork("src", TreeFork(id="ok"))
    assert _stages(tmp_path) == []
    storage.commit([set_value(value("pi"), 1)])
    with pytest.raises(ScopecheckError):
        repo.fork("src", TreeFork(id="bad"))
    assert _stages(tmp_path) == []
    assert repo.list() == ["ok", "src"]
    repo.close()


@pytest.mark.rule("FORK-12", "FORK-13", "SQLITE-15")
@pytest.mark.parametrize("shared", [False, True])
def test_sqlite_commit_while_staging_completes_and_is_absent(
    tmp_path: Any, shared: bool, monkeypatch: Any
) -> None:
    """The independent reader's snapshot is taken at the boundary; a source commit on the
    writer connection completes while the stage is being filled (both layouts) and is wholly
    absent from that fork; a later fork includes it."""
    from scopecheck.impl.sqlite import fork as sqlite_fork

    repo = _sqlite(tmp_path, shared)
    storage = repo.create("src")
    _source(storage)
    real = sqlite_fork.Stage.copy
    done: list[int] = []

    def copy_with_commit(self: Any, *args: Any) -> None:
        done.append(
            storage.commit([set_value(value("late.a"), 1), set_value(value("late.b"), 1)])[0].seq
        )
        real(self, *args)

    monkeypatch.setattr(sqlite_fork.Stage, "copy", copy_with_commit)
    first = repo.open(repo.fork("src", TreeFork(id="d1")))
    monkeypatch.setattr(sqlite_fork.Stage, "copy", real)
    assert done  # the commit completed while the fork was staging
    assert first.scan_values("late.a") == () and first.scan_values("late.b") == ()
    assert first.commit([set_value(value("x"), 1)])[0].seq == done[0]
    second = repo.open(repo.fork("src", TreeFork(id="d2")))
    assert second.get_value(value("late.b")) is not None
    repo.close()


@pytest.mark.rule("FORK-12", "SQLITE-15")
@pytest.mark.parametrize("shared", [False, True])
def test_sqlite_fork_snapshot_waits_for_a_commit_in_flight(
    tmp_path: Any, shared: bool, monkeypatch: Any
) -> None:
    """A fork that starts while a source commit is inside its transaction takes its snapshot
    at a commit boundary (FORK-12).  The rule lets such a commit land on either side; this
    backend's choice is to wait on the source's commit queue and so include it whole.  Without
    the wait, the per-file fork silently misses the commit, and the shared-file fork blocks on
    SQLite's lock instead and fails with ``locked`` once a commit outlasts the busy timeout."""
    import threading

    from scopecheck.impl.sqlite.storage import SqliteStorage

    repo = _sqlite(tmp_path, shared)
    storage = repo.create("src")
    _source(storage)
    inside, release = threading.Event(), threading.Event()
    real = SqliteStorage._commit_in_transaction

    def held(self: Any, writes: Any) -> Any:
        committed = real(self, writes)
        if threading.current_thread().name == "slow-commit":
            inside.set()
            release.wait(timeout=30)  # rows written, COMMIT not yet run, queue held
        return committed

    monkeypatch.setattr(SqliteStorage, "_commit_in_transaction", held)
    late = [set_value(value("late.a"), 1), set_value(value("late.b"), 1)]
    commit = threading.Thread(target=storage.commit, args=(late,), name="slow-commit")
    commit.start()
    assert inside.wait(timeout=30)
    forked: list[str] = []
    fork = threading.Thread(target=lambda: forked.append(repo.fork("src", TreeFork(id="d"))))
    fork.start()
    fork.join(timeout=0.5)
    still_waiting = fork.is_alive()  # it cannot finish while the commit holds the queue
    release.set()
    commit.join(timeout=30)
    fork.join(timeout=30)
    assert still_waiting, "the fork did not wait for the commit in flight"
    dest = repo.open(forked[0])
    assert dest.get_value(value("late.a")) is not None
    assert dest.get_value(value("late.b")) is not None
    repo.close()


def _with_ephemeral(storage: Any) -> None:
    from scopecheck.models.scope import ephemeral_scope
    from scopecheck.models.writes import retire_scope

    _source(storage)
    op1, op2 = ephemeral_scope("op1"), ephemeral_scope("op/2")
    storage.commit([set_value(value("my-app.e", "", op1), 1)])
    storage.commit([append_list(value_list("my-app.l", "", op2), 1)])
    storage.commit([set_value(value("pi.lane.state", "main", op2), 1)])
    storage.commit([retire_scope(op1)])


@pytest.mark.rule("JSONL-20", "FORK-10")
def test_jsonl_destination_has_no_sidecars_or_retirement_state(tmp_path: Any) -> None:
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _with_ephemeral(storage)
    for options in (TreeFork(id="t"), BranchFork("main", id="b")):
        dest = repo.fork("src", options)
        path = repo.path_of(dest)
        assert not os.path.exists(path + ".scopes")
        records = destination_records(Path(path).read_bytes().splitlines()[1:])
        assert all(r["kind"] in ("entry", "value", "list") for r in records)
        assert all("scopeId" not in r for r in records)
        assert header_next_seq(path) == 17
    repo.close()


def destination_records(lines: list[bytes]) -> list[dict[str, Any]]:
    """The records of destination lines: a line is one write or a transaction array (JSONL-3;
    a tree fork copies unchanged source transactions as they are)."""
    return [rec for line in lines for rec in transaction_records(orjson.loads(line))]


def header_next_seq(path: str) -> int:
    first = Path(path).read_bytes().split(b"\n", 1)[0]
    return int(orjson.loads(first)["nextSeq"])


@pytest.mark.rule("SQLITE-15", "FORK-10")
@pytest.mark.parametrize("shared", [False, True])
def test_sqlite_fork_copies_only_session_scope_rows(tmp_path: Any, shared: bool) -> None:
    repo = _sqlite(tmp_path, shared)
    storage = repo.create("src")
    _with_ephemeral(storage)
    for options in (TreeFork(id="t"), BranchFork("main", id="b")):
        dest = repo.open(repo.fork("src", options))
        conn = dest.connection
        for table in ("scalar_values", "list_values"):
            rows = conn.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = ? AND scope_id <> ''",
                (options.id,),
            ).fetchall()
            assert rows[0][0] == 0
        assert conn.execute(
            "SELECT next_seq, parent_session_id FROM sessions WHERE session_id = ?", (options.id,)
        ).fetchall() == [(17, "src")]
        dest.close()
    repo.close()


def test_bench_fork_smoke() -> None:
    """``scopecheck bench fork`` runs end to end (tiny sizes; the figures come from the CLI)."""
    from scopecheck.bench.fork import bench_fork

    result = bench_fork((200, 400), ("memory", "jsonl", "sqlite"))
    for name in ("memory", "jsonl", "sqlite"):
        assert set(result[name]["ratio_largest_to_smallest"]) == {"tree", "branch"}
    assert result["jsonl"]["400"]["speed_vs_plain_copy"] > 0


@pytest.mark.rule("JSONL-20")
def test_jsonl_tree_fork_copies_unchanged_transactions_verbatim_and_splits_the_rest(
    tmp_path: Any,
) -> None:
    """A source line whose every record the destination keeps unchanged is copied byte for
    byte; a line with a superseded set or an unclassified label is decoded and its kept records
    written one per line; a label is kept iff its entry is in the prefix."""
    repo = JsonlRepository(str(tmp_path), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    storage.commit([insert_entry("e1", None, "message"), set_value(value("app.a"), 1)])
    storage.commit([insert_entry("e2", "e1", "message"), set_value(value("app.b"), 1)])
    storage.commit([set_value(value("app.b"), 2), append_list(value_list("app.l"), 3)])
    storage.commit(
        [
            set_value(value("pi.entry.label", "e2"), "two"),
            set_value(value("pi.entry.label", "nope"), "ghost"),
        ]
    )
    storage.close()
    source_lines = Path(repo.path_of("src")).read_bytes().splitlines()
    repo.fork("src", TreeFork(id="d"))
    lines = Path(repo.path_of("d")).read_bytes().splitlines()
    assert source_lines[1] in lines and source_lines[3] in lines  # clean: verbatim
    assert source_lines[2] not in lines and source_lines[4] not in lines  # dirty: split
    records = destination_records(lines[1:])
    assert [r["seq"] for r in records] == [1, 2, 3, 5, 6, 7]
    assert [r.get("key") for r in records if r.get("namespace") == "pi.entry.label"] == ["e2"]
    dest = repo.open("d")
    assert dest.get_value(value("app.b")).value == 2  # type: ignore[union-attr]
    assert dest.get_value(value("app.a")).value == 1  # type: ignore[union-attr]
    dest.close()
    repo.close()
