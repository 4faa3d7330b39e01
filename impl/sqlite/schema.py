"""SQLite schema, connection setup and error translation (000 §8, REFERENCE §4).

One schema serves both layouts: every row is keyed by ``session_id`` so a container file can
hold many Sessions and a per-file database holds exactly one (SQLITE-1).  Scalar and list rows
carry ``scope_id`` (``''`` for the session scope) in their primary key, so every point read,
scan, write and delete-by-scope is an index lookup on exact scope identity (SQLITE-2).

Durability policy (SQLITE-8): WAL journal with ``synchronous=FULL``.  In WAL mode FULL syncs the
WAL at every commit, so an acknowledged commit survives power loss; NORMAL would only sync at
checkpoints and could lose the latest acknowledged commits.  The crash sweeps
(``crashsim/sqlite_sweep.py``) check this and show that OFF loses commits.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import apsw

from scopecheck.models.errors import CorruptError, ScopecheckError, StorageIOError, UsageError

#: ``PRAGMA application_id`` of a scopecheck database ("SCOP"); anything else is foreign.
APPLICATION_ID: Final = 0x53434F50
#: ``PRAGMA user_version``: the schema version this code reads and writes.
SCHEMA_VERSION: Final = 1
#: ``sessions.storage_version`` of the rows this code writes; a larger one is refused.
STORAGE_VERSION: Final = 1

#: Token totals are stored in columns without affinity: an int that does not fit 64 bits is
#: kept as decimal text so the running sum stays exact (Memory sums unbounded Python ints).
TOKEN_COLUMNS: Final = (
    "usage_input",
    "usage_output",
    "usage_cache_read",
    "usage_cache_write",
    "usage_total_tokens",
)
COST_COLUMNS: Final = (
    "cost_input",
    "cost_output",
    "cost_cache_read",
    "cost_cache_write",
    "cost_total",
)

DDL: Final = f"""
CREATE TABLE sessions(
  session_id TEXT NOT NULL PRIMARY KEY,
  storage_version INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  next_seq INTEGER NOT NULL,
  message_count INTEGER NOT NULL,
  parent_session_id TEXT,
  {", ".join(f"{c} NOT NULL" for c in TOKEN_COLUMNS)},
  {", ".join(f"{c} REAL NOT NULL" for c in COST_COLUMNS)}
) WITHOUT ROWID;

CREATE TABLE entries(
  session_id TEXT NOT NULL,
  id TEXT NOT NULL,
  parent_id TEXT,
  type TEXT NOT NULL,
  payload TEXT NOT NULL,
  seq INTEGER NOT NULL,
  timestamp INTEGER NOT NULL,
  PRIMARY KEY(session_id, id)
) WITHOUT ROWID;

CREATE TABLE usage_ledger(
  session_id TEXT NOT NULL,
  id TEXT NOT NULL,
  usage TEXT NOT NULL,
  entry_id TEXT,
  adjustment INTEGER NOT NULL,
  details TEXT,
  seq INTEGER NOT NULL,
  PRIMARY KEY(session_id, id)
) WITHOUT ROWID;

CREATE TABLE scalar_values(
  session_id TEXT NOT NULL,
  scope_id TEXT NOT NULL,
  namespace TEXT NOT NULL,
  key TEXT NOT NULL,
  seq INTEGER NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY(session_id, scope_id, namespace, key)
) WITHOUT ROWID;

CREATE TABLE list_values(
  session_id TEXT NOT NULL,
  scope_id TEXT NOT NULL,
  namespace TEXT NOT NULL,
  key TEXT NOT NULL,
  seq INTEGER NOT NULL,
  value TEXT NOT NULL,
  tag TEXT,
  PRIMARY KEY(session_id, scope_id, namespace, key, seq)
) WITHOUT ROWID;

PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""

TABLES: Final = ("sessions", "entries", "usage_ledger", "scalar_values", "list_values")


