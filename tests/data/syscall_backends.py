"""Backends for the system-call crash tests: what the trace must report, not fail.

``make_wal`` is the sqlite3 example in WAL mode (SQLite maps its ``-shm`` file shared and
writable: writes through the mapping are invisible to a trace, CRASH-SYS-8); ``make_outside``
also appends to a file outside its root, named by ``$SCOPECHECK_TEST_OUTSIDE`` (CRASH-SYS-4).
"""

from __future__ import annotations

import os
from typing import Any

from scopecheck.examples.sqlite3_backend import Sqlite3Repository, Sqlite3Storage


def make_wal(clock: Any, *, root: str) -> Sqlite3Repository:
    return Sqlite3Repository(clock, root, synchronous="FULL", journal="WAL")


class _Outside(Sqlite3Repository):
    def create(self, session_id: str) -> Sqlite3Storage:
        with open(os.environ["SCOPECHECK_TEST_OUTSIDE"], "a") as log:
            log.write(f"created {session_id}\n")
        return super().create(session_id)


def make_outside(clock: Any, *, root: str) -> Sqlite3Repository:
    return _Outside(clock, root)


def make_file_log(clock: Any, *, root: str) -> Any:
    """The good file example over the real file system, taking ``root`` only: explored from
    its system calls (the planted bugs in ``scopecheck.planted.syscall`` change one call)."""
    from scopecheck.examples.good_file_backend import FileRepository
    from scopecheck.impl.fs import OsFileSystem

    return FileRepository(clock, OsFileSystem(), root)
