"""A backend on ZODB's ``FileStorage``, the object database's append-only transaction log, one
storage per Session:

    scopecheck validate scopecheck.examples.stores.zodb_store:make_backend

A Session is a directory ``<id>.zodb`` holding ``Data.fs`` (every transaction appended to it),
``Data.fs.lock`` (zc.lockfile's lock, while a storage has it open), ``Data.fs.index`` (the
index snapshot FileStorage saves at close) and ``Data.fs.tmp``: FileStorage writes the first
phase of every commit there, opens it when it starts and never removes it -- the store's own
file, declared as such (``own_files``, HYGIENE-4), never a leftover.  The root object holds one
``OOBTree`` of records under an 8-byte big-endian counter; a commit puts one record and is one
``commit()`` of the handle's own transaction manager (not the thread-local ``transaction``
default: the machine commits from more than one thread).  FileStorage's two-phase commit
writes the transaction to ``Data.fs`` in ``tpc_vote`` and, in ``tpc_finish``, flips its status
byte and fsyncs ``Data.fs``.  FileStorage has no setting that changes that (no sync option, no
other durability mode), so there is one factory, its defaults.
"""

from __future__ import annotations

import os
from typing import Any

import transaction
from BTrees.OOBTree import OOBTree
from ZODB import DB
from ZODB.FileStorage import FileStorage

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)

DATA = "Data.fs"
#: FileStorage's scratch file: opened when the storage opens, kept for its life (HYGIENE-4).
OWN_FILES = ("*.zodb/Data.fs.tmp",)


class ZodbLog:
    """One open ``FileStorage`` with its database, connection and transaction manager.  The
    records' tree is made with the first record, in its transaction."""

    def __init__(self, path: str) -> None:
        self.db = DB(FileStorage(os.path.join(path, DATA)))
        try:
            self.manager = transaction.TransactionManager()
            self.connection = self.db.open(transaction_manager=self.manager)
            self.tree = self.connection.root().get("records")
            self.count = 0 if self.tree is None else len(self.tree)
        except BaseException:
            self.db.close()
            raise
    def records(self) -> list[dict[str, Any]]:
        return [] if self.tree is None else [loads(value) for value in self.tree.values()]
    def append(self, record: dict[str, Any]) -> None:
        if self.tree is None:
            self.tree = self.connection.root()["records"] = OOBTree()
        self.tree[self.count.to_bytes(8, "big")] = dumps(record)
        try:
            self.manager.commit()
        except BaseException:
            self.manager.abort()  # the Session layer refuses commits until it is opened again
            raise
        self.count += 1
    def close(self) -> None:
        try:
            self.manager.abort()
            self.connection.close()
        finally:
            self.db.close()


class ZodbFiles(SessionFiles):
    suffix = ".zodb"

    def build(self, path: str) -> None:
        os.mkdir(path)
        DB(FileStorage(os.path.join(path, DATA))).close()  # DB makes the root object
    def connect(self, path: str) -> Log:
        return ZodbLog(path)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: ZodbFiles(root, durable=False), OWN_FILES)
