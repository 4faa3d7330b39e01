"""SQLite repositories: one database file per Session, or one container file for many.

Per-file layout (SQLITE-10): ``<root>/<encoded id>.sqlite``.  An id made only of
``[A-Za-z0-9_-]`` is its own file name; any other id is ``~`` + unpadded base64url of its UTF-8
bytes, so a hostile id (``..``, ``/``, NUL-free Unicode) can never name a path outside ``root``.
A Session file is built under a temporary dot-name and published with ``link`` (which fails if
the name exists), so a crash during create leaves no half-initialised Session behind.

Container layout (SQLITE-11): one file holds many Sessions; create inserts the ``sessions`` row
and delete removes every row of that Session in one transaction, whatever its scope.

Both layouts take the same keyword-only settings and collaborators: the durability pragmas
``journal_mode`` and ``synchronous`` (SQLITE-8; anything SQLite does not name is refused with
``invalid_journal_mode`` / ``invalid_synchronous`` before a file is touched, SQLITE-17), the
``sequence`` policy (SEQ-1, SQLITE-5) and the ``retirement`` policy (SQLITE-3) handed to every
Session, and the fork's ``fork_driver`` (the closed classifier of 001 §1.2) and ``fork_stage``
(the staging reader of 001 §1.3, SQLITE-16).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final, TypedDict, Unpack

import apsw

from scopecheck.impl.memory import new_fork_id, wall_clock_ms
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, SequencePolicy
from scopecheck.impl.sqlite.fork import Stage, publish_stage, run_stage
from scopecheck.impl.sqlite.retirement import SCOPED_DELETES, Retirement
from scopecheck.impl.sqlite.schema import (
    COST_COLUMNS,
    STORAGE_VERSION,
    TABLES,
    TOKEN_COLUMNS,
    connect,
    initialise,
    is_empty,
    translate,
)
from scopecheck.impl.sqlite.storage import SqliteStorage
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import (
    ClosedError,
    CorruptError,
    ScopecheckError,
    StorageIOError,
    usage,
)
from scopecheck.models.fork import ForkOptions, check_fork_options
from scopecheck.models.fork_policy import ForkDriver
from scopecheck.models.protocols import Clock

_SAFE_ID: Final = re.compile(r"[A-Za-z0-9_-]+\Z")
_SUFFIX: Final = ".sqlite"
#: Sidecar files SQLite may keep next to a database.
SIDECARS: Final = ("-wal", "-shm", "-journal")
_MAX_NAME: Final = 255 - len(_SUFFIX) - len("-journal")
#: The values SQLite's ``PRAGMA journal_mode`` and ``PRAGMA synchronous`` accept by name.
JOURNAL_MODES: Final = ("DELETE", "TRUNCATE", "PERSIST", "MEMORY", "WAL", "OFF")
SYNCHRONOUS_LEVELS: Final = ("OFF", "NORMAL", "FULL", "EXTRA")


def encode_session_id(session_id: str) -> str:
    """The file stem of ``session_id`` in the per-file layout (never a path, SQLITE-10)."""
    if _SAFE_ID.match(session_id):
        return session_id
    raw = base64.urlsafe_b64encode(session_id.encode("utf-8")).decode("ascii")
    return "~" + raw.rstrip("=")


def decode_file_stem(stem: str) -> str | None:
    """Inverse of :func:`encode_session_id`; ``None`` for a name we did not produce."""
    if _SAFE_ID.match(stem):
        return stem
    if not stem.startswith("~"):
        return None
    body = stem[1:]
    try:
        decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded if decoded and encode_session_id(decoded) == stem else None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _pragma_value(code: str, name: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` as the upper-case name SQLite knows, else a ``usage(code)`` error: the value
    is spliced into a PRAGMA, so anything else is refused before any file is opened (SQLITE-17)."""
    if isinstance(value, str) and value.upper() in allowed:
        return value.upper()
    raise usage(code, f"{name} must be one of {', '.join(allowed)}; got {value!r}", field=name)


class SqliteOptions(TypedDict, total=False):
    """The keyword settings and policies of both layouts (defaults in :class:`_Base`)."""

    vfs: str | None
    busy_timeout_ms: int
    journal_mode: str
    synchronous: str
    sequence: SequencePolicy
    retirement: Retirement
    fork_driver: type[ForkDriver]
    fork_stage: type[Stage]


