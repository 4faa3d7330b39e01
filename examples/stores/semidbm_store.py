"""A backend on semidbm, an append-only log of keys and values with an index in memory, one
database per Session:

    scopecheck validate scopecheck.examples.stores.semidbm_store:make_backend
    scopecheck validate scopecheck.examples.stores.semidbm_store:make_durable_backend

A Session is a semidbm directory (one file, ``data``: a header, then ``<keysize><valsize><key>
<value><crc32>`` per write, appended with ``os.write``).  Each commit sets one key, an 8-byte
big-endian commit counter, to the record; opening reads the whole log into the index.
semidbm fsyncs only in ``sync()`` and ``close()`` (semidbm/db.py): by default a write is
acknowledged from the page cache.  ``make_durable_backend`` calls ``sync()`` after every commit
(the library's durable use) and fsyncs the directory after semidbm creates ``data``.
"""

from __future__ import annotations

from typing import Any

import semidbm

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)


class SemidbmLog:
    def __init__(self, db: Any, durable: bool) -> None:
        self.db, self.durable, self.count = db, durable, len(db.keys())
    def records(self) -> list[dict[str, Any]]:
        return [loads(self.db[key]) for key in sorted(self.db.keys())]
    def append(self, record: dict[str, Any]) -> None:
        self.db[self.count.to_bytes(8, "big")] = dumps(record)
        if self.durable:
            self.db.sync()
        self.count += 1
    def close(self) -> None:
        self.db.close()


class SemidbmFiles(SessionFiles):
    suffix = ".semidbm"

    def build(self, path: str) -> None:
        semidbm.open(path, "c").close()
    def connect(self, path: str) -> Log:
        return SemidbmLog(semidbm.open(path, "w"), self.durable)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: SemidbmFiles(root, durable=False))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: SemidbmFiles(root, durable=True))
