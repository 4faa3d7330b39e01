"""A backend on the standard library's sqlite3, doing its own file I/O under a directory:

    scopecheck validate examples/sqlite3_backend.py:make_backend

``make_backend(clock, *, root)`` takes the directory its files live in, so scopecheck gives each
run a fresh one, restarts the backend by calling the factory again over it, and removes it
afterwards.  One database per Session, ``<root>/<quoted id>.db``; a commit is one SQLite
transaction (journal_mode=DELETE, synchronous=EXTRA: FULL would not fsync the directory after
unlinking the journal, so a power loss could bring it back and roll the commit back); create and
delete fsync the directory, so a new or removed Session survives a power loss.  An I/O error
before ``COMMIT`` is a ``StorageIOError`` (code ``io_error``) and the transaction is rolled
back; one from ``COMMIT`` itself may come after the commit point (SQLite: "the transaction may or
may not be rolled back automatically", lang_transaction.html) -- a failed fsync of the journal's
directory after its unlink, say -- so it is ``outcome_unknown`` (CRASH-FS-14), and the handle
refuses commits (``unusable``) until the Session is opened again.  An open first fsyncs the
database, its journal or WAL, and the directory, so what a failed sync left in the page cache
is on disk before anyone reads it: every later reader sees what the first one did.  A scalar or
list row is keyed by ``(scope, namespace, key)`` with ``scope = ''`` for the session scope;
retirement deletes the scope's rows.  Seqs come from one counter per Session (every write takes
the next one).

Any other journal mode and ``synchronous`` setting is one factory name away,
``make_backend_<journal>_<synchronous>`` (lower case; :data:`JOURNALS` × :data:`SYNCHRONOUS`):

    scopecheck validate examples/sqlite3_backend.py:make_backend_wal_normal

-- what crash exploration says of each setting SQLite offers (``OFF`` is documented as unsafe on
power loss, ``NORMAL`` in a rollback journal too); docs/findings.md, "Calibration", sets each
verdict beside SQLite's documented durability table.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from typing import Any
from urllib.parse import quote, unquote

from scopecheck import (
    AppendList, ClosedError, Committed, DeleteList, DeleteValue, EntryRecord, InsertEntry,
    InsertUsage, ListElement, RetireScope, SetValue, Snapshot, Stats, StorageIOError, UsageRecord,
    UsageTotals,
    ValueRecord, add_usage, check_list_query, check_name, check_references, check_session_id,
    check_shape, decode_json, stop_page, usage,
)

SCHEMA = """
CREATE TABLE meta(next_seq INTEGER NOT NULL);
INSERT INTO meta VALUES (1);
CREATE TABLE entries(seq INTEGER PRIMARY KEY, id TEXT UNIQUE, parent TEXT, type TEXT,
                     payload BLOB, ts INTEGER);
CREATE TABLE usage(seq INTEGER PRIMARY KEY, id TEXT UNIQUE, body BLOB, entry TEXT, adj INTEGER,
                   details BLOB);
CREATE TABLE vals(scope TEXT, ns TEXT, key TEXT, seq INTEGER, body BLOB,
                  PRIMARY KEY(scope, ns, key));
CREATE TABLE elems(scope TEXT, ns TEXT, key TEXT, seq INTEGER PRIMARY KEY, body BLOB, tag TEXT);
CREATE INDEX elems_by_list ON elems(scope, ns, key, seq);
"""


def connect(path: str, synchronous: str = "EXTRA", journal: str = "DELETE") -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA journal_mode={journal}")
    db.execute(f"PRAGMA synchronous={synchronous}")  # FULL leaves the unlinked journal undurable
    return db


def fsync_path(path: str) -> None:
    """fsync the file or directory at ``path``, opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def companions(path: str) -> tuple[str, str, str]:
    """The files SQLite keeps beside the database ``path``: its rollback journal, WAL and
    shared-memory index."""
    return (path + "-journal", path + "-wal", path + "-shm")


