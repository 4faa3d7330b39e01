"""A backend on LevelDB (the ``plyvel`` binding, whose wheels bundle LevelDB 1.22), a
log-structured merge tree, one database per Session:

    scopecheck validate scopecheck.examples.stores.leveldb_store:make_backend
    scopecheck validate scopecheck.examples.stores.leveldb_store:make_durable_backend

A Session is a LevelDB directory: ``CURRENT`` (the name of the live ``MANIFEST-*``, replaced
by a rename), ``LOCK``, the write-ahead log ``*.log``, sorted tables ``*.ldb`` (every reopen
writes the recovered log to one) and the info log ``LOG``, renamed to ``LOG.old`` at the next
open -- the store's own files, declared as such (``own_files``, HYGIENE-4).  Each commit is
one ``put`` of the record under an 8-byte big-endian commit counter, one write-ahead-log
record; an iterator walks the keys in byte order, so in commit order.  LevelDB's default
``WriteOptions::sync`` is false: a put is appended to the log and acknowledged without an
fsync.  ``make_durable_backend`` puts with ``sync=True`` (the log is fdatasynced before the put
returns) and fsyncs the Session's directory after LevelDB made its files.
"""

from __future__ import annotations

from typing import Any

import plyvel

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)

#: LevelDB's info log and the previous one: written for the database's life (HYGIENE-4).
OWN_FILES = ("*.leveldb/LOG", "*.leveldb/LOG.old")


class LevelLog:
    def __init__(self, db: Any, sync: bool) -> None:
        self.db, self.sync = db, sync
        # After the last key, not the number of keys: a crash that lost earlier records but
        # kept later ones must not have a later one overwritten by the next commit.
        last = next(db.iterator(reverse=True, include_value=False), None)
        self.count = 0 if last is None else int.from_bytes(last, "big") + 1
    def records(self) -> list[dict[str, Any]]:
        return [loads(value) for _, value in self.db.iterator()]
    def append(self, record: dict[str, Any]) -> None:
        self.db.put(self.count.to_bytes(8, "big"), dumps(record), sync=self.sync)
        self.count += 1
    def close(self) -> None:
        self.db.close()


class LevelFiles(SessionFiles):
    suffix = ".leveldb"

    def build(self, path: str) -> None:
        plyvel.DB(path, create_if_missing=True).close()
    def connect(self, path: str) -> Log:
        return LevelLog(plyvel.DB(path), self.durable)  # create_if_missing is off by default


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LevelFiles(root, durable=False), OWN_FILES)


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LevelFiles(root, durable=True), OWN_FILES)
