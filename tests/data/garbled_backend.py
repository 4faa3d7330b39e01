"""Backends whose Session reads back garbage once a reopen recovered a crash: what crash
exploration exists to find, and what its reports must judge and describe, never trust.

Each is a bundled example with the garbage planted at a public seam -- a subclass whose
``open`` wraps the storage it hands out -- and only where the store itself would meet a damaged
file: the sqlite3 example when ``open`` finds a hot journal (a crash cut a transaction short),
the file example when ``open`` cut a torn last line off.  A clean restart reads back what was
written, so the workload runs clean and the crash images are what fail.

``make_<kind>`` is the sqlite3 example (a factory taking ``root``: served by ``scopecheck serve``
and explored from its system calls); ``make_file_<kind>`` the file example (taking ``fs`` and
``root``: explored in-process).  The kinds (:data:`KINDS`):

* ``corrupt_json``: a value whose bytes are not JSON (``{"a": 1,,``);
* ``wrong_types``: a number where an entry is expected;
* ``list_for_dict``: a list where the stats object is expected, and a usage row holding a JSON
  list where an object is;
* ``huge``: a value of 24 MiB;
* ``invalid_utf8``: a value whose bytes are not UTF-8;
* ``lone_surrogate``: an entry id, a key and a value holding the lone surrogate U+D800.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from scopecheck import check_session_id
from scopecheck.examples.good_file_backend import FileRepository
from scopecheck.examples.sqlite3_backend import Sqlite3Repository
from scopecheck.models.records import EntryRecord, Snapshot, UsageRecord, ValueRecord

KINDS = ("corrupt_json", "wrong_types", "list_for_dict", "huge", "invalid_utf8", "lone_surrogate")
#: The size of the ``huge`` value.
HUGE = 24 << 20


def garbled(kind: str, snapshot: Snapshot) -> Any:
    """``snapshot`` with the garbage of ``kind`` in it."""
    values = list(snapshot.values)
    if kind == "corrupt_json":
        values.append(((None, "garbage", "k"), ValueRecord(1, b'{"a": 1,,')))
    elif kind == "huge":
        values.append(((None, "garbage", "k"), ValueRecord(1, b'"' + b"x" * HUGE + b'"')))
    elif kind == "invalid_utf8":
        values.append(((None, "garbage", "k"), ValueRecord(1, b'"\xff\xfe\x80 not UTF-8"')))
    elif kind == "lone_surrogate":
        lone = '"\ud800"'.encode("utf-8", "surrogatepass")
        values.append(((None, "garbage", "k\ud800"), ValueRecord(1, lone)))
        entry = EntryRecord("e\ud800", None, "message", b"{}", 1, 0)
        return attrs.evolve(snapshot, entries=(*snapshot.entries, entry), values=tuple(values))
    elif kind == "wrong_types":
        return attrs.evolve(snapshot, entries=(*snapshot.entries, 5))
    elif kind == "list_for_dict":
        row = UsageRecord("u", b"[1,2]", None, False, None, 1)
        return attrs.evolve(snapshot, usage=(*snapshot.usage, row), stats=[1, 2])
    return attrs.evolve(snapshot, values=tuple(values))


class Garbling:
    """A storage whose ``snapshot()`` and ``get_value`` give back garbage of one kind; every
    other call is the storage's own."""

    def __init__(self, storage: Any, kind: str) -> None:
        self._storage, self._kind = storage, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def snapshot(self) -> Any:
        return garbled(self._kind, self._storage.snapshot())

    def get_value(self, address: Any) -> Any:
        found = self._storage.get_value(address)
        if found is None or self._kind not in ("corrupt_json", "huge", "invalid_utf8"):
            return found
        values = garbled(self._kind, Snapshot((), (), (), (), None)).values  # type: ignore[arg-type]
        return values[-1][1]


class GarbledSqlite3(Sqlite3Repository):
    """The sqlite3 example; a Session opened over a hot journal reads back garbage."""

    kind = ""

    def open(self, session_id: str) -> Any:
        journal = self.path(check_session_id(session_id)) + "-journal"
        hot = os.path.exists(journal) and os.path.getsize(journal) > 0
        storage = super().open(session_id)
        return Garbling(storage, self.kind) if hot else storage


class GarbledFile(FileRepository):
    """The file example; a Session whose torn last line ``open`` cut off reads back garbage."""

    kind = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.repaired: set[str] = set()

    def repair(self, path: str, complete: bytes) -> None:
        super().repair(path, complete)
        self.repaired.add(path)

    def open(self, session_id: str) -> Any:
        storage = super().open(session_id)
        return Garbling(storage, self.kind) if self.path(session_id) in self.repaired else storage


def _factories(kind: str) -> tuple[Any, Any]:
    sqlite3_class = type(f"GarbledSqlite3_{kind}", (GarbledSqlite3,), {"kind": kind})
    file_class = type(f"GarbledFile_{kind}", (GarbledFile,), {"kind": kind})

    def make(clock: Any, *, root: str) -> Any:
        return sqlite3_class(clock, root)

    def make_file(clock: Any, *, fs: Any, root: str) -> Any:
        return file_class(clock, fs, root)

    return make, make_file


for _kind in KINDS:
    globals()[f"make_{_kind}"], globals()[f"make_file_{_kind}"] = _factories(_kind)


class _RaisingStorage:
    """A storage whose third commit raises an error without a code, its message holding a
    lone surrogate."""

    def __init__(self, storage: Any) -> None:
        self._storage, self._commits = storage, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def commit(self, writes: Any) -> Any:
        self._commits += 1
        if self._commits == 3:
            raise ValueError("the store said \ud800 and more")
        return self._storage.commit(writes)


class _RaisingRepository:
    def __init__(self, repository: Any) -> None:
        self._repository = repository

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repository, name)

    def create(self, session_id: str) -> Any:
        return _RaisingStorage(self._repository.create(session_id))

    def open(self, session_id: str) -> Any:
        return _RaisingStorage(self._repository.open(session_id))


def make_raises_lone_surrogate(clock: Any) -> Any:
    """The dict example, whose third commit on a handle raises ``ValueError`` with a lone
    surrogate in its message: the verdict quotes it escaped."""
    from scopecheck.examples.good_backend import make_backend

    return _RaisingRepository(make_backend(clock))
