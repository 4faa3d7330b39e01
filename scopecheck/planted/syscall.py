"""Planted durability bugs that only the system-call path can find (CRASH-SYS-*).

Each one is an example doing its own file I/O -- the sqlite3 example
(``scopecheck.examples.sqlite3_backend``) or the good file example over real files -- changed at
one of its public seams (a constructor setting, a method a subclass overrides, one call of the
``FileSystem`` it is given) into a classic durability mistake.  In-process checks pass them
all: with no crash every one of them stores the right state.  ``scopecheck mutants`` runs
each through :func:`scopecheck.process.syscall_crash.explore` in a child served by ``scopecheck
serve`` and expects the rule named here.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from typing import Any

from scopecheck.examples.good_file_backend import FileRepository, FileStorage
from scopecheck.examples.sqlite3_backend import SCHEMA, Sqlite3Repository, Sqlite3Storage, connect
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import StorageIOError, usage
from scopecheck.planted import MutantResult, register_factories
from scopecheck.planted.fs_crash import (
    STARTUP_WRITES,
    CreateWithoutDirectorySync,
    IndexedRepository,
    ReplacingRepository,
    RewritingRepair,
    SwappingRepository,
    SyncingEveryOther,
)
from scopecheck.planted.jsonl_crash import NoAppendFsync, RetryingFsync


def ack_before_durable(clock: Any, *, root: str) -> Sqlite3Repository:
    """synchronous=OFF: SQLite never fsyncs, so a commit is acknowledged before it is durable."""
    return Sqlite3Repository(clock, root, synchronous="OFF")


def journal_unlink_undurable(clock: Any, *, root: str) -> Sqlite3Repository:
    """synchronous=FULL in DELETE mode: the journal's unlink is not fsynced in its directory,
    so after a power loss the journal comes back and rolls an acknowledged commit back."""
    return Sqlite3Repository(clock, root, synchronous="FULL")


class _NoDirectorySync(Sqlite3Repository):
    def sync_dir(self) -> None:
        """Skipped: a new Session's file is renamed into place and never made durable."""


def create_without_directory_fsync(clock: Any, *, root: str) -> Sqlite3Repository:
    return _NoDirectorySync(clock, root)


class _RawErrorStorage(Sqlite3Storage):
    def failed(self, exc: sqlite3.Error) -> Exception:
        return exc  # the driver's own exception escapes, with no stable code


class _RawErrors(Sqlite3Repository):
    storage_class = _RawErrorStorage


def io_error_escapes(clock: Any, *, root: str) -> Sqlite3Repository:
    return _RawErrors(clock, root)


class _LeftoverBlocksCreate(Sqlite3Repository):
    def create(self, session_id: str) -> Sqlite3Storage:
        """Builds the new Session aside, as the example does, but over whatever a create a
        crash cut short left there: its half-made schema makes every later create of that
        id fail, so the Session a crash rightly left absent can never be made again."""
        path = self.path(check_session_id(session_id))
        if os.path.exists(path):
            raise usage("already_exists", f"session {session_id!r} exists")
        try:
            db = connect(path + ".new", self.synchronous, self.journal)
            db.executescript(SCHEMA)
            db.close()
            os.replace(path + ".new", path)
            self.sync_dir()
        except (OSError, sqlite3.Error) as exc:
            raise StorageIOError("io_error", f"create {session_id}: {exc}") from None
        return self.open(session_id)


def create_leftover_blocks_create(clock: Any, *, root: str) -> Sqlite3Repository:
    return _LeftoverBlocksCreate(clock, root)


# -- file-log backends: the good file example over real files, changed at one public seam ----
#
# Each takes ``root`` only, so the system-call path explores it (a child served by
# ``scopecheck serve``): the good example (``scopecheck.examples.good_file_backend``) over
# the real file system, with one call of its ``FileSystem``, or one public method, changed.


def group_commit_every_second(clock: Any, *, root: str) -> FileRepository:
    return FileRepository(clock, SyncingEveryOther(OsFileSystem()), root)


def ack_after_long_startup(clock: Any, *, root: str) -> FileRepository:
    """A start-up that writes thousands of small records to a cache file under the root
    before the first answer (as an embedded library's does), then commits acknowledged
    before they are fsynced: a budget spent in trace order never reaches an acknowledgement."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, "warmup.cache"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for number in range(STARTUP_WRITES):
            os.write(fd, b"%08d\n" % number)
    finally:
        os.close(fd)
    return FileRepository(clock, NoAppendFsync(OsFileSystem()), root)


def fsync_retry_after_eio(clock: Any, *, root: str) -> FileRepository:
    return FileRepository(clock, RetryingFsync(OsFileSystem()), root)


def recovery_rewrite_unsynced(clock: Any, *, root: str) -> FileRepository:
    return RewritingRepair(clock, OsFileSystem(), root)


class _LeavingFailedAppends(FileStorage):
    def cut_back(self, why: str) -> None:
        """Skipped: the part of a failed append that reached the file stays, and the next
        commit is appended after it (only a write that fails after writing part of its
        bytes shows this)."""


class _NoCutBack(FileRepository):
    storage_class = _LeavingFailedAppends


def failed_append_left_in_place(clock: Any, *, root: str) -> FileRepository:
    return _NoCutBack(clock, OsFileSystem(), root)


def index_before_log(clock: Any, *, root: str) -> FileRepository:
    return IndexedRepository(clock, OsFileSystem(), root)


# -- bugs that separate the file-system profiles (CRASH-SYS-14, CRASH-SYS-15) ----------------


def file_create_without_directory_fsync(clock: Any, *, root: str) -> FileRepository:
    """A new Session's log fsynced, its directory never: lost under posix only."""
    return CreateWithoutDirectorySync(clock, OsFileSystem(), root)


