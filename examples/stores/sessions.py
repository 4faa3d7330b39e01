"""The Session semantics every store adapter here shares: the store keeps one record per commit.

A store adapter says only how its store keeps a Session's records (a ``Log``: ``records()`` in
commit order, ``append(record)`` as one atomic put, ``close()``) and how it makes, opens and
removes the store of one Session (a ``SessionFiles`` subclass: ``build`` and ``connect``).  The
values, lists with tags and pages, entries, usage, retirements and the one seq counter are the
dict example's (``scopecheck.examples.good_backend``), rebuilt on every open by replaying the
records, and a record is a transaction's writes as ``scopecheck.examples.good_file_backend``
spells them: ``{"t": timestamp, "w": [writes]}``.  So whatever a crash does to a Session is what
the store did to its records: the verdict is the store's (docs/findings.md).

Files: ``<root>/<quoted id><suffix>``, a file or a directory.  A Session is built aside
(``….new``) and renamed into place, and deleted by renaming it away (``….gone``) before its
files are removed, the root fsynced after each rename: a crash never leaves half a Session
under its name, and leftovers are removed when the repository is made.  A store's own error
is a ``StorageIOError`` (``io_error``), except a failed append: what a store keeps of a put
that failed is the store's to say, not the adapter's -- a record written to a log whose fsync
then failed may be read back or not -- so the commit fails with ``outcome_unknown``
(CRASH-FS-14), and the handle refuses commits with ``unusable`` until the Session is opened
again, when the store's own reading decides.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, unquote

from scopecheck import (
    CorruptError, ScopecheckError, StorageIOError, UsageTotals, check_references,
    check_session_id, check_shape, usage,
)
from scopecheck.examples.good_backend import DictRepository, DictStorage
from scopecheck.examples.good_file_backend import decode, encode

LEFTOVERS = (".new", ".gone")


class Log(Protocol):
    def records(self) -> list[dict[str, Any]]: ...
    def append(self, record: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


def dumps(record: dict[str, Any]) -> bytes:
    """A record as bytes, for stores that keep bytes (ASCII: lone surrogates survive)."""
    return json.dumps(record, separators=(",", ":")).encode()


def loads(data: bytes | str) -> dict[str, Any]:
    return json.loads(data)  # type: ignore[no-any-return]


def fsync_dir(path: str) -> None:
    """fsync the directory (or file) at ``path``, opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


class SessionFiles:
    """One store per Session under ``root``; ``durable`` is the store's durable setting, which
    also fsyncs a Session's directory after the store made its files there."""

    suffix = ".store"

    def __init__(self, root: str, *, durable: bool) -> None:
        self.root, self.durable = root, durable
        os.makedirs(root, exist_ok=True)
        for name in os.listdir(root):
            if name.endswith(tuple(self.suffix + end for end in LEFTOVERS)):
                remove(os.path.join(root, name))  # a create or a delete a crash cut short
    def path(self, session_id: str) -> str:
        return os.path.join(self.root, quote(session_id, safe="") + self.suffix)
    def names(self) -> list[str]:
        end = len(self.suffix)
        return sorted(unquote(n[:-end]) for n in os.listdir(self.root) if n.endswith(self.suffix))
    def exists(self, session_id: str) -> bool:
        return os.path.lexists(self.path(session_id))
    def build(self, path: str) -> None:
        """Make an empty store at ``path`` and close it."""
        raise NotImplementedError
    def connect(self, path: str) -> Log:
        """Open the store at ``path``."""
        raise NotImplementedError
    def create(self, session_id: str) -> Log:
        path = self.path(session_id)
        remove(path + ".new")
        self.build(path + ".new")
        if self.durable and os.path.isdir(path + ".new"):
            fsync_dir(path + ".new")  # the names of the files the store made
        os.rename(path + ".new", path)
        fsync_dir(self.root)
        return self.connect(path)
    def open(self, session_id: str) -> Log:
        return self.connect(self.path(session_id))
    def delete(self, session_id: str) -> None:
        path = self.path(session_id)
        os.rename(path, path + ".gone")
        fsync_dir(self.root)
        remove(path + ".gone")


