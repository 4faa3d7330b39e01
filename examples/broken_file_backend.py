"""The file example with one classic mistake: a commit is acknowledged before it is durable.

    scopecheck validate examples/broken_file_backend.py:make_backend   # CRASH-FS-6, replayable

The line is appended but never fsynced, so after a power loss the last acknowledged commits
can be gone.  Everything else (and every process crash) is handled like the good example.
"""

from __future__ import annotations

from typing import Any

from scopecheck import StorageIOError
from scopecheck.examples.good_file_backend import FileRepository, FileStorage


class UnsyncedStorage(FileStorage):
    def persist(self, line: bytes) -> None:
        try:
            self.fs.append(self.handle, line)  # no fsync: the OS may still lose it
        except StorageIOError:
            self.cut_back("an append failed and could not be cut back")
            raise
        self.size += len(line)


class UnsyncedRepository(FileRepository):
    storage_class = UnsyncedStorage


def make_backend(clock: Any, *, fs: Any, root: str) -> UnsyncedRepository:
    return UnsyncedRepository(clock, fs, root)