class _Base:
    """What both layouts share: open-handle bookkeeping, the durability settings and the
    policies handed to every Session and fork."""

    def __init__(
        self,
        clock: Clock = wall_clock_ms,
        *,
        vfs: str | None = None,
        busy_timeout_ms: int = 5000,
        journal_mode: str = "WAL",
        synchronous: str = "FULL",
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = SCOPED_DELETES,
        fork_driver: type[ForkDriver] = ForkDriver,
        fork_stage: type[Stage] = Stage,
    ) -> None:
        #: Durability policy (SQLITE-8): WAL with synchronous=FULL unless told otherwise.
        self._journal_mode = _pragma_value(
            "invalid_journal_mode", "journal_mode", journal_mode, JOURNAL_MODES
        )
        self._synchronous = _pragma_value(
            "invalid_synchronous", "synchronous", synchronous, SYNCHRONOUS_LEVELS
        )
        #: Which seqs a transaction gets (SEQ-1, SQLITE-5).
        self._sequence = sequence
        #: How a committed retirement ends a scope's lifetime (000 §2, SQLITE-3).
        self._retirement = retirement
        #: The closed fork classifier (001 §1.2) and the staging reader (001 §1.3, SQLITE-16).
        self._fork_driver = fork_driver
        self._fork_stage = fork_stage
        self._clock = clock
        self._vfs = vfs
        self._busy_timeout_ms = busy_timeout_ms
        self._open: dict[str, SqliteStorage] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("repository is closed")

    def _connect(self, path: str, *, create: bool) -> apsw.Connection:
        return connect(
            path,
            create=create,
            vfs=self._vfs,
            busy_timeout_ms=self._busy_timeout_ms,
            journal_mode=self._journal_mode,
            synchronous=self._synchronous,
        )

    def _check_row(self, conn: apsw.Connection, path: str, session_id: str) -> None:
        """The Session row exists and is not from a newer storage version (SQLITE-9)."""
        with translate(path):
            row = conn.execute(
                "SELECT storage_version FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        if row is None:
            raise usage("not_found", f"no session {session_id!r} in {path}", path=path)
        if row[0] > STORAGE_VERSION:
            raise CorruptError(
                "unsupported_version",
                f"session {session_id!r} in {path} has storage version {row[0]}; this "
                f"scopecheck reads up to {STORAGE_VERSION}; upgrade scopecheck",
                path=path,
            )

    def _track(self, session_id: str, conn: apsw.Connection, path: str) -> SqliteStorage:
        def forget(_: SqliteStorage) -> None:
            self._open.pop(session_id, None)

        storage = SqliteStorage(
            session_id,
            conn,
            path,
            self._clock,
            forget,
            sequence=self._sequence,
            retirement=self._retirement,
        )
        self._open[session_id] = storage
        return storage

    def _open_storage(self, session_id: str, path: str) -> SqliteStorage:
        conn = self._connect(path, create=False)
        try:
            self._check_row(conn, path, session_id)
        except BaseException:
            with contextlib.suppress(apsw.Error):
                conn.close()
            raise
        return self._track(session_id, conn, path)

    def _insert_session_row(
        self,
        conn: apsw.Connection,
        session_id: str,
        *,
        next_seq: int = 1,
        message_count: int = 0,
        parent: str | None = None,
    ) -> None:
        zeros = ", ".join("0" for _ in TOKEN_COLUMNS)
        reals = ", ".join("0.0" for _ in COST_COLUMNS)
        conn.execute(
            f"INSERT INTO sessions(session_id, storage_version, created_at, next_seq, "
            f"message_count, parent_session_id, {', '.join(TOKEN_COLUMNS)}, "
            f"{', '.join(COST_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, {zeros}, {reals})",
            (session_id, STORAGE_VERSION, self._clock(), next_seq, message_count, parent),
        )

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """Fork through a staging database (001 §1.3 SQLite, SQLITE-15).  The repository lock
        is held throughout, which reserves the destination id against a concurrent create; a
        rejection publishes nothing, and the stage is removed either way (FORK-1, FORK-13)."""
        options = check_fork_options(options)
        check_session_id(source_id)
        dest_id = check_session_id(options.id) if options.id is not None else new_fork_id()
        with self._lock:
            self._check()
            source_path = self._fork_source(source_id)
            self._fork_reserve(dest_id)
            run_stage(
                self._stage_dir(),
                source_path,
                source_id,
                options,
                self._open.get(source_id),
                lambda stage, high: self._fork_publish(stage, dest_id, source_id, high),
                self._fork_driver,
                self._fork_stage,
                self._vfs,
            )
        return dest_id

    def _fork_source(self, source_id: str) -> str:
        raise NotImplementedError

    def _fork_reserve(self, dest_id: str) -> None:
        raise NotImplementedError

    def _stage_dir(self) -> str:
        raise NotImplementedError

    def _fork_publish(self, stage: str, dest_id: str, source_id: str, high_water: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closed = True
        for storage in list(self._open.values()):
            storage.close()


class SqliteRepository(_Base):
    """Per-file layout: ``<root>/<encoded id>.sqlite`` per Session (SQLITE-10)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        clock: Clock = wall_clock_ms,
        **options: Unpack[SqliteOptions],
    ) -> None:
        super().__init__(clock, **options)
        self.root = os.path.abspath(os.fspath(root))
        os.makedirs(self.root, exist_ok=True)

    def path_for(self, session_id: str) -> str:
        stem = encode_session_id(check_session_id(session_id))
        if len(stem) > _MAX_NAME:
            raise usage(
                "invalid_session_id",
                f"session id is too long for a file name in the per-file layout "
                f"({len(stem)} > {_MAX_NAME} encoded characters); use the container layout",
            )
        return os.path.join(self.root, stem + _SUFFIX)

    def create(self, session_id: str) -> SqliteStorage:
        path = self.path_for(session_id)
        with self._lock:
            self._check()
            if session_id in self._open or os.path.exists(path):
                raise usage("already_exists", f"session {session_id!r} already exists (REPO-1)")
            self._build(session_id, path)
            return self._open_storage(session_id, path)

    def _build(self, session_id: str, path: str) -> None:
        """Initialise under a temp name, then publish with ``link`` (exclusive create)."""

        def fill(conn: apsw.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            initialise(conn)
            self._insert_session_row(conn, session_id)
            conn.execute("COMMIT")

        self._build_and_link(session_id, path, fill, "create")

    def _build_and_link(
        self, session_id: str, path: str, fill: Callable[[apsw.Connection], None], verb: str
    ) -> None:
        """Run ``fill`` on a database under a temp name in the root, then publish it as
        ``path`` with ``link`` (exclusive: an existing Session is ``already_exists``) and fsync
        the directory; the temp name and its journals are removed whatever happens."""
        tmp = os.path.join(self.root, f".{uuid.uuid4().hex}.sqlite.tmp")
        try:
            conn = self._connect(tmp, create=True)
            try:
                with translate(tmp):
                    fill(conn)
            finally:
                with contextlib.suppress(apsw.Error):
                    conn.close()
            for suffix in SIDECARS:  # stale files of a Session deleted halfway
                _remove(path + suffix)
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise usage(
                    "already_exists", f"session {session_id!r} already exists (REPO-1)"
                ) from None
            _fsync_dir(self.root)
        except ScopecheckError:
            raise
        except OSError as exc:
            raise StorageIOError("io_error", f"cannot {verb} {path}: {exc}", path=path) from exc
        finally:
            for suffix in ("", *SIDECARS):
                _remove(tmp + suffix)

    def _fork_source(self, source_id: str) -> str:
        path = self.path_for(source_id)
        if not os.path.exists(path):
            raise usage("not_found", f"no session {source_id!r}")
        return path

    def _fork_reserve(self, dest_id: str) -> None:
        if dest_id in self._open or os.path.exists(self.path_for(dest_id)):
            raise usage("already_exists", f"session {dest_id!r} already exists (REPO-1)")

    def _stage_dir(self) -> str:
        return self.root

    def _fork_publish(self, stage: str, dest_id: str, source_id: str, high_water: int) -> None:
        """Build the destination under a temp name in one transaction, publish with ``link``."""

        def fill(conn: apsw.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            initialise(conn)
            conn.execute("COMMIT")
            publish_stage(conn, stage, dest_id, source_id, high_water, self._insert_session_row)

        self._build_and_link(dest_id, self.path_for(dest_id), fill, "fork into")

    def open(self, session_id: str) -> SqliteStorage:
        path = self.path_for(session_id)
        with self._lock:
            self._check()
            if session_id in self._open:
                raise usage("already_open", f"session {session_id!r} is already open (REPO-4)")
            if not os.path.exists(path):
                raise usage("not_found", f"no session {session_id!r}")
            return self._open_storage(session_id, path)

    def list(self) -> list[str]:
        self._check()
        found = []
        for name in os.listdir(self.root):
            if name.startswith(".") or not name.endswith(_SUFFIX):
                continue
            session_id = decode_file_stem(name[: -len(_SUFFIX)])
            if session_id is not None:
                found.append(session_id)
        return sorted(found)

    def delete(self, session_id: str) -> None:
        """Remove the database and its ``-wal``/``-shm``; the main file goes first so the
        Session vanishes from ``list()`` at once (SQLITE-12)."""
        path = self.path_for(session_id)
        with self._lock:
            self._check()
            if session_id in self._open:
                raise usage("already_open", f"close session {session_id!r} before deleting it")
            if not os.path.exists(path):
                raise usage("not_found", f"no session {session_id!r}")
            try:
                os.unlink(path)
                for suffix in SIDECARS:
                    _remove(path + suffix)
                _fsync_dir(self.root)
            except OSError as exc:
                raise StorageIOError("io_error", f"cannot delete {path}: {exc}") from exc


class SqliteContainerRepository(_Base):
    """Container layout: every Session in one database file (SQLITE-11)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock = wall_clock_ms,
        **options: Unpack[SqliteOptions],
    ) -> None:
        super().__init__(clock, **options)
        self.path = os.path.abspath(os.fspath(path))
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._conn = self._connect(self.path, create=True)
        try:
            with translate(self.path):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if is_empty(self._conn):
                        initialise(self._conn)
                    self._conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(apsw.Error):
                        self._conn.execute("ROLLBACK")
                    raise
        except BaseException:
            with contextlib.suppress(apsw.Error):
                self._conn.close()
            raise

    def create(self, session_id: str) -> SqliteStorage:
        check_session_id(session_id)
        with self._lock:
            self._check()
            with translate(self.path):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    exists = self._conn.execute(
                        "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)
                    ).fetchone()
                    if exists is not None:
                        raise usage(
                            "already_exists", f"session {session_id!r} already exists (REPO-1)"
                        )
                    self._insert_session_row(self._conn, session_id)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            return self._open_storage(session_id, self.path)

    def _rollback(self) -> None:
        with contextlib.suppress(apsw.Error):
            if not self._conn.get_autocommit():
                self._conn.execute("ROLLBACK")

    def _has_row(self, session_id: str) -> bool:
        with translate(self.path):
            rows = self._conn.execute(
                "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchall()
        return bool(rows)

    def _fork_source(self, source_id: str) -> str:
        if not self._has_row(source_id):
            raise usage("not_found", f"no session {source_id!r}")
        return self.path

    def _fork_reserve(self, dest_id: str) -> None:
        if self._has_row(dest_id):
            raise usage("already_exists", f"session {dest_id!r} already exists (REPO-1)")

    def _stage_dir(self) -> str:
        return os.path.dirname(self.path)

    def _fork_publish(self, stage: str, dest_id: str, source_id: str, high_water: int) -> None:
        """Only the new Session's rows are written, in one BEGIN IMMEDIATE (SQLITE-15)."""

        def recheck() -> None:
            if self._conn.execute(
                "SELECT 1 FROM sessions WHERE session_id = ?", (dest_id,)
            ).fetchall():
                raise usage("already_exists", f"session {dest_id!r} already exists (REPO-1)")

        with translate(self.path):
            publish_stage(
                self._conn,
                stage,
                dest_id,
                source_id,
                high_water,
                self._insert_session_row,
                recheck,
            )

    def open(self, session_id: str) -> SqliteStorage:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id in self._open:
                raise usage("already_open", f"session {session_id!r} is already open (REPO-4)")
            self._check_row(self._conn, self.path, session_id)
            return self._open_storage(session_id, self.path)

    def list(self) -> list[str]:
        self._check()
        with translate(self.path):
            rows = self._conn.execute("SELECT session_id FROM sessions ORDER BY session_id")
            return [row[0] for row in rows]

    def delete(self, session_id: str) -> None:
        """Every row of the Session, in every scope, in one transaction (SQLITE-12)."""
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id in self._open:
                raise usage("already_open", f"close session {session_id!r} before deleting it")
            with translate(self.path):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if (
                        self._conn.execute(
                            "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)
                        ).fetchone()
                        is None
                    ):
                        raise usage("not_found", f"no session {session_id!r}")
                    for table in TABLES:
                        self._conn.execute(
                            f"DELETE FROM {table} WHERE session_id = ?", (session_id,)
                        )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        with translate(self.path):
            self._conn.close()

    @property
    def connection(self) -> Any:
        return self._conn
