"""The SQLite focused tests of seed 000 §9.4, one test per bullet (plus close relatives)."""

from __future__ import annotations

import errno
import os
from typing import Any

import apsw
import pytest

import scopecheck.impl.sqlite.repository as repository
from scopecheck.impl.sqlite import SCOPED_DELETES, SqliteRepository, SqliteStorage
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import StorageIOError, UsageError
from scopecheck.models.fork import TreeFork
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    append_list,
    insert_entry,
    retire_scope,
    set_value,
)

OP = ephemeral_scope("op-1")
OTHER = ephemeral_scope("op-2")


def raw(storage: SqliteStorage, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in storage.connection.execute(sql, params)]


def seed_scoped_state(storage: SqliteStorage) -> None:
    storage.commit(
        [
            set_value(value("pi.op.state", "k", OP), {"step": 1}),
            append_list(value_list("pi.frames", "r", OP), "frame-1", tag="t"),
            append_list(value_list("pi.frames", "r", OP), "frame-2"),
        ]
    )
    storage.commit([set_value(value("pi.op.state", "k", OTHER), "other")])
    storage.commit([set_value(value("pi.op.state", "k"), "session")])


def next_seq(storage: SqliteStorage) -> int:
    rows = raw(storage, "SELECT next_seq FROM sessions WHERE session_id = ?", storage.session_id)
    result: int = rows[0][0]
    return result


@pytest.mark.rule("SQLITE-1", "SQLITE-2")
def test_schema_and_query_helpers_include_scope_id_and_list_rows_preserve_nullable_tags(
    make_repo: Any,
) -> None:
    """Both value tables are WITHOUT ROWID with scope_id in the key; tags round-trip or NULL."""
    storage = make_repo().create("s")
    for table, key in (
        ("scalar_values", ["session_id", "scope_id", "namespace", "key"]),
        ("list_values", ["session_id", "scope_id", "namespace", "key", "seq"]),
    ):
        sql = raw(storage, "SELECT sql FROM sqlite_schema WHERE name = ?", table)[0][0]
        assert "WITHOUT ROWID" in sql
        columns = raw(storage, f"PRAGMA table_xinfo({table})")
        pk = [
            name
            for _, name, _, _, _, pk_index, _ in sorted(columns, key=lambda c: c[5])
            if pk_index
        ]
        assert pk == key
    assert "scope_id" in SqliteStorage.POINT_READ_SQL
    for order in ("asc", "desc"):
        for with_cursor in (False, True):
            assert "scope_id = ?" in SqliteStorage.list_page_sql(order, with_cursor)  # type: ignore[arg-type]
    seed_scoped_state(storage)
    rows = raw(
        storage,
        "SELECT scope_id, value, tag FROM list_values WHERE session_id = 's' ORDER BY seq",
    )
    assert rows == [("op-1", '"frame-1"', "t"), ("op-1", '"frame-2"', None)]
    scopes = raw(storage, "SELECT scope_id FROM scalar_values ORDER BY scope_id")
    assert scopes == [("",), ("op-1",), ("op-2",)]
    page = storage.read_list(value_list("pi.frames", "r", OP))
    assert [(e.value, e.tag) for e in page] == [("frame-1", "t"), ("frame-2", None)]


@pytest.mark.rule("SQLITE-3")
def test_one_transaction_atomically_deletes_scoped_rows_and_writes_terminal_main_state(
    make_repo: Any,
) -> None:
    """Retirement plus terminal session writes commit as one: scoped rows gone, main state in."""
    storage = make_repo().create("s")
    seed_scoped_state(storage)
    storage.commit(
        [
            insert_entry("e1", None, "message"),
            retire_scope(OP),
            set_value(value("pi.result", "op-1"), "ok"),
        ]
    )
    assert raw(storage, "SELECT count(*) FROM scalar_values WHERE scope_id = 'op-1'") == [(0,)]
    assert raw(storage, "SELECT count(*) FROM list_values WHERE scope_id = 'op-1'") == [(0,)]
    assert storage.get_value(value("pi.op.state", "k", OTHER)) is not None
    assert storage.get_value(value("pi.op.state", "k")) is not None
    result = storage.get_value(value("pi.result", "op-1"))
    assert result is not None and result.value == "ok"
    assert storage.get_entry("e1") is not None


class Injected(Exception):
    """The failure forced inside the commit transaction."""


