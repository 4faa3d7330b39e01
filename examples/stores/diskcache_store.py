"""A backend on DiskCache (``diskcache.Cache``: SQLite in WAL mode), one cache per Session:

    scopecheck validate scopecheck.examples.stores.diskcache_store:make_backend
    scopecheck validate scopecheck.examples.stores.diskcache_store:make_durable_backend

A Session is a cache directory (``cache.db`` with its ``-wal`` and ``-shm``; values this small
are kept in the database, not in files beside it).  Each commit is one ``Cache.set`` of the
record under an integer key counting commits; ``Cache.set`` is one SQLite transaction.  The
default settings (``diskcache.core.DEFAULT_SETTINGS``) are ``sqlite_journal_mode='wal'`` and
``sqlite_synchronous=1`` (NORMAL: the WAL is fsynced only at a checkpoint, not at commit).
``make_durable_backend`` sets ``sqlite_synchronous=2`` (FULL: the WAL is fsynced at every
commit, and SQLite fsyncs the directory after creating the WAL).  Eviction is left at its
default (1 GB); a Session this size never reaches it.
"""

from __future__ import annotations

from typing import Any

from diskcache import Cache

from scopecheck.examples.stores.sessions import (
    Log, SessionFiles, StoreRepository, dumps, loads, repository,
)

DEFAULT: dict[str, Any] = {}
DURABLE: dict[str, Any] = {"sqlite_synchronous": 2}


class CacheLog:
    def __init__(self, cache: Cache) -> None:
        self.cache, self.count = cache, len(cache)
    def records(self) -> list[dict[str, Any]]:
        return [loads(self.cache[key]) for key in sorted(self.cache.iterkeys())]
    def append(self, record: dict[str, Any]) -> None:
        self.cache.set(self.count, dumps(record))
        self.count += 1
    def close(self) -> None:
        self.cache.close()


class CacheFiles(SessionFiles):
    suffix = ".cache"

    def __init__(self, root: str, *, durable: bool) -> None:
        super().__init__(root, durable=durable)
        self.settings = DURABLE if durable else DEFAULT
    def build(self, path: str) -> None:
        Cache(path, **self.settings).close()
    def connect(self, path: str) -> Log:
        return CacheLog(Cache(path, **self.settings))


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: CacheFiles(root, durable=False))


def make_durable_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: CacheFiles(root, durable=True))