class translate:
    """Turn APSW errors into scopecheck errors with stable codes (ERR-1, SQLITE-9).

    Our own errors and BaseExceptions (a simulated crash) pass through untouched.  A class,
    not ``@contextmanager``: it wraps every read and commit, so its cost matters.
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None or isinstance(exc, ScopecheckError):
            return
        path = self.path
        if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
            raise StorageIOError(
                "locked",
                f"database {path} is locked by another writer; retry later or raise the busy "
                f"timeout ({exc})",
                path=path,
            ) from exc
        if isinstance(exc, (apsw.CorruptError, apsw.NotADBError, apsw.FormatError)):
            raise CorruptError(
                "corrupt", f"{path} is not a valid SQLite database ({exc})", path=path
            ) from exc
        if isinstance(exc, apsw.Error):
            raise StorageIOError("io_error", f"SQLite failed on {path}: {exc}", path=path) from exc
        if isinstance(exc, UnicodeDecodeError):  # a damaged page that still parses
            raise CorruptError(
                "corrupt", f"{path} holds text that is not UTF-8 ({exc})", path=path
            ) from exc


def connect(
    path: str,
    *,
    create: bool,
    vfs: str | None,
    busy_timeout_ms: int,
    journal_mode: str,
    synchronous: str,
) -> apsw.Connection:
    """Open ``path`` and apply the durability policy; never creates the file unless ``create``.

    The header checks run before any write, so a foreign or newer file is refused untouched
    (SQLITE-9).  Returns a connection whose database either holds our schema or is empty (only
    when ``create``), in which case the caller initialises it in its own transaction.
    """
    flags = apsw.SQLITE_OPEN_READWRITE
    if create:
        flags |= apsw.SQLITE_OPEN_CREATE
    with translate(path):
        try:
            conn = apsw.Connection(path, flags=flags, vfs=vfs)
        except apsw.CantOpenError as exc:
            raise UsageError("not_found", f"no database at {path}", path=path) from exc
        try:
            conn.set_busy_timeout(busy_timeout_ms)
            check_header(conn, path, allow_empty=create)
            conn.execute(f"PRAGMA journal_mode={journal_mode}")
            conn.execute(f"PRAGMA synchronous={synchronous}")
        except BaseException:
            with contextlib.suppress(apsw.Error):
                conn.close()
            raise
    return conn


def is_empty(conn: apsw.Connection) -> bool:
    row = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    return row is not None and row[0] == 0


def check_header(conn: apsw.Connection, path: str, *, allow_empty: bool) -> None:
    """Refuse foreign, damaged and newer databases before touching them (SQLITE-9)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()
    version = conn.execute("PRAGMA user_version").fetchone()
    assert app_id is not None and version is not None
    if app_id[0] == 0 and version[0] == 0 and is_empty(conn):
        if allow_empty:
            return
        raise CorruptError(
            "corrupt", f"{path} is an empty database, not a scopecheck session store", path=path
        )
    if app_id[0] != APPLICATION_ID:
        raise CorruptError(
            "corrupt",
            f"{path} is a foreign SQLite database (application_id {app_id[0]:#x}, expected "
            f"{APPLICATION_ID:#x}); point the repository at a scopecheck directory",
            path=path,
        )
    if version[0] > SCHEMA_VERSION:
        raise CorruptError(
            "unsupported_version",
            f"{path} has schema version {version[0]}; this scopecheck reads up to "
            f"{SCHEMA_VERSION}; upgrade scopecheck",
            path=path,
        )
    if version[0] < 1:
        raise CorruptError("corrupt", f"{path} has no scopecheck schema", path=path)
    # A truncated or damaged file is detected here rather than halfway through a commit.
    check = conn.execute("PRAGMA quick_check(1)").fetchone()
    if check is None or check[0] != "ok":
        raise CorruptError("corrupt", f"{path} failed quick_check: {check}", path=path)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
    missing = [t for t in TABLES if t not in names]
    if missing:
        raise CorruptError("corrupt", f"{path} lacks tables {missing}", path=path)


def initialise(conn: apsw.Connection) -> None:
    """Create the schema in the caller's transaction."""
    conn.execute(DDL)