class FailAfterDeletes:
    """A retirement policy that runs the real scoped deletes, records what the transaction
    then sees of the scope, and fails once -- a failure after the deletion, inside the
    commit transaction."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def retire(self, conn: apsw.Connection, session_id: str, scope_id: str) -> None:
        SCOPED_DELETES.retire(conn, session_id, scope_id)
        if self.seen:
            return
        count = conn.execute(
            "SELECT (SELECT count(*) FROM list_values WHERE session_id = ?1 AND scope_id = ?2)"
            " + (SELECT count(*) FROM scalar_values WHERE session_id = ?1 AND scope_id = ?2)",
            (session_id, scope_id),
        ).fetchall()[0][0]
        self.seen.append(count)
        raise Injected("after scope deletion")


#: The last statement of every commit, after all of its writes and the scoped deletes.
FAIL_SEQ_ADVANCE = (
    "CREATE TEMP TRIGGER fail_seq_advance BEFORE UPDATE OF next_seq ON sessions "
    "BEGIN SELECT RAISE(ABORT, 'injected at the seq advance'); END"
)


@pytest.mark.rule("SQLITE-4", "SQLITE-3")
@pytest.mark.parametrize("where", ["after-scope-deletion", "at-seq-advance"])
def test_forced_failure_after_scope_deletion_rolls_back_deletion_and_siblings(
    make_repo: Any, where: str
) -> None:
    """A failure raised inside the transaction -- by the retirement policy after the scoped
    DELETEs ran, or by a trigger on the seq advance that ends every commit -- restores every
    scoped row and drops every sibling write, earlier and later; next_seq does not move."""
    retirement = FailAfterDeletes()
    repo = make_repo(retirement=retirement) if where == "after-scope-deletion" else make_repo()
    storage = repo.create("s")
    seed_scoped_state(storage)
    before = storage.snapshot()
    seq_before = next_seq(storage)
    if where == "at-seq-advance":
        storage.connection.execute(FAIL_SEQ_ADVANCE)
    expected: type[Exception] = Injected if where == "after-scope-deletion" else StorageIOError
    with pytest.raises(expected):
        storage.commit(
            [insert_entry("e1", None, "message"), retire_scope(OP), set_value(value("app", "x"), 1)]
        )
    if where == "after-scope-deletion":
        assert retirement.seen == [0]  # the deletion was visible inside the transaction
    else:
        storage.connection.execute("DROP TRIGGER temp.fail_seq_advance")
    assert storage.snapshot() == before
    assert next_seq(storage) == seq_before
    assert storage.get_entry("e1") is None
    assert len(storage.read_list(value_list("pi.frames", "r", OP))) == 2
    # the handle stays usable and allocates the seq the failed commit did not consume
    assert storage.commit([retire_scope(OP)])[0].seq == seq_before
    assert storage.read_list(value_list("pi.frames", "r", OP)) == ()


@pytest.mark.rule("SQLITE-7")
def test_reuse_after_retirement_recreates_rows_under_same_scope_id(make_repo: Any) -> None:
    """A write after retirement is a new lifetime under the same scope_id; old rows stay gone."""
    storage = make_repo().create("s")
    seed_scoped_state(storage)
    storage.commit([retire_scope(OP)])
    (committed,) = storage.commit([append_list(value_list("pi.frames", "r", OP), "new")])
    page = storage.read_list(value_list("pi.frames", "r", OP))
    assert [(e.seq, e.value) for e in page] == [(committed.seq, "new")]
    assert storage.get_value(value("pi.op.state", "k", OP)) is None
    assert raw(storage, "SELECT scope_id, value FROM list_values") == [("op-1", '"new"')]


@pytest.mark.rule("SQLITE-5")
def test_sessions_next_seq_advances_for_retirement(make_repo: Any) -> None:
    """Each retirement consumes one seq from sessions.next_seq, with or without scoped rows."""
    storage = make_repo().create("s")
    seed_scoped_state(storage)
    start = next_seq(storage)
    committed = storage.commit([retire_scope(OP), retire_scope(ephemeral_scope("never-used"))])
    assert [c.seq for c in committed] == [start, start + 1]
    assert next_seq(storage) == start + 2
    (later,) = storage.commit([set_value(value("pi.op.state", "k", OP), 1)])
    assert later.seq == start + 2


def plan(storage: SqliteStorage, sql: str, params: list[Any]) -> list[str]:
    return [row[3] for row in storage.connection.execute("EXPLAIN QUERY PLAN " + sql, params)]


@pytest.mark.rule("SQLITE-6", "SQLITE-2")
@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("with_cursor", [False, True], ids=["no-cursor", "cursor"])
def test_list_paging_plan_uses_scoped_primary_key_without_temp_btree(
    make_repo: Any, order: str, with_cursor: bool
) -> None:
    """EXPLAIN QUERY PLAN of the page query: one primary-key SEARCH on exact scope, no sort."""
    storage = make_repo().create("s")
    for scope in (None, OP, OTHER):
        address = value_list("l", "k") if scope is None else value_list("l", "k", scope)
        storage.commit(
            [append_list(address, n, tag="t" if n % 5 == 0 else None) for n in range(30)]
        )
    storage.connection.execute("ANALYZE")
    sql = SqliteStorage.list_page_sql(order, with_cursor)  # type: ignore[arg-type]
    params: list[Any] = ["s", "op-1", "l", "k", *([40] if with_cursor else []), 10]
    details = plan(storage, sql, params)
    assert len(details) == 1, details
    assert details[0].startswith("SEARCH list_values USING PRIMARY KEY")
    bound = "seq>?" if order == "asc" else "seq<?"
    expected = "(session_id=? AND scope_id=? AND namespace=? AND key=?"
    assert expected + (f" AND {bound})" if with_cursor else ")") in details[0]
    assert not any("TEMP B-TREE" in d for d in details)
    page = storage.read_list(
        value_list("l", "k", OP),
        cursor=40 if with_cursor else None,
        order=order,
        limit=10,  # type: ignore[arg-type]
        stop_at_tag="t",
    )
    assert page and all(e.seq > 30 for e in page) and page[-1].tag == "t"


@pytest.mark.rule("SQLITE-2", "SQLITE-3")
def test_point_read_and_retirement_plans_use_primary_key(make_repo: Any) -> None:
    storage = make_repo().create("s")
    seed_scoped_state(storage)
    point = plan(storage, SqliteStorage.POINT_READ_SQL, ["s", "op-1", "pi.op.state", "k"])
    assert point == [
        "SEARCH scalar_values USING PRIMARY KEY "
        "(session_id=? AND scope_id=? AND namespace=? AND key=?)"
    ]
    for table in ("scalar_values", "list_values"):
        details = plan(
            storage, f"DELETE FROM {table} WHERE session_id = ? AND scope_id = ?", ["s", "op-1"]
        )
        assert details == [f"SEARCH {table} USING PRIMARY KEY (session_id=? AND scope_id=?)"]


@pytest.mark.rule("SQLITE-10", "SQLITE-11", "SQLITE-2")
def test_per_file_and_container_layouts_isolate_session_and_scope_ids(make_repo: Any) -> None:
    """Two Sessions using equal namespaces, keys and scope IDs never see each other's rows,
    and retiring a scope in one leaves the same scope ID in the other alone."""
    repo = make_repo()
    one, two = repo.create("one"), repo.create("two")
    for storage, tag in ((one, "1"), (two, "2")):
        storage.commit(
            [set_value(value("ns", "k", OP), tag), append_list(value_list("l", "k", OP), tag)]
        )
        storage.commit([set_value(value("ns", "k"), "main-" + tag)])
    one.commit([retire_scope(OP)])
    assert one.get_value(value("ns", "k", OP)) is None
    record = two.get_value(value("ns", "k", OP))
    assert record is not None and record.value == "2"
    assert [e.value for e in two.read_list(value_list("l", "k", OP))] == ["2"]
    main = one.get_value(value("ns", "k"))
    assert main is not None and main.value == "main-1"
    assert one.scan_values("ns", scope=OTHER) == ()
    assert [k for k, _ in two.scan_values("ns", scope=OP)] == ["k"]
    assert one.commit([set_value(value("ns", "z"), 0)])[0].seq == 5
    assert two.commit([set_value(value("ns", "z"), 0)])[0].seq == 4


@pytest.mark.rule("SQLITE-12")
def test_session_deletion_removes_scoped_rows_and_files(make_repo: Any, layout: str) -> None:
    """Deleting a Session removes all its rows in every scope (or its files), nothing else.
    (Fork exclusion of scoped rows is rule SQLITE-15, a gap until fork lands.)"""
    repo = make_repo()
    doomed, kept = repo.create("doomed"), repo.create("kept")
    for storage in (doomed, kept):
        seed_scoped_state(storage)
        storage.commit([insert_entry("e1", None, "message")])
    kept_before = kept.snapshot()
    doomed.close()
    repo.delete("doomed")
    assert repo.list() == ["kept"]
    if layout == "shared":
        for table in ("sessions", "entries", "usage_ledger", "scalar_values", "list_values"):
            assert raw(kept, f"SELECT count(*) FROM {table} WHERE session_id = 'doomed'") == [(0,)]
    else:
        assert sorted(n for n in os.listdir(repo.root) if n.startswith("doomed")) == []
    assert kept.snapshot() == kept_before
    fresh = repo.create("doomed")
    assert (
        fresh.snapshot().values == () and fresh.commit([set_value(value("a", "b"), 1)])[0].seq == 1
    )


@pytest.mark.rule("REPO-3")
def test_opening_a_missing_session_is_not_found(make_repo: Any, layout: str) -> None:
    """``not_found`` for a session that was never created; the shared container also says
    which database file it looked in (``details['path']``)."""
    repo = make_repo()
    with pytest.raises(UsageError) as info:
        repo.open("never-created")
    assert info.value.code == "not_found"
    if layout == "shared":
        assert info.value.details["path"] == repo.path


def test_both_layouts_do_their_io_through_the_given_vfs(make_repo: Any, layout: str) -> None:
    """``vfs=`` reaches every connection: the crash simulator (crashsim/sqlite_vfs.py) sees a
    layout's writes only through it."""
    from scopecheck.crashsim.sqlite_vfs import RecordingVFS

    vfs = RecordingVFS(f"focused-{layout}")
    try:
        repo = make_repo(vfs=vfs.vfs_name)
        storage = repo.create("s")
        storage.commit([set_value(value("ns", "k"), 1)])
        storage.close()
        repo.close()
        assert any(call.kind == "write" for call in vfs.calls)
    finally:
        vfs.unregister()


