"""A backend on SQLite's LSM engine (the ``lsm-db`` binding), one database per Session:

    scopecheck validate scopecheck.examples.stores.lsm_store:make_backend
    scopecheck validate scopecheck.examples.stores.lsm_store:make_nommap_backend

A Session is a directory holding the database file ``db`` and, while it is open, its log
``db-log`` and the shared-memory file ``db-shm`` (LSM's ``lsm_unix.c``).  A commit is one
``lsm_insert`` outside a transaction -- its own write transaction, committed when it returns --
putting one record under an 8-byte big-endian counter, so a cursor walks the records in commit
order.  ``make_backend`` opens the database with the engine's defaults: ``write_safety`` 1
(NORMAL: "data is only synced to disk when a checkpoint is performed", the binding's docs),
``mmap`` on (a 64-bit build maps the whole database file shared and writable and writes its
pages through the mapping, ``lsmFsWritePage``), and the log on.  ``make_nommap_backend`` is the
same with ``mmap=0``: the database file's pages go out through ``pwrite`` too, so a system-call
trace sees every byte the engine writes.
"""

from __future__ import annotations

import os
from typing import Any

import lsm

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)

#: lsm.LSM's options per setting: the engine's defaults, spelled out, and mmap off.
DEFAULT: dict[str, Any] = {"write_safety": lsm.SAFETY_NORMAL}
NOMMAP: dict[str, Any] = {**DEFAULT, "mmap": 0}


class LsmLog:
    def __init__(self, path: str, settings: dict[str, Any]) -> None:
        self.db = lsm.LSM(path, **settings)
        self.count = sum(1 for _ in self.db)
    def records(self) -> list[dict[str, Any]]:
        return [loads(value) for _, value in self.db]
    def append(self, record: dict[str, Any]) -> None:
        self.db.insert(self.count.to_bytes(8, "big"), dumps(record))  # one write transaction
        self.count += 1
    def close(self) -> None:
        self.db.close()


class LsmFiles(SessionFiles):
    suffix = ".lsm"

    def __init__(self, root: str, *, durable: bool, settings: dict[str, Any]) -> None:
        super().__init__(root, durable=durable)
        self.settings = settings
    def build(self, path: str) -> None:
        os.mkdir(path)
        LsmLog(os.path.join(path, "db"), self.settings).close()
    def connect(self, path: str) -> Log:
        return LsmLog(os.path.join(path, "db"), self.settings)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LsmFiles(root, durable=False, settings=DEFAULT))


def make_nommap_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LsmFiles(root, durable=False, settings=NOMMAP))