def _where(address: Any) -> tuple[str, str, str]:
    return (address.scope_id or "", address.namespace, address.key)


class Sqlite3Storage:
    def __init__(self, session_id: str, db: sqlite3.Connection, clock: Any, done: Any) -> None:
        self.session_id, self.db, self.clock, self.done = session_id, db, clock, done
        self.lock, self.closed, self.unusable, self.committing = threading.Lock(), False, "", False
    def _q(self, sql: str, *args: Any) -> list[Any]:
        if self.closed:
            raise ClosedError()
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StorageIOError("io_error", f"{self.session_id}: {exc}") from None
    def commit(self, writes: Any) -> tuple[Committed, ...]:
        with self.lock:
            if self.closed:
                raise ClosedError()
            checked = check_shape(writes)
            if self.unusable:
                raise StorageIOError("unusable", f"{self.unusable}; close and reopen the Session")
            ids = lambda i: bool(self._q("SELECT 1 FROM entries WHERE id=? UNION ALL "  # noqa: E731
                                         "SELECT 1 FROM usage WHERE id=?", i, i))
            entries = lambda i: bool(self._q("SELECT 1 FROM entries WHERE id=?", i))  # noqa: E731
            check_references(checked.writes, ids, entries)
            if not checked.writes:
                return ()
            now, first = self.clock(), self._q("SELECT next_seq FROM meta")[0][0]
            done = tuple(Committed(first + i, now, x) for i, x in enumerate(checked.writes))
            try:
                self.db.execute("BEGIN IMMEDIATE")
                for item in done:
                    self._apply(item.write, item.seq, now)
                self.db.execute("UPDATE meta SET next_seq=?", (first + len(done),))
                self.committing = True
                self.db.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")
                raise self.failed(exc) from None
            finally:
                self.committing = False
            return done
    def failed(self, exc: sqlite3.Error) -> Exception:
        """What a failed commit raises: a coded error, never the driver's own exception --
        ``outcome_unknown`` when ``COMMIT`` itself failed, after which the handle is unusable."""
        if not self.committing:
            return StorageIOError("io_error", f"commit to {self.session_id}: {exc}")
        self.unusable = f"a commit failed in COMMIT ({exc}) and may have happened"
        return StorageIOError("outcome_unknown", f"commit to {self.session_id}: {exc}")
    def _apply(self, x: Any, seq: int, now: int) -> None:
        run = self.db.execute
        if isinstance(x, SetValue):
            run("INSERT OR REPLACE INTO vals VALUES (?,?,?,?,?)", (*_where(x.address), seq,
                                                                  x.value_json))
        elif isinstance(x, DeleteValue):
            run("DELETE FROM vals WHERE scope=? AND ns=? AND key=?", _where(x.address))
        elif isinstance(x, AppendList):
            run("INSERT INTO elems VALUES (?,?,?,?,?,?)", (*_where(x.address), seq,
                                                          x.element_json, x.tag))
        elif isinstance(x, DeleteList):
            run("DELETE FROM elems WHERE scope=? AND ns=? AND key=?", _where(x.address))
        elif isinstance(x, InsertEntry):
            run("INSERT INTO entries VALUES (?,?,?,?,?,?)", (seq, x.id, x.parent_id, x.type,
                                                            x.payload_json, now))
        elif isinstance(x, InsertUsage):
            run("INSERT INTO usage VALUES (?,?,?,?,?,?)", (seq, x.id, x.usage_json, x.entry_id,
                                                          int(x.adjustment), x.details_json))
        elif isinstance(x, RetireScope):
            run("DELETE FROM vals WHERE scope=?", (x.retired.id,))
            run("DELETE FROM elems WHERE scope=?", (x.retired.id,))
    def get_value(self, address: Any) -> ValueRecord | None:
        rows = self._q("SELECT seq, body FROM vals WHERE scope=? AND ns=? AND key=?",
                       *_where(address))
        return ValueRecord(rows[0][0], rows[0][1]) if rows else None
    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        check_name("namespace", namespace), check_name("prefix", prefix)
        rows = self._q("SELECT key, seq, body FROM vals WHERE scope=? AND ns=? ORDER BY key",
                       getattr(scope, "id", None) or "", namespace)
        return tuple((k, ValueRecord(s, b)) for k, s, b in rows if k.startswith(prefix))
    def read_list(self, address: Any, *, cursor: Any = None, order: Any = "asc", limit: Any = None,
                  stop_at_tag: Any = None) -> tuple[ListElement, ...]:
        q = check_list_query(cursor, order, limit, stop_at_tag)
        desc = q.order == "desc"
        bound = q.cursor if q.cursor is not None else (2**62 if desc else 0)
        rows = self._q("SELECT seq, body, tag FROM elems WHERE scope=? AND ns=? AND key=? AND "
                       f"seq {'<' if desc else '>'} ? ORDER BY seq {'DESC' if desc else 'ASC'} "
                       "LIMIT ?", *_where(address), bound, q.limit)
        return tuple(stop_page([ListElement(*row) for row in rows], q.stop_at_tag))
    def get_entry(self, entry_id: str) -> EntryRecord | None:
        rows = self._q("SELECT id, parent, type, payload, seq, ts FROM entries WHERE id=?",
                       entry_id)
        return EntryRecord(*rows[0]) if rows else None
    def get_usage(self, usage_id: str) -> UsageRecord | None:
        rows = self._q("SELECT id, body, entry, adj, details, seq FROM usage WHERE id=?",
                       usage_id)
        return self._usage(rows[0]) if rows else None
    @staticmethod
    def _usage(row: Any) -> UsageRecord:
        return UsageRecord(row[0], row[1], row[2], bool(row[3]), row[4], row[5])
    def stats(self) -> Stats:
        totals = UsageTotals()
        for (body,) in self._q("SELECT body FROM usage ORDER BY seq"):
            totals = add_usage(totals, decode_json(body))
        return Stats(self._q("SELECT count(*) FROM entries WHERE type='message'")[0][0], totals)
    def snapshot(self) -> Snapshot:
        def key(scope: str, ns: str, k: str) -> Any:
            return (scope or None, ns, k)
        values = [(key(*r[:3]), ValueRecord(r[3], r[4]))
                  for r in self._q("SELECT scope, ns, key, seq, body FROM vals")]
        lists: dict[Any, list[ListElement]] = {}
        for r in self._q("SELECT scope, ns, key, seq, body, tag FROM elems ORDER BY seq"):
            lists.setdefault(key(*r[:3]), []).append(ListElement(r[3], r[4], r[5]))
        order = lambda kv: Snapshot.sort_key(kv[0])  # noqa: E731
        return Snapshot(
            tuple(EntryRecord(*r) for r in self._q("SELECT id, parent, type, payload, seq, ts "
                                                  "FROM entries ORDER BY seq")),
            tuple(self._usage(r) for r in self._q("SELECT id, body, entry, adj, details, seq "
                                                  "FROM usage ORDER BY seq")),
            tuple(sorted(values, key=order)),
            tuple(sorted(((k, tuple(v)) for k, v in lists.items()), key=order)), self.stats())
    def close(self) -> None:
        with self.lock:  # admitted commits hold the lock: close waits for them, then seals
            if not self.closed:
                self.closed = True
                self.db.close()
                self.done(self.session_id)