def rename_without_file_fsync(clock: Any, *, root: str) -> FileRepository:
    """A rewritten log renamed over the old one, the directory fsynced, the data not: lost
    under every profile without ext4's flush of a file renamed over another."""
    return ReplacingRepository(clock, OsFileSystem(), root)


def swap_without_directory_fsync(clock: Any, *, root: str) -> FileRepository:
    """A log rewritten at open and swapped in by two renames, the old one unlinked with no
    directory fsync between: lost under posix and btrfs, not ext4-ordered (CRASH-SYS-20)."""
    return SwappingRepository(clock, OsFileSystem(), root)


def append_without_fsync(clock: Any, *, root: str) -> FileRepository:
    """Commits acknowledged once appended, never fsynced: lost under every profile."""
    return FileRepository(clock, NoAppendFsync(OsFileSystem()), root)


#: The planted bugs that separate the file-system profiles, with the profiles each fails
#: under (CRASH-SYS-15).
PROFILE_BUGS: dict[str, tuple[str, ...]] = {
    "syscall-file-create-without-directory-fsync": ("posix",),
    "syscall-rename-without-file-fsync": ("posix", "btrfs"),
    "syscall-swap-without-directory-fsync": ("posix", "btrfs"),
    "syscall-append-without-fsync": ("posix", "ext4-ordered", "btrfs"),
}

#: name -> (factory, the rules that may catch it, one line).  With synchronous=OFF the schema
#: itself may be lost, so the image does not even open (CRASH-FS-1) as often as it opens short
#: of an acknowledged commit (CRASH-FS-6).
PLANTED = {
    "syscall-ack-before-durable": (
        "ack_before_durable",
        "CRASH-FS-1 CRASH-FS-6",
        "commits acknowledged before they are fsynced (sqlite3 synchronous=OFF)",
    ),
    "syscall-journal-unlink-undurable": (
        "journal_unlink_undurable",
        "CRASH-FS-6",
        "the rollback journal's unlink never fsynced in its directory (synchronous=FULL, DELETE)",
    ),
    "syscall-create-without-directory-fsync": (
        "create_without_directory_fsync",
        "CRASH-FS-6",
        "a new Session's file renamed into place without fsyncing the directory",
    ),
    "syscall-io-error-escapes": (
        "io_error_escapes",
        "CRASH-FS-9",
        "a failed write surfaces as the driver's exception, not an error with a stable code",
    ),
    "syscall-create-leftover-blocks-create": (
        "create_leftover_blocks_create",
        "CRASH-FS-1",
        "a create a crash cut short leaves a half-built file that every later create trips on",
    ),
    "syscall-ack-after-long-startup": (
        "ack_after_long_startup",
        "CRASH-FS-6",
        "3,000 writes before the first answer, then commits acknowledged before any fsync",
    ),
    "syscall-group-commit-every-second": (
        "group_commit_every_second",
        "CRASH-FS-6",
        "a file log fsynced on every second commit only",
    ),
    "syscall-fsync-retry-after-eio": (
        "fsync_retry_after_eio",
        "CRASH-FS-9",
        "a failed fsync retried, and the commit acknowledged when the retry succeeds",
    ),
    "syscall-failed-append-left-in-place": (
        "failed_append_left_in_place",
        "CRASH-FS-9 CRASH-FS-10 CRASH-FS-11",
        "the part of a failed append left in the log, and the next commit appended after it",
    ),
    "syscall-index-before-log": (
        "index_before_log",
        "CRASH-FS-1 CRASH-FS-5 CRASH-FS-6",
        "two files made durable in the wrong order: an index fsynced before the log it names",
    ),
    "syscall-recovery-rewrite-unsynced": (
        "recovery_rewrite_unsynced",
        "CRASH-FS-5",
        "a torn tail repaired by renaming an unsynced rewrite over the log",
    ),
    "syscall-file-create-without-directory-fsync": (
        "file_create_without_directory_fsync",
        "CRASH-FS-2 CRASH-FS-6",
        "a new Session's log fsynced, its directory not: lost under posix only",
    ),
    "syscall-rename-without-file-fsync": (
        "rename_without_file_fsync",
        "CRASH-FS-6",
        "a rewritten log renamed over the old one and the directory fsynced, the new data not",
    ),
    "syscall-swap-without-directory-fsync": (
        "swap_without_directory_fsync",
        "CRASH-FS-2 CRASH-FS-6",
        "a log rewritten at open, swapped in by two renames and the old one unlinked with no "
        "directory fsync between: lost where directory operations are not ordered",
    ),
    "syscall-append-without-fsync": (
        "append_without_fsync",
        "CRASH-FS-3 CRASH-FS-6",
        "commits acknowledged once appended, never fsynced",
    ),
}


def spec_of(name: str) -> str:
    return f"{__name__}:{PLANTED[name][0]}"


def run(name: str, budget: float = 60.0) -> MutantResult:
    """Explore the planted bug's crash states (and, when the rule is about faults, its fault
    runs) until it is caught or ``budget`` seconds pass."""
    from scopecheck.process.syscall_crash import explore

    _, rule, description = PLANTED[name]
    spec = spec_of(name)
    command = [sys.executable, "-m", "scopecheck", "serve", spec]
    started = time.perf_counter()
    found = explore(spec, command, os.getcwd(), budget, seed=0, max_failures=1)
    seconds = round(time.perf_counter() - started, 3)
    failure = found.failures[0] if found.failures else None
    caught = failure is not None and failure.rule in rule.split()
    error = "" if failure is None else f"{failure.rule}: {failure.problem}"
    return MutantResult(name, "syscall", description, caught, seconds, None, "", error)


register_factories(__name__, "syscall", PLANTED, run)
