"""A file-backed backend: the dict example plus one JSON-lines log per Session, written through
scopecheck's FileSystem layer (``scopecheck.FileSystem``) so ``scopecheck validate`` explores its
crashes too:

    scopecheck validate examples/good_file_backend.py:make_backend

Because ``make_backend`` takes ``fs`` and ``root``, scopecheck runs the machine over real temp
directories and the crash sweep over a simulated disk that can lose unsynced data.  Files:
``<root>/<quoted session id>.log``, one line per transaction ``{"t": timestamp, "w": [writes]}``.
Durability: a commit appends its line and fsyncs before returning; create writes an empty file
and fsyncs it and the directory; delete unlinks and fsyncs the directory.  Recovery: open
replays the complete lines and cuts a torn last line off (an unacknowledged commit) before
appending anything after it.  I/O errors (CRASH-FS-9..11): a failed append is cut back to the
last acknowledged line, so nothing ever follows a partial line; after a failed fsync (whose
data the OS may already have dropped) or a failed cut the handle refuses writes with code
``unusable`` until the Session is reopened.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote, unquote

import orjson

from scopecheck import (
    SESSION, AppendList, DeleteList, DeleteValue, FileSystem, InsertEntry, InsertUsage,
    ListAddress, RetireScope, SetValue, StorageIOError, UsageTotals, ValueAddress,
    check_references, check_session_id, check_shape, ephemeral_scope, usage,
)
from scopecheck.examples.good_backend import DictRepository, DictStorage

_ADDRESSED = {"set": SetValue, "del": DeleteValue, "app": AppendList, "drop": DeleteList}
_KIND = {cls: kind for kind, cls in _ADDRESSED.items()}


def encode(x: Any) -> list[Any]:
    """A write as JSON; JSON payloads are kept as their exact text (byte-for-byte on reopen)."""
    if type(x) in _KIND:
        a = x.address
        extra = [v.decode() for v in (getattr(x, "value_json", None), getattr(x, "element_json",
                 None)) if v is not None] + ([x.tag] if isinstance(x, AppendList) else [])
        return [_KIND[type(x)], a.scope_id, a.namespace, a.key, *extra]
    if isinstance(x, InsertEntry):
        return ["entry", x.id, x.parent_id, x.type, x.payload_json.decode()]
    if isinstance(x, InsertUsage):
        details = None if x.details_json is None else x.details_json.decode()
        return ["usage", x.id, x.usage_json.decode(), x.entry_id, x.adjustment, details]
    return ["retire", x.retired.id]


def decode(item: list[Any]) -> Any:
    kind, *rest = item
    if kind in _ADDRESSED:
        scope_id, namespace, key, *extra = rest
        scope = SESSION if scope_id is None else ephemeral_scope(scope_id)
        address: Any = ValueAddress if kind in ("set", "del") else ListAddress
        where = address(namespace, key, scope)
        args = [e.encode() for e in extra[:1]] + extra[1:]
        return _ADDRESSED[kind](where, *args)
    if kind == "entry":
        return InsertEntry(rest[0], rest[1], rest[2], rest[3].encode())
    if kind == "usage":
        details = None if rest[4] is None else rest[4].encode()
        return InsertUsage(rest[0], rest[1].encode(), rest[2], rest[3], details)
    return RetireScope(ephemeral_scope(rest[0]))


class FileStorage(DictStorage):
    def attach(self, fs: Any, path: str) -> None:
        self.fs, self.handle, self.io_lock = fs, fs.open_append(path), threading.Lock()
        self.size, self.unusable = fs.file_size(path), ""
        self.now, self.real_clock = 0, self.clock
        self.clock = lambda: self.now  # the timestamp written to the log is the one applied
    def commit(self, writes: Any) -> Any:
        with self.io_lock:
            data = self._open()
            checked = check_shape(writes)  # the items and the one scope, then unusable
            if self.unusable:
                raise StorageIOError("unusable", f"{self.unusable}; close and reopen the Session")
            check_references(checked.writes, data["ids"].__contains__, data["entries"].__contains__)
            if not checked.writes:
                return ()
            self.now = self.real_clock()
            line = {"t": self.now, "w": [encode(x) for x in checked.writes]}
            self.persist(orjson.dumps(line) + b"\n")
            return super().commit(checked.writes)
    def persist(self, line: bytes) -> None:
        try:
            self.fs.append(self.handle, line)
        except StorageIOError:
            self.cut_back("an append failed and could not be cut back")
            raise
        try:
            self.fs.fsync(self.handle)  # durable before the commit is acknowledged
        except StorageIOError:
            self.cut_back("")
            self.unusable = "an fsync failed (its data may be lost)"
            raise
        self.size += len(line)
    def cut_back(self, why: str) -> None:
        """Cut a failed line off, so the next commit does not land after part of it."""
        try:
            self.fs.truncate(self.handle, self.size)
        except StorageIOError:
            self.unusable = why
    def close(self) -> None:
        with self.io_lock:  # a commit writing its line finishes first; later ones see closed
            super().close()
            self.fs.close(self.handle)


class FileRepository(DictRepository):
    storage_class = FileStorage

    def __init__(self, clock: Any, fs: FileSystem, root: str) -> None:
        super().__init__(clock)
        self.fs, self.root = fs, root.rstrip("/")
        fs.create_dir(self.root)
        for entry in fs.list_dir(self.root):
            if entry.is_file and entry.name.endswith(".log"):
                self.sessions[unquote(entry.name[:-4])] = None  # read on open
    def path(self, session_id: str) -> str:
        return f"{self.root}/{quote(session_id, safe='')}.log"
    def create(self, session_id: str) -> Any:
        if check_session_id(session_id) in self.sessions:
            raise usage("already_exists", f"session {session_id!r} exists")
        self.fs.write_file(self.path(session_id), b"")
        self.fs.fsync_file(self.path(session_id))
        self.fs.fsync_dir(self.root)
        return super().create(session_id)
    def open(self, session_id: str) -> Any:
        sid = check_session_id(session_id)
        if sid in self.sessions and sid not in self.open_ids and self.sessions[sid] is None:
            self.sessions[sid] = self.load(sid)
        return super().open(sid)
    def load(self, session_id: str) -> dict[str, Any]:
        path = self.path(session_id)
        self.fs.fsync_dir(self.root)  # a failed create's file: its name durable before use
        content = self.fs.read_bytes(path)
        complete = content[: content.rfind(b"\n") + 1]
        if len(complete) < len(content):  # a torn last line: that commit was never acknowledged
            self.repair(path, complete)
        data = {"next_seq": 1, "ids": set(), "entries": {}, "usage": {}, "values": {},
                "lists": {}, "messages": 0, "totals": UsageTotals()}
        replay = DictStorage(session_id, data, None)  # replays the log into the empty state
        for line in complete.splitlines():
            record = orjson.loads(line)
            replay.clock = lambda t=record["t"]: t
            replay.commit([decode(x) for x in record["w"]])
        return data
    def repair(self, path: str, complete: bytes) -> None:
        """Cut the torn line off, durably, before anything is appended after it."""
        handle = self.fs.open_append(path)
        self.fs.truncate(handle, len(complete))
        self.fs.fsync(handle)
        self.fs.close(handle)
    def _handle(self, session_id: str) -> Any:
        storage: Any = super()._handle(session_id)
        storage.attach(self.fs, self.path(session_id))
        return storage
    def delete(self, session_id: str) -> None:
        if check_session_id(session_id) in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        if session_id not in self.sessions:
            raise usage("not_found", f"no session {session_id!r}")
        self.fs.unlink(self.path(session_id))
        del self.sessions[session_id]  # gone from the directory: gone here, even if the
        self.fs.fsync_dir(self.root)  # fsync fails (the delete then reports an error)


def make_backend(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return FileRepository(clock, fs, root)
