"""A backend on TinyDB, the JSON document store, one JSON file per Session:

    scopecheck validate scopecheck.examples.stores.tinydb_store:make_backend
    scopecheck validate scopecheck.examples.stores.tinydb_store:make_durable_backend

Each commit inserts one document ``{"t": timestamp, "w": [writes]}`` into the table
``commits``; document ids grow, so sorting by ``doc_id`` gives commit order.  TinyDB's default
``JSONStorage`` rewrites the whole file in place on every insert: ``seek(0)``, ``write`` of the
new JSON, ``flush``, ``os.fsync``, then ``truncate`` (tinydb/storages.py).  That is TinyDB's one
durability setting, on by default.  TinyDB offers nothing more, so ``make_durable_backend`` is
what a user would add: a ``JSONStorage`` subclass that writes the JSON to a temporary file,
fsyncs it, renames it over the database and fsyncs the directory.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tinydb import TinyDB
from tinydb.storages import JSONStorage

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, fsync_dir, remove, repository,
)


class ReplacingJSONStorage(JSONStorage):
    """JSONStorage that never overwrites the database in place."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.path = path
    def write(self, data: dict[str, dict[str, Any]]) -> None:
        with open(self.path + ".tmp", "w", encoding="utf-8") as tmp:
            json.dump(data, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(self.path + ".tmp", self.path)
        fsync_dir(os.path.dirname(self.path))
        self._handle.close()  # the handle read() uses must follow the new file
        self._handle = open(self.path, mode=self._mode, encoding="utf-8")  # noqa: SIM115


class TinyLog:
    def __init__(self, db: TinyDB) -> None:
        self.db, self.table = db, db.table("commits")
    def records(self) -> list[dict[str, Any]]:
        return [dict(doc) for doc in sorted(self.table.all(), key=lambda doc: doc.doc_id)]
    def append(self, record: dict[str, Any]) -> None:
        self.table.insert(record)
    def close(self) -> None:
        self.db.close()


class TinyFiles(SessionFiles):
    suffix = ".json"

    def __init__(self, root: str, *, durable: bool) -> None:
        super().__init__(root, durable=durable)
        self.storage = ReplacingJSONStorage if durable else JSONStorage
    def build(self, path: str) -> None:
        TinyDB(path, storage=self.storage).close()  # an empty file: TinyDB reads it as no tables
    def connect(self, path: str) -> Log:
        remove(path + ".tmp")  # a rewrite a crash cut short; the database is the old one
        return TinyLog(TinyDB(path, storage=self.storage))


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: TinyFiles(root, durable=False))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: TinyFiles(root, durable=True))
