"""Stores that keep a scratch file beside their data, as ZODB's FileStorage keeps ``Data.fs.tmp``
beside ``Data.fs`` (HYGIENE-4), and ones that leave temp files behind (HYGIENE-1, CHECK-9).

A Session is a folder ``<root>/<quoted id>.fs`` holding ``Data.fs``, one JSON line per commit.
Every commit writes its line to the scratch file ``Data.fs.tmp`` first (FileStorage's first
phase of a commit), then appends it to ``Data.fs`` and fsyncs.  The scratch file is never
removed: it goes with the Session's folder.

* ``make_backend``: the store opens (and empties) its scratch file whenever it opens, as
  FileStorage does -- it appears with the store, is used by every commit and kept for the
  store's life: no leftover.
* ``make_lazy_backend``: the scratch file is made by the first commit instead -- a temp file an
  operation made that outlives it (HYGIENE-1) -- and ``make_declared_lazy_backend`` is the same
  store whose repository declares it its own (``own_files``): no leftover.
* ``make_leaky_backend``: every commit also writes ``commit.tmp`` and never removes it
  (HYGIENE-1, met by the first commit of nearly every example), and a Session reopened with
  five or more commits loses its fifth: a second, independent bug the machine reaches only
  after five commits and a reopen (CHECK-9).
"""

from __future__ import annotations

import os
from typing import Any

from scopecheck.examples.stores.sessions import (
    SessionFiles,
    StoreRepository,
    dumps,
    loads,
    repository,
)


class ScratchLog:
    """``Data.fs`` with its scratch file ``Data.fs.tmp``, opened (and emptied) when the store
    opens unless ``lazy``, then when the first commit needs it."""

    def __init__(self, path: str, *, lazy: bool = False, leaky: bool = False) -> None:
        self.path, self.leaky = path, leaky
        self.data = open(os.path.join(path, "Data.fs"), "ab+")  # noqa: SIM115 - kept open
        self.scratch = None if lazy else self._scratch()

    def _scratch(self) -> Any:
        return open(os.path.join(self.path, "Data.fs.tmp"), "w+b")

    def records(self) -> list[dict[str, Any]]:
        self.data.seek(0)
        found = [loads(line) for line in self.data.read().splitlines()]
        if self.leaky and len(found) >= 5:
            del found[4]
        return found

    def append(self, record: dict[str, Any]) -> None:
        line = dumps(record) + b"\n"
        if self.scratch is None:
            self.scratch = self._scratch()
        self.scratch.seek(0)
        self.scratch.write(line)
        self.scratch.flush()
        if self.leaky:
            with open(os.path.join(self.path, "commit.tmp"), "wb") as kept:
                kept.write(line)
        self.data.write(line)
        self.data.flush()
        os.fsync(self.data.fileno())

    def close(self) -> None:
        self.data.close()
        if self.scratch is not None:
            self.scratch.close()


class ScratchFiles(SessionFiles):
    suffix = ".fs"

    def __init__(self, root: str, *, lazy: bool = False, leaky: bool = False) -> None:
        super().__init__(root, durable=True)
        self.lazy, self.leaky = lazy, leaky

    def build(self, path: str) -> None:
        os.makedirs(path)
        ScratchLog(path, lazy=self.lazy).close()

    def connect(self, path: str) -> ScratchLog:
        return ScratchLog(path, lazy=self.lazy, leaky=self.leaky)


class DeclaredRepository(StoreRepository):
    """The store's scratch file is its own, whenever it is made (HYGIENE-4)."""

    own_files = ("*.fs/Data.fs.tmp",)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: ScratchFiles(root))


def make_lazy_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: ScratchFiles(root, lazy=True))


def make_declared_lazy_backend(clock: Any, *, root: str) -> StoreRepository:
    return DeclaredRepository(clock, ScratchFiles(root, lazy=True))


def make_leaky_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: ScratchFiles(root, leaky=True))


class WronglyDeclared(StoreRepository):
    own_files = "Data.fs.tmp"  # a string, not a tuple of patterns


def make_wrongly_declared_backend(clock: Any, *, root: str) -> StoreRepository:
    return WronglyDeclared(clock, ScratchFiles(root))
