"""A backend on the standard library's ``dbm.dumb`` (what ``dbm`` and ``shelve`` fall back to
where no gdbm or ndbm is built, as in this Python), one database per Session:

    scopecheck validate scopecheck.examples.stores.dbm_dumb_store:make_backend
    scopecheck validate scopecheck.examples.stores.dbm_dumb_store:make_durable_backend

A Session is a directory holding ``db.dat`` (values, each padded to a 512-byte block, written
in place or appended) and ``db.dir`` (the index, one ``repr((key, (pos, size)))`` line per key,
appended on a new key and rewritten through ``db.bak`` and a rename by ``sync()`` and
``close()``).  Each commit sets one key, an 8-byte big-endian commit counter, to the record.
``dbm.dumb`` has no durable setting: it never fsyncs (Lib/dbm/dumb.py), and ``sync()`` only
rewrites the index.  ``make_durable_backend`` is what a user can add from outside: ``sync()``,
then an fsync of ``db.dat``, ``db.dir`` and the directory after every commit and after
``close()``.
"""

from __future__ import annotations

import dbm.dumb
import os
from typing import Any

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, fsync_dir, loads, repository,
)


class DumbLog:
    def __init__(self, base: str, durable: bool) -> None:
        self.base, self.durable = base, durable
        self.db = dbm.dumb.open(base, "w")  # noqa: SIM115 (closed by close())
        self.count = len(self.db)
    def records(self) -> list[dict[str, Any]]:
        return [loads(self.db[key]) for key in sorted(self.db.keys())]
    def append(self, record: dict[str, Any]) -> None:
        self.db[self.count.to_bytes(8, "big")] = dumps(record)
        if self.durable:
            self.db.sync()
            self.fsync()
        self.count += 1
    def fsync(self) -> None:
        fsync_dir(self.base + ".dat")
        fsync_dir(self.base + ".dir")
        fsync_dir(os.path.dirname(self.base))
    def close(self) -> None:
        self.db.close()  # rewrites db.dir through db.bak
        if self.durable:
            self.fsync()


class DumbFiles(SessionFiles):
    suffix = ".dbm"

    def build(self, path: str) -> None:
        os.mkdir(path)
        dbm.dumb.open(os.path.join(path, "db"), "c").close()
    def connect(self, path: str) -> Log:
        return DumbLog(os.path.join(path, "db"), self.durable)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: DumbFiles(root, durable=False))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: DumbFiles(root, durable=True))
