"""A dict-backed backend written the way a user would; it passes ``scopecheck validate``:

    scopecheck validate examples/good_backend.py:make_backend

It uses scopecheck's public helpers for the stateless checks and the usage sums (everything
comes from ``scopecheck`` itself), and keeps its state in dicts keyed by ``(scope_id,
namespace, key)``; ``scope_id`` is ``None`` for the session scope.
"""

from __future__ import annotations

import threading
from typing import Any

from scopecheck import (
    AppendList, ClosedError, Committed, DeleteList, DeleteValue, EntryRecord, InsertEntry,
    InsertUsage, ListElement, RetireScope, SetValue, Snapshot, Stats, UsageRecord, UsageTotals,
    ValueRecord, add_usage, check_list_query, check_name, check_references, check_session_id,
    check_shape, stop_page, usage,
)


class DictStorage:
    def __init__(self, session_id: str, data: dict[str, Any], clock: Any) -> None:
        self.session_id, self.data, self.clock = session_id, data, clock
        self.lock, self.closed = threading.Lock(), False
    def _open(self) -> dict[str, Any]:
        if self.closed:
            raise ClosedError()
        return self.data
    def commit(self, writes: Any) -> tuple[Committed, ...]:
        with self.lock:
            data = self._open()
            checked = check_shape(writes)
            check_references(checked.writes, data["ids"].__contains__, data["entries"].__contains__)
            if not checked.writes:
                return ()
            now, first = self.clock(), data["next_seq"]
            done = tuple(Committed(first + i, now, x) for i, x in enumerate(checked.writes))
            for item in done:
                self._apply(data, item.write, item.seq, now)
            data["next_seq"] += len(done)
            return done
    def _apply(self, data: dict[str, Any], x: Any, seq: int, now: int) -> None:
        key = (
            (x.address.scope_id, x.address.namespace, x.address.key)
            if hasattr(x, "address")
            else None
        )
        if isinstance(x, SetValue):
            data["values"][key] = ValueRecord(seq, x.value_json)
        elif isinstance(x, DeleteValue):
            data["values"].pop(key, None)
        elif isinstance(x, AppendList):
            data["lists"].setdefault(key, []).append(ListElement(seq, x.element_json, x.tag))
        elif isinstance(x, DeleteList):
            data["lists"].pop(key, None)
        elif isinstance(x, InsertEntry):
            data["ids"].add(x.id)
            data["entries"][x.id] = EntryRecord(
                x.id, x.parent_id, x.type, x.payload_json, seq, now
            )
            data["messages"] += x.type == "message"
        elif isinstance(x, InsertUsage):
            data["ids"].add(x.id)
            data["usage"][x.id] = UsageRecord(x.id, x.usage_json, x.entry_id, x.adjustment,
                                                x.details_json, seq)
            data["totals"] = add_usage(data["totals"], x.usage)
        elif isinstance(x, RetireScope):
            for table in (data["values"], data["lists"]):
                for gone in [k for k in table if k[0] == x.retired.id]:
                    del table[gone]
    def get_value(self, address: Any) -> ValueRecord | None:
        values = self._open()["values"]
        return values.get((address.scope_id, address.namespace, address.key))  # type: ignore[no-any-return]
    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        check_name("namespace", namespace), check_name("prefix", prefix)
        scope_id, values = getattr(scope, "id", None), self._open()["values"]
        rows = [(k[2], v) for k, v in values.items() if k[:2] == (scope_id, namespace)]
        return tuple(sorted(row for row in rows if row[0].startswith(prefix)))
    def read_list(self, address: Any, *, cursor: Any = None, order: Any = "asc", limit: Any = None,
                  stop_at_tag: Any = None) -> tuple[ListElement, ...]:
        items = self._open()["lists"].get((address.scope_id, address.namespace, address.key), [])
        q = check_list_query(cursor, order, limit, stop_at_tag)
        if q.order == "desc":
            items = [e for e in reversed(items) if q.cursor is None or e.seq < q.cursor]
        else:
            items = [e for e in items if q.cursor is None or e.seq > q.cursor]
        return tuple(stop_page(items[: q.limit], q.stop_at_tag))
    def get_entry(self, entry_id: str) -> EntryRecord | None:
        return self._open()["entries"].get(entry_id)  # type: ignore[no-any-return]
    def get_usage(self, usage_id: str) -> UsageRecord | None:
        return self._open()["usage"].get(usage_id)  # type: ignore[no-any-return]
    def stats(self) -> Stats:
        return Stats(self._open()["messages"], self.data["totals"])
    def snapshot(self) -> Snapshot:
        data = self._open()

        def order(kv: Any) -> Any:
            return Snapshot.sort_key(kv[0])
        lists = ((k, tuple(v)) for k, v in data["lists"].items() if v)
        return Snapshot(tuple(sorted(data["entries"].values(), key=lambda e: e.seq)),
                          tuple(sorted(data["usage"].values(), key=lambda u: u.seq)),
                          tuple(sorted(data["values"].items(), key=order)),
                          tuple(sorted(lists, key=order)), self.stats())
    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.on_close()
    def on_close(self) -> None:  # the repository replaces this to forget the handle
        pass


class DictRepository:
    storage_class = DictStorage

    def __init__(self, clock: Any) -> None:
        self.clock, self.open_ids = clock, set[str]()
        self.sessions: dict[str, Any] = {}
    def create(self, session_id: str) -> DictStorage:
        if check_session_id(session_id) in self.sessions:
            raise usage("already_exists", f"session {session_id!r} exists")
        self.sessions[session_id] = {"next_seq": 1, "ids": set(), "entries": {}, "usage": {},
                                     "values": {}, "lists": {}, "messages": 0,
                                     "totals": UsageTotals()}
        return self._handle(session_id)
    def open(self, session_id: str) -> DictStorage:
        if check_session_id(session_id) not in self.sessions:
            raise usage("not_found", f"no session {session_id!r}")
        if session_id in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        return self._handle(session_id)
    def _handle(self, session_id: str) -> DictStorage:
        storage = self.storage_class(session_id, self.sessions[session_id], self.clock)
        storage.on_close = lambda: self.open_ids.discard(session_id)  # type: ignore[method-assign]
        self.open_ids.add(session_id)
        return storage
    def list(self) -> list[str]:
        return sorted(self.sessions)
    def delete(self, session_id: str) -> None:
        if check_session_id(session_id) in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        if self.sessions.pop(session_id, None) is None:
            raise usage("not_found", f"no session {session_id!r}")
    def close(self) -> None:
        self.open_ids.clear()

def make_backend(clock: Any) -> DictRepository:
    return DictRepository(clock)