class Sqlite3Repository:
    def __init__(self, clock: Any, root: str, synchronous: str = "EXTRA",
                 journal: str = "DELETE") -> None:
        self.clock, self.root, self.open_ids = clock, root, dict[str, Sqlite3Storage]()
        self.synchronous, self.journal = synchronous, journal
        os.makedirs(root, exist_ok=True)
    def sync_dir(self) -> None:
        fsync_path(self.root)
    def path(self, session_id: str) -> str:
        return os.path.join(self.root, quote(session_id, safe="") + ".db")
    def list(self) -> list[str]:
        return sorted(unquote(n[:-3]) for n in os.listdir(self.root) if n.endswith(".db"))
    def create(self, session_id: str) -> Sqlite3Storage:
        path = self.path(check_session_id(session_id))
        if os.path.exists(path):
            raise usage("already_exists", f"session {session_id!r} exists")
        try:  # built aside, then renamed: a crash leaves no half Session
            # A create a crash cut short starts over; a journal left by a deleted Session of
            # this name goes first and durably, or SQLite would roll it into the new database.
            if self._unlink(path + ".new", *companions(path + ".new"), *companions(path)):
                self.sync_dir()
            db = connect(path + ".new", self.synchronous, self.journal)
            db.executescript(SCHEMA)
            db.close()
            self._unlink(*companions(path + ".new"))  # TRUNCATE keeps its emptied journal
            os.replace(path + ".new", path)
            self.sync_dir()
        except (OSError, sqlite3.Error) as exc:
            with contextlib.suppress(OSError):
                os.unlink(path + ".new")
            raise StorageIOError("io_error", f"create {session_id}: {exc}") from None
        return self._handle(session_id, path)
    def open(self, session_id: str) -> Sqlite3Storage:
        path = self.path(check_session_id(session_id))
        if not os.path.exists(path):
            raise usage("not_found", f"no session {session_id!r}")
        if session_id in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        return self._handle(session_id, path)
    storage_class = Sqlite3Storage
    def _handle(self, session_id: str, path: str) -> Sqlite3Storage:
        try:
            for name in (path, *companions(path)[:2]):  # durable before anyone reads it
                if os.path.exists(name):
                    fsync_path(name)
            self.sync_dir()
            db = connect(path, self.synchronous, self.journal)
        except (OSError, sqlite3.Error) as exc:
            raise StorageIOError("io_error", f"open {session_id}: {exc}") from None
        storage = self.storage_class(session_id, db, self.clock, self.open_ids.pop)
        self.open_ids[session_id] = storage
        return storage
    def delete(self, session_id: str) -> None:
        path = self.path(check_session_id(session_id))
        if session_id in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        if not os.path.exists(path):
            raise usage("not_found", f"no session {session_id!r}")
        try:
            os.unlink(path)
            self._unlink(*companions(path), path + ".new", *companions(path + ".new"))
            self.sync_dir()
        except OSError as exc:
            raise StorageIOError("io_error", f"delete {session_id}: {exc}") from None
    @staticmethod
    def _unlink(*paths: str) -> bool:
        """Remove those of ``paths`` that exist; whether any did."""
        found = [p for p in paths if os.path.exists(p)]
        for leftover in found:
            os.unlink(leftover)
        return bool(found)
    def close(self) -> None:
        for storage in list(self.open_ids.values()):
            storage.close()


def make_backend(clock: Any, *, root: str) -> Sqlite3Repository:
    return Sqlite3Repository(clock, root)


#: The journal modes and ``synchronous`` settings ``make_backend_<journal>_<synchronous>`` takes
#: (journal modes that keep the journal on disk; MEMORY and OFF lose it by design).
JOURNALS = ("DELETE", "TRUNCATE", "WAL")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def __getattr__(name: str) -> Any:
    """``make_backend_<journal>_<synchronous>`` (``make_backend_wal_off``): the factory of this
    backend with that journal mode and ``synchronous`` setting; any other name is missing."""
    journal, _, synchronous = name.removeprefix("make_backend_").upper().partition("_")
    known = journal in JOURNALS and synchronous in SYNCHRONOUS
    if not name.startswith("make_backend_") or not known:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def factory(clock: Any, *, root: str) -> Sqlite3Repository:
        return Sqlite3Repository(clock, root, synchronous=synchronous, journal=journal)

    factory.__name__ = factory.__qualname__ = name
    return factory