def _fork_source(root: Any) -> SqliteRepository:
    repo = SqliteRepository(root)
    source = repo.create("src")
    source.commit([insert_entry("e1", None, "message", {"role": "user"})])
    source.close()
    return repo


@pytest.mark.rule("FORK-1")
def test_per_file_fork_that_loses_the_destination_to_another_process_fails_already_exists(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository lock reserves the destination id in this process only; another process
    may create the same file while the fork builds its temp copy.  Publishing with ``link``
    then refuses to replace it: already_exists, the other session untouched, no temp left."""
    repo = _fork_source(tmp_path)
    original = repository.publish_stage

    def racing(*args: Any, **kwargs: Any) -> Any:
        other = SqliteRepository(tmp_path).create("d")  # another process wins the race
        other.commit([set_value(value("app", "k"), "theirs")])
        other.close()
        return original(*args, **kwargs)

    monkeypatch.setattr(repository, "publish_stage", racing)
    with pytest.raises(UsageError) as info:
        repo.fork("src", TreeFork(id="d"))
    assert info.value.code == "already_exists"
    monkeypatch.undo()
    theirs = SqliteRepository(tmp_path).open("d")
    assert theirs.get_value(value("app", "k")).value == "theirs"
    theirs.close()
    assert sorted(os.listdir(tmp_path)) == ["d.sqlite", "src.sqlite"]


@pytest.mark.rule("FORK-13")
def test_per_file_fork_whose_publish_fails_is_an_io_error_naming_the_destination(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem failure while publishing the fork (here ``link`` across devices) is
    io_error naming the destination path; nothing is published and the temp copy is gone."""

    repo = _fork_source(tmp_path)

    def cross_device(source: str, target: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link", target)

    monkeypatch.setattr(repository.os, "link", cross_device)
    with pytest.raises(StorageIOError) as info:
        repo.fork("src", TreeFork(id="d"))
    monkeypatch.undo()
    assert info.value.code == "io_error"
    assert info.value.details["path"] == str(tmp_path / "d.sqlite")
    assert sorted(os.listdir(tmp_path)) == ["src.sqlite"]


@pytest.mark.rule("FORK-13")
def test_per_file_fork_whose_sqlite_copy_fails_is_an_io_error_naming_the_file_and_leaves_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite failing while the fork fills its temp database (here a full disk) is io_error
    naming the database SQLite failed on, a file in the repository root; the temp copy and
    its journals are removed and nothing is published."""
    import apsw

    repo = _fork_source(tmp_path)

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise apsw.FullError("database or disk is full")

    monkeypatch.setattr(repository, "publish_stage", disk_full)
    with pytest.raises(StorageIOError) as info:
        repo.fork("src", TreeFork(id="d"))
    monkeypatch.undo()
    assert info.value.code == "io_error"
    failed_on = info.value.details["path"]
    assert isinstance(failed_on, str) and os.path.dirname(failed_on) == str(tmp_path)
    assert failed_on in str(info.value) and "disk is full" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["src.sqlite"]


@pytest.mark.rule("LIFE-1", "REPO-4")
def test_closing_a_closed_handle_again_leaves_its_successor_tracked(tmp_path: Any) -> None:
    """close() is idempotent: closing an old handle a second time, after the session was opened
    again, must not untrack the new handle (it stays already_open and is closed with the
    repository)."""
    repo = SqliteRepository(tmp_path)
    old = repo.create("s")
    old.close()
    new = repo.open("s")
    old.close()
    with pytest.raises(UsageError) as info:
        repo.open("s")
    assert info.value.code == "already_open"
    repo.close()
    assert new.closed
