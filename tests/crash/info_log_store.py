"""A store that keeps an info log for people beside its data, as RocksDB and LevelDB do
(CRASH-SYS-19): each Session is a directory holding ``data.jsonl`` -- one record a line,
appended and fsynced before the commit is acknowledged, read back on open -- and ``LOG``, a
line appended at every commit and never synced.

* ``make_backend``: the info log is never read; a torn last data line (a commit that never
  returned) is cut off on open, and a record whose write or fsync failed is cut back, as a
  careful log store does.  Passes.
* ``make_strict_reader_backend``: parses every data line, a torn one included: fails on a
  torn write of ``data.jsonl`` (CRASH-FS-1).
* ``make_log_reading_backend``: also parses its info log on open, every line: fails on a
  torn write of ``LOG`` -- which is therefore read, and torn in full.
* ``make_unsynced_data_backend``: acknowledges a commit without fsyncing its data line: a
  power loss loses it (CRASH-FS-6), in images named after the info log they keep
  (``only:s.info/LOG``), as LevelDB's were after ``LOG.old``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from scopecheck.examples.stores.sessions import (
    Log,
    SessionFiles,
    StoreRepository,
    dumps,
    fsync_dir,
    loads,
    repository,
)


class InfoLog:
    def __init__(self, path: str, *, strict: bool, reads_log: bool, synced: bool = True) -> None:
        self.path, self.synced = path, synced
        if reads_log:
            with open(os.path.join(path, "LOG"), encoding="utf-8") as info:
                for line in info:
                    json.loads(line)
        with open(os.path.join(path, "data.jsonl"), "rb") as data:
            held = data.read()
        lines = held.split(b"\n")
        self.data = os.open(os.path.join(path, "data.jsonl"), os.O_WRONLY | os.O_APPEND)
        if not strict:  # what follows the last newline is a commit that never returned
            os.ftruncate(self.data, len(held) - len(lines.pop()))
            os.fsync(self.data)
        self.kept = [loads(line) for line in lines if line or not strict]
        self.info = os.open(os.path.join(path, "LOG"), os.O_WRONLY | os.O_APPEND)

    def records(self) -> list[dict[str, Any]]:
        return list(self.kept)

    def append(self, record: dict[str, Any]) -> None:
        os.write(self.info, json.dumps({"event": "commit", "records": len(self.kept)}).encode()
                 + b"\n")  # fmt: skip
        size = os.lseek(self.data, 0, os.SEEK_END)
        try:
            os.write(self.data, dumps(record) + b"\n")
            if self.synced:
                os.fsync(self.data)
        except OSError:
            os.ftruncate(self.data, size)  # cut the failed record back (CRASH-FS-9)
            os.fsync(self.data)
            raise
        self.kept.append(record)

    def close(self) -> None:
        os.close(self.data)
        os.close(self.info)


class InfoLogFiles(SessionFiles):
    suffix = ".info"

    def __init__(
        self, root: str, *, strict: bool = False, reads_log: bool = False, synced: bool = True
    ) -> None:
        super().__init__(root, durable=True)
        self.strict, self.reads_log, self.synced = strict, reads_log, synced

    def build(self, path: str) -> None:
        os.mkdir(path)
        for name in ("data.jsonl", "LOG"):
            fd = os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT, 0o644)
            os.fsync(fd)
            os.close(fd)
        fsync_dir(path)

    def connect(self, path: str) -> Log:
        return InfoLog(path, strict=self.strict, reads_log=self.reads_log, synced=self.synced)


def make_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: InfoLogFiles(root))


def make_strict_reader_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: InfoLogFiles(root, strict=True))


def make_log_reading_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: InfoLogFiles(root, reads_log=True))


def make_unsynced_data_backend(clock: Any, *, root: str) -> StoreRepository:
    return repository(clock, lambda: InfoLogFiles(root, synced=False))
