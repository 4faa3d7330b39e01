"""A backend on RocksDB (the ``rocksdict`` binding), a log-structured merge tree, one database
per Session:

    scopecheck validate scopecheck.examples.stores.rocksdict_store:make_backend
    scopecheck validate scopecheck.examples.stores.rocksdict_store:make_durable_backend

A Session is a RocksDB directory (``CURRENT``, ``MANIFEST-*``, ``OPTIONS-*``, the write-ahead
log ``*.log``, sorted tables ``*.sst`` after a flush, and the info ``LOG``).  The database is
opened in raw mode (keys and values are bytes, iterated in byte order); each commit is one
``put`` of the record under an 8-byte big-endian commit counter, one write-ahead-log record.
RocksDB's default ``WriteOptions.sync`` is false: a put is appended to the write-ahead log and
acknowledged without an fsync.  ``make_durable_backend`` sets ``sync=True`` (the log is
fsynced before the put returns) and fsyncs the directory after RocksDB made its files.
"""

from __future__ import annotations

from typing import Any

from rocksdict import Options, Rdict, WriteOptions

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)


def options() -> Options:
    return Options(raw_mode=True)  # create_if_missing is on by default


class RocksLog:
    def __init__(self, db: Rdict, durable: bool) -> None:
        write = WriteOptions()
        write.sync = durable
        db.set_write_options(write)
        self.db, self.count = db, len(list(db.keys()))
    def records(self) -> list[dict[str, Any]]:
        return [loads(value) for _, value in self.db.items()]
    def append(self, record: dict[str, Any]) -> None:
        self.db[self.count.to_bytes(8, "big")] = dumps(record)
        self.count += 1
    def close(self) -> None:
        self.db.close()


class RocksFiles(SessionFiles):
    suffix = ".rocksdb"

    def build(self, path: str) -> None:
        Rdict(path, options()).close()
    def connect(self, path: str) -> Log:
        return RocksLog(Rdict(path, options()), self.durable)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: RocksFiles(root, durable=False))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: RocksFiles(root, durable=True))
