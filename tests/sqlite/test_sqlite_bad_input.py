"""Bad input on disk and hostile ids: a stable code, files untouched (SQLITE-9, SQLITE-10)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import apsw
import pytest

from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository, decode_file_stem
from scopecheck.impl.sqlite.repository import encode_session_id
from scopecheck.models.addresses import value
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.writes import set_value


def file_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def raw_connection(path: str) -> apsw.Connection:
    return apsw.Connection(path)


def make_session_file(root: Path, session_id: str = "s") -> str:
    repo = SqliteRepository(root)
    storage = repo.create(session_id)
    storage.commit([set_value(value("app", "k"), "v")])
    repo.close()
    return os.path.join(root, encode_session_id(session_id) + ".sqlite")


def expect_code(code: str, call: Any, *args: Any) -> ScopecheckError:
    with pytest.raises(ScopecheckError) as info:
        call(*args)
    assert info.value.code == code, info.value
    assert str(info.value)  # says what happened
    return info.value


@pytest.mark.rule("SQLITE-9")
def test_foreign_database_is_refused_untouched(tmp_path: Path) -> None:
    foreign = str(tmp_path / "x.sqlite")
    conn = raw_connection(foreign)
    conn.execute(
        "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'hi')"
    )
    conn.close()
    before = file_bytes(foreign)
    repo = SqliteRepository(tmp_path)
    assert expect_code("corrupt", repo.open, "x").details["path"] == foreign
    assert expect_code("corrupt", SqliteContainerRepository, foreign).details["path"] == foreign
    assert file_bytes(foreign) == before


@pytest.mark.rule("SQLITE-9")
def test_session_database_missing_a_table_is_corrupt_and_names_the_file(tmp_path: Path) -> None:
    """Our application id and schema version but a table gone: refused as corrupt, and the
    error names the file (the user has to find it to repair or remove it)."""
    path = make_session_file(tmp_path)
    conn = raw_connection(path)
    conn.execute("DROP TABLE list_values")
    conn.close()
    error = expect_code("corrupt", SqliteRepository(tmp_path).open, "s")
    assert error.details["path"] == path and "list_values" in str(error)


@pytest.mark.rule("SQLITE-9")
@pytest.mark.parametrize("content", [b"", b"garbage" * 300, b"SQLite format 3\x00" + b"\xff" * 200])
def test_corrupt_or_empty_file_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.sqlite"
    path.write_bytes(content)
    assert expect_code("corrupt", SqliteRepository(tmp_path).open, "x").details["path"] == str(path)
    assert path.read_bytes() == content
    if content:  # an empty container file is simply a new container
        expect_code("corrupt", SqliteContainerRepository, str(path))
        assert path.read_bytes() == content


@pytest.mark.rule("SQLITE-9")
def test_truncated_session_database_fails_with_corrupt(tmp_path: Path) -> None:
    repo = SqliteRepository(tmp_path)
    storage = repo.create("s")
    storage.commit([set_value(value("app", str(n)), "x" * 3000) for n in range(20)])
    repo.close()
    path = tmp_path / "s.sqlite"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    error = expect_code("corrupt", SqliteRepository(tmp_path).open, "s")
    assert error.details["path"] == str(path)


@pytest.mark.rule("SQLITE-9")
def test_damaged_btree_page_fails_quick_check_at_open_naming_the_file(tmp_path: Path) -> None:
    """A file whose header is intact but one of whose b-tree pages is damaged is refused at
    open by quick_check (not halfway through a later read or commit), naming the file."""
    path = make_session_file(tmp_path)
    data = bytearray(file_bytes(path))
    page = 4096  # page 2: a table b-tree page; its cell pointers now point outside the page
    data[page : page + 12] = bytes([0x0D, 0, 0, 0, 5, 0x0F, 0xFF, 0, 0, 0, 0, 0])
    with open(path, "wb") as handle:
        handle.write(data)
    error = expect_code("corrupt", SqliteRepository(tmp_path).open, "s")
    assert "quick_check" in str(error) and error.details["path"] == path


@pytest.mark.rule("SQLITE-9")
def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = make_session_file(tmp_path)
    conn = raw_connection(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = file_bytes(path)
    expect_code("unsupported_version", SqliteRepository(tmp_path).open, "s")
    expect_code("unsupported_version", SqliteContainerRepository, path)
    assert file_bytes(path) == before


@pytest.mark.rule("SQLITE-9")
def test_newer_storage_version_row_is_refused(tmp_path: Path) -> None:
    path = make_session_file(tmp_path)
    conn = raw_connection(path)
    conn.execute("UPDATE sessions SET storage_version = 2")
    conn.close()
    expect_code("unsupported_version", SqliteRepository(tmp_path).open, "s")


@pytest.mark.rule("SQLITE-9")
def test_missing_session_row_is_not_found(tmp_path: Path) -> None:
    path = make_session_file(tmp_path)
    conn = raw_connection(path)
    conn.execute("DELETE FROM sessions")
    conn.close()
    expect_code("not_found", SqliteRepository(tmp_path).open, "s")
    container = SqliteContainerRepository(tmp_path / "c.sqlite")
    expect_code("not_found", container.open, "nobody")
    expect_code("not_found", container.delete, "nobody")
    container.close()


@pytest.mark.rule("SQLITE-9")
def test_session_row_vanishing_under_an_open_storage_fails_the_commit(tmp_path: Path) -> None:
    repo = SqliteContainerRepository(tmp_path / "c.sqlite")
    storage = repo.create("s")
    other = raw_connection(str(tmp_path / "c.sqlite"))
    other.execute("DELETE FROM sessions WHERE session_id = 's'")
    other.close()
    expect_code("not_found", storage.commit, [set_value(value("a", "b"), 1)])
    repo.close()


@pytest.mark.rule("SQLITE-9")
def test_locked_database_fails_with_locked_and_writes_nothing(make_repo: Any, layout: str) -> None:
    repo = make_repo(busy_timeout_ms=30)
    storage = repo.create("s")
    storage.commit([set_value(value("app", "k"), 1)])
    path = repo.path if layout == "shared" else os.path.join(repo.root, "s.sqlite")
    blocker = raw_connection(path)
    blocker.execute("BEGIN IMMEDIATE")
    before = storage.snapshot()
    error = expect_code("locked", storage.commit, [set_value(value("app", "k"), 2)])
    assert error.details["path"] == path
    blocker.execute("ROLLBACK")
    blocker.close()
    assert storage.snapshot() == before
    assert storage.commit([set_value(value("app", "k"), 3)])[0].seq == 2


HOSTILE_IDS = [
    "..",
    ".",
    "../escape",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "~x",
    "~",
    "é",
    "sp ace",
    "a.sqlite",
    "-",
    "CON",
    "x" * 150,
    "\u2028\ufeff",
]


@pytest.mark.rule("SQLITE-10")
def test_hostile_session_ids_never_escape_the_root(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    repo = SqliteRepository(root)
    for session_id in HOSTILE_IDS:
        stem = encode_session_id(session_id)
        assert decode_file_stem(stem) == session_id
        assert "/" not in stem and "\\" not in stem and not stem.startswith(".")
        repo.create(session_id).close()
    assert sorted(os.listdir(tmp_path)) == ["repo"]
    assert all(os.path.isfile(root / name) for name in os.listdir(root))
    assert repo.list() == sorted(HOSTILE_IDS)
    for session_id in HOSTILE_IDS:
        repo.open(session_id).close()
        repo.delete(session_id)
    assert os.listdir(root) == []
    expect_code("invalid_session_id", repo.create, "y" * 300)
    expect_code("invalid_session_id", repo.create, "")
    repo.close()


@pytest.mark.rule("SQLITE-10", "SQLITE-12")
def test_repository_lifecycle_errors(make_repo: Any) -> None:
    repo = make_repo()
    storage = repo.create("s")
    expect_code("already_exists", repo.create, "s")
    expect_code("already_open", repo.open, "s")
    expect_code("already_open", repo.delete, "s")
    storage.close()
    storage.close()
    expect_code("closed", storage.commit, [])
    expect_code("closed", storage.get_value, value("a", "b"))
    expect_code("not_found", repo.open, "nope")
    expect_code("not_found", repo.delete, "nope")
    repo.close()
    expect_code("closed", repo.list)


@pytest.mark.rule("SQLITE-10", "SQLITE-12")
def test_create_ignores_sidecars_left_by_a_delete_interrupted_after_the_main_file(
    tmp_path: Path,
) -> None:
    """A crash between unlinking the database and its -wal leaves a stale -wal; creating the
    same id again must not replay it into the new Session."""
    repo = SqliteRepository(tmp_path)
    storage = repo.create("s")
    storage.commit([set_value(value("app", "old"), "stale")])
    wal = (tmp_path / "s.sqlite-wal").read_bytes()  # holds the commit (not checkpointed)
    assert wal
    storage.close()
    repo.delete("s")
    (tmp_path / "s.sqlite-wal").write_bytes(wal)  # as if the delete died before the -wal
    fresh = repo.create("s")
    assert fresh.get_value(value("app", "old")) is None
    assert fresh.commit([set_value(value("app", "new"), 1)])[0].seq == 1
    repo.close()


@pytest.mark.rule("SQLITE-17", "SQLITE-8")
@pytest.mark.parametrize("shared", [False, True], ids=["per-file", "container"])
def test_durability_settings_are_checked_before_any_file_is_opened(
    tmp_path: Path, shared: bool
) -> None:
    """A journal mode or synchronous level SQLite does not name is a coded usage error and
    creates nothing; a named one (any case) is what the connections run with; the default is
    SQLITE-8's WAL with synchronous=FULL."""
    root = tmp_path / "repo"
    cls: Any = SqliteContainerRepository if shared else SqliteRepository
    target = str(root / "c.sqlite") if shared else str(root)
    for setting, bad, code in (
        ("journal_mode", "wal; DROP TABLE sessions", "invalid_journal_mode"),
        ("journal_mode", "", "invalid_journal_mode"),
        ("synchronous", "FULLY", "invalid_synchronous"),
        ("synchronous", 2, "invalid_synchronous"),
    ):
        error = expect_code(code, functools.partial(cls, target, **{setting: bad}))
        assert error.details["field"] == setting and repr(bad) in str(error)
        assert not root.exists()
    for name, settings, expected in (
        ("default", {}, ("wal", 2)),
        ("named", {"journal_mode": "delete", "synchronous": "Normal"}, ("delete", 1)),
    ):
        where = root / name
        repo = cls(str(where / "c.sqlite") if shared else str(where), **settings)
        conn = repo.create("s").connection
        assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == expected[0]
        assert conn.execute("PRAGMA synchronous").fetchall()[0][0] == expected[1]
        repo.close()
