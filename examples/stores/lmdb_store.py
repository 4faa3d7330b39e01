"""A backend on LMDB (the ``lmdb`` binding), one environment per Session:

    scopecheck validate scopecheck.examples.stores.lmdb_store:make_backend
    scopecheck validate scopecheck.examples.stores.lmdb_store:make_durable_backend

LMDB is a copy-on-write B+tree in one memory-mapped file (``data.mdb``, beside ``lock.mdb``, the
reader table, a shared writable mapping).  A commit is one write transaction putting one record
under an 8-byte big-endian counter, so a cursor walks the records in commit order.  Both
factories open the environment with the binding's defaults: ``sync=True`` and
``metasync=True`` (``mdb_txn_commit`` fdatasyncs the new pages, then the meta page), and
``writemap=False`` (pages go out through ``pwrite``).  LMDB itself never fsyncs the directory it
creates ``data.mdb`` in, nor the two meta pages it writes into a new ``data.mdb``;
``make_durable_backend`` does both after making the environment (``env.sync(True)``, then
``SessionFiles(durable=True)`` fsyncs the directory).  The opposite setting, ``sync=False``
(what a cache would choose), acknowledges before anything is on disk; ``make_nosync_backend``
shows it.  ``make_atomic_backend`` creates each environment the way a careful team would by
hand: in a folder of its own (``<id>.lmdb.creating``), synced file by file, renamed into place.
"""

from __future__ import annotations

import os
from typing import Any

import lmdb

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, fsync_dir, loads, remove, repository,
)

#: lmdb.open's keyword arguments per setting: the binding's defaults, spelled out.
DEFAULT = {"sync": True, "metasync": True, "writemap": False, "map_size": 10 * 2**20}
NOSYNC = {**DEFAULT, "sync": False, "metasync": False}


class LmdbLog:
    def __init__(self, env: Any) -> None:
        self.env, self.count = env, env.stat()["entries"]
    def records(self) -> list[dict[str, Any]]:
        with self.env.begin() as txn:
            return [loads(value) for _, value in txn.cursor()]
    def append(self, record: dict[str, Any]) -> None:
        with self.env.begin(write=True) as txn:  # committed on leaving the block, aborted on error
            txn.put(self.count.to_bytes(8, "big"), dumps(record))
        self.count += 1
    def close(self) -> None:
        self.env.close()


class LmdbFiles(SessionFiles):
    suffix = ".lmdb"

    def __init__(self, root: str, *, durable: bool, settings: dict[str, Any]) -> None:
        super().__init__(root, durable=durable)
        self.settings = settings
    def build(self, path: str) -> None:
        env = lmdb.open(path, **self.settings)
        if self.durable:
            env.sync(True)  # the new file's two meta pages: LMDB writes them without a sync
        env.close()
    def connect(self, path: str) -> Log:
        return LmdbLog(lmdb.open(path, create=False, **self.settings))


class AtomicLmdbFiles(LmdbFiles):
    """An environment made in ``<id>.lmdb.creating`` (mkdir, ``lmdb.open``, ``env.sync``, an
    fsync of each file and of the folder), then renamed into place and the root fsynced."""

    def create(self, session_id: str) -> Log:
        path = self.path(session_id)
        temp = path + ".creating"
        remove(temp)
        os.mkdir(temp)
        self.build(temp)
        for name in os.listdir(temp):
            fsync_dir(os.path.join(temp, name))
        fsync_dir(temp)
        os.rename(temp, path)
        fsync_dir(self.root)
        return self.connect(path)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LmdbFiles(root, durable=False, settings=DEFAULT))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LmdbFiles(root, durable=True, settings=DEFAULT))


def make_nosync_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: LmdbFiles(root, durable=True, settings=NOSYNC))


def make_atomic_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: AtomicLmdbFiles(root, durable=True, settings=DEFAULT))