class StoreStorage(DictStorage):
    def attach(self, log: Log) -> None:
        self.log, self.io_lock, self.unusable = log, threading.Lock(), ""
        self.now, self.real_clock = 0, self.clock
        self.clock = lambda: self.now  # the timestamp written to the store is the one applied
    def commit(self, writes: Any) -> Any:
        with self.io_lock:
            data = self._open()
            checked = check_shape(writes)
            if self.unusable:
                raise StorageIOError("unusable", f"{self.unusable}; close and reopen the Session")
            check_references(checked.writes, data["ids"].__contains__, data["entries"].__contains__)
            if not checked.writes:
                return ()
            self.now = self.real_clock()
            try:
                self.log.append({"t": self.now, "w": [encode(x) for x in checked.writes]})
            except Exception as exc:
                self.unusable = f"a write to the store failed ({exc})"
                raise StorageIOError(
                    "outcome_unknown", f"commit to {self.session_id}, kept or not: {exc}"
                ) from None
            return super().commit(checked.writes)
    def close(self) -> None:
        with self.io_lock:  # a commit writing its record finishes first; later ones see closed
            if not self.closed:
                super().close()
                try:
                    self.log.close()
                except Exception as exc:
                    raise StorageIOError("io_error", f"close {self.session_id}: {exc}") from None


def replay(session_id: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    data = {"next_seq": 1, "ids": set(), "entries": {}, "usage": {}, "values": {}, "lists": {},
            "messages": 0, "totals": UsageTotals()}
    folder = DictStorage(session_id, data, None)
    for number, record in enumerate(records):
        try:
            folder.clock = lambda t=record["t"]: t
            folder.commit([decode(x) for x in record["w"]])
        except (KeyError, TypeError, ValueError, ScopecheckError) as exc:
            raise CorruptError("corrupt", f"{session_id}: record {number}: {exc}") from None
    return data


class StoreRepository(DictRepository):
    storage_class = StoreStorage
    #: Files the store keeps for its life whatever their names, as glob patterns relative to the
    #: root: never leftovers (HYGIENE-4).
    own_files: tuple[str, ...] = ()

    def __init__(self, clock: Any, files: SessionFiles) -> None:
        super().__init__(clock)
        self.files, self.handles = files, dict[str, StoreStorage]()
        self.sessions = dict.fromkeys(self._io("list", "", lambda _: files.names()))
    def _io(self, what: str, session_id: str, call: Callable[[str], Any]) -> Any:
        try:
            return call(session_id)
        except ScopecheckError:
            raise
        except Exception as exc:
            raise StorageIOError("io_error", f"{what} {session_id!r}: {exc}") from None
    def create(self, session_id: str) -> StoreStorage:
        if check_session_id(session_id) in self.sessions or self.files.exists(session_id):
            self.sessions.setdefault(session_id, None)  # made by a create that then failed
            raise usage("already_exists", f"session {session_id!r} exists")
        log = self._io("create", session_id, self.files.create)
        return self._attach(session_id, replay(session_id, []), log)
    def open(self, session_id: str) -> StoreStorage:
        if check_session_id(session_id) not in self.sessions:
            raise usage("not_found", f"no session {session_id!r}")
        if session_id in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        log = self._io("open", session_id, self.files.open)
        try:
            data = replay(session_id, self._io("read", session_id, lambda _: log.records()))
        except BaseException:
            log.close()
            raise
        return self._attach(session_id, data, log)
    def _attach(self, session_id: str, data: dict[str, Any], log: Log) -> StoreStorage:
        self.sessions[session_id] = data
        storage: StoreStorage = self._handle(session_id)  # type: ignore[assignment]
        storage.attach(log)
        self.handles[session_id] = storage
        storage.on_close = lambda: self._closed(session_id)  # type: ignore[method-assign]
        return storage
    def _closed(self, session_id: str) -> None:
        self.open_ids.discard(session_id)
        self.handles.pop(session_id, None)
    def delete(self, session_id: str) -> None:
        if check_session_id(session_id) in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        if session_id not in self.sessions:
            raise usage("not_found", f"no session {session_id!r}")
        try:
            self._io("delete", session_id, self.files.delete)
        finally:
            if not self.files.exists(session_id):  # renamed away: gone, even if a later step failed
                self.sessions.pop(session_id, None)
    def close(self) -> None:
        for storage in list(self.handles.values()):
            storage.close()


def repository(
    clock: Any, make_files: Callable[[], SessionFiles], own_files: tuple[str, ...] = ()
) -> StoreRepository:
    """The repository over a store; a failure to reach ``root`` is a coded error too.
    ``own_files``: the store's own files (:attr:`StoreRepository.own_files`)."""
    try:
        files = make_files()
    except Exception as exc:
        raise StorageIOError("io_error", f"open the store: {exc}") from None
    found = StoreRepository(clock, files)
    found.own_files = own_files
    return found
