"""Planted durability bugs on the ``FileSystem`` path (CRASH-FS-*, CRASH-COV-*).

Each is the good file example (``scopecheck.examples.good_file_backend``) given a factory
``make_backend(clock, *, fs, root)`` -- the door a user with a ``FileSystem``-based backend comes
in by -- with the ``FileSystem`` it is handed wrapped at one call (a public seam: the backend
underneath is unchanged), or with one public method of the example's classes overridden (a
repair, a storage's ``persist``).  With no crash and no fault every one of them stores the right
state; ``scopecheck mutants`` runs each through
:func:`scopecheck.crashsim.generic_sweep.explore`, the exploration ``scopecheck validate`` runs for
such a factory, and expects the rule named here.
"""

from __future__ import annotations

import time
from typing import Any

from scopecheck.examples.good_backend import DictRepository
from scopecheck.examples.good_file_backend import FileRepository, FileStorage
from scopecheck.impl.fs import AppendFile, FileSystem, ForwardingFileSystem
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import CorruptError, StorageIOError, usage
from scopecheck.planted import MutantResult, register_factories
from scopecheck.planted.jsonl_crash import NoAppendFsync, RetryingFsync

#: How many records the start-up writes before the backend answers anything.
STARTUP_WRITES = 3000


def fs_ack_after_long_startup(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    """A first start that writes thousands of small records to a cache file under the root
    before anything is acknowledged (as an embedded library's does), never synced; then commits
    acknowledged before they are fsynced.  A budget spent in trace order checks thousands of
    start-up crash points first; coverage order checks after every acknowledgement first
    (CRASH-COV-1), where the missing fsync shows (CRASH-FS-6)."""
    cache = f"{root.rstrip('/')}/warmup.cache"
    if not fs.exists(cache):
        fs.create_dir(root)
        fs.write_file(cache, b"")
        handle = fs.open_append(cache)
        for number in range(STARTUP_WRITES):
            fs.append(handle, b"%08d\n" % number)
        fs.close(handle)
    return FileRepository(clock, NoAppendFsync(fs), root)


class SyncingEveryOther(ForwardingFileSystem):
    """Group commit gone wrong: an fsync of a log handle happens on every second call only."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self.calls = 0

    def fsync(self, handle: AppendFile) -> None:
        self.calls += 1
        if self.calls % 2 == 0:
            self.inner.fsync(handle)


def fs_group_commit_every_second(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return FileRepository(clock, SyncingEveryOther(fs), root)


def fs_fsync_retry_after_eio(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return FileRepository(clock, RetryingFsync(fs), root)


class _NoCutBack(ForwardingFileSystem):
    """The cut back after a failed append does nothing: the bytes the append wrote before it
    failed stay, and the next commit's line is appended after them."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self.failed = False

    def append(self, handle: AppendFile, data: bytes) -> None:
        try:
            self.inner.append(handle, data)
        except StorageIOError:
            self.failed = True
            raise

    def truncate(self, handle: AppendFile, size: int) -> None:
        if self.failed:
            self.failed = False
            return
        self.inner.truncate(handle, size)


def fs_failed_append_not_cut_back(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return FileRepository(clock, _NoCutBack(fs), root)


class RewritingRepair(FileRepository):
    def repair(self, path: str, complete: bytes) -> None:
        """Cuts a torn tail by writing the good prefix to a new file renamed over the log --
        fsyncing the directory but never the new file's data.  Atomic against a process crash
        (the rename swaps whole files), but a power loss during or right after the recovery
        keeps the durable rename and loses the unsynced data: the log comes back empty or
        torn, its acknowledged commits gone (CRASH-FS-5).  The example's own repair truncates
        in place and fsyncs; a truncate alone left unsynced would be no bug -- lost, it brings
        back the same torn tail, which the next open cuts again."""
        self.fs.write_file(path + ".tmp", complete)
        self.fs.rename(path + ".tmp", path)
        self.fs.fsync_dir(self.root)


def fs_recovery_truncate_unsynced(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return RewritingRepair(clock, fs, root)


class IndexedStorage(FileStorage):
    path = ""  # the log's path

    def attach(self, fs: Any, path: str) -> None:
        super().attach(fs, path)
        self.path = path

    def persist(self, line: bytes) -> None:
        """Appends the line, then records its length in an index file -- fsyncing the index
        before the log, so a power loss between the two leaves an index naming bytes the log
        never got."""
        index = f"{self.path}.idx"
        self.fs.append(self.handle, line)
        if not self.fs.exists(index):
            self.fs.write_file(index, b"")
        handle = self.fs.open_append(index)
        try:
            self.fs.append(handle, b"%d\n" % len(line))
            self.fs.fsync(handle)
        finally:
            self.fs.close(handle)
        self.fs.fsync(self.handle)
        self.size += len(line)


class IndexedRepository(FileRepository):
    storage_class = IndexedStorage

    def load(self, session_id: str) -> dict[str, Any]:
        """Trusts the index: the log must hold every line it names."""
        index = f"{self.path(session_id)}.idx"
        if self.fs.exists(index):
            named = sum(int(n) for n in self.fs.read_bytes(index).split())
            if named > self.fs.file_size(self.path(session_id)):
                raise CorruptError("corrupt", f"{index} names bytes the log does not hold")
        return super().load(session_id)


def fs_two_files_out_of_order(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    """A log with an index file naming its lines, the index made durable first: a power loss
    before the log's fsync (the commit not yet acknowledged) keeps the index and drops the
    line, and the reopen refuses the Session as corrupt (CRASH-FS-1)."""
    return IndexedRepository(clock, fs, root)


# -- bugs that separate the file-system profiles (CRASH-SYS-14, CRASH-SYS-15) ----------------


class CreateWithoutDirectorySync(FileRepository):
    def create(self, session_id: str) -> Any:
        """Writes the new Session's empty log and fsyncs it, but never fsyncs the directory:
        the name is durable where a file system commits it with the file's fsync (ext4's
        journal, btrfs's log tree), not under POSIX, where a power loss after the create was
        acknowledged loses the Session (CRASH-FS-6)."""
        if check_session_id(session_id) in self.sessions:
            raise usage("already_exists", f"session {session_id!r} exists")
        self.fs.write_file(self.path(session_id), b"")
        self.fs.fsync_file(self.path(session_id))
        return DictRepository.create(self, session_id)


def fs_create_without_directory_fsync(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return CreateWithoutDirectorySync(clock, fs, root)


class ReplacingStorage(FileStorage):
    def persist(self, line: bytes) -> None:
        """Commits by rewriting the log: its lines and the new one written to a new file,
        renamed over the log, the directory fsynced -- the new file's data never fsynced.  A
        power loss keeps the durable rename and can lose the data (CRASH-FS-6), unless the file
        system flushes a file renamed over another first (ext4's ``auto_da_alloc``)."""
        path = self.handle.path
        self.fs.write_file(path + ".new", self.fs.read_bytes(path) + line)
        self.fs.rename(path + ".new", path)
        self.fs.fsync_dir(path.rsplit("/", 1)[0] or "/")
        self.size += len(line)


class ReplacingRepository(FileRepository):
    storage_class = ReplacingStorage


def fs_rename_without_file_fsync(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return ReplacingRepository(clock, fs, root)


class SwappingRepository(FileRepository):
    """Rewrites a Session's log on every first open, as a store compacts its files at open
    (LevelDB's reopen): the log's lines written to ``….log.new`` and fsynced, the log renamed
    aside to ``….log.old``, the new one renamed into place, the old one unlinked -- and the
    directory fsynced only after the unlink, not between the renames and it.  A file system
    that does not order directory operations (posix, btrfs) may keep the unlink and lose a
    rename: the Session's log is gone (CRASH-FS-6, CRASH-SYS-20).  A swap a crash or a failed
    call cut short (the log aside, not yet replaced) is undone when the repository is made and
    when the Session is opened."""

    def __init__(self, clock: Any, fs: FileSystem, root: str) -> None:
        base = root.rstrip("/")
        fs.create_dir(base)
        for entry in fs.list_dir(base):
            if entry.name.endswith(".log.old"):
                _restore(fs, base, f"{base}/{entry.name.removesuffix('.old')}")
        super().__init__(clock, fs, root)

    def load(self, session_id: str) -> dict[str, Any]:
        path = self.path(session_id)
        _restore(self.fs, self.root, path)
        data = super().load(session_id)
        self.fs.write_file(path + ".new", self.fs.read_bytes(path))
        self.fs.fsync_file(path + ".new")
        self.fs.rename(path, path + ".old")
        self.fs.rename(path + ".new", path)
        self.fs.unlink(path + ".old")  # no fsync of the directory before this
        self.fs.fsync_dir(self.root)
        return data


def _restore(fs: FileSystem, root: str, log: str) -> None:
    """Put a log a swap left aside back under its name."""
    if fs.exists(log + ".old") and not fs.exists(log):
        fs.rename(log + ".old", log)
        fs.fsync_dir(root)


def fs_swap_without_directory_fsync(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    return SwappingRepository(clock, fs, root)


def fs_append_without_fsync(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
    """Commits acknowledged once appended, never fsynced: lost under every profile."""
    return FileRepository(clock, NoAppendFsync(fs), root)


#: The planted bugs that separate the file-system profiles, with the profiles each fails
#: under (CRASH-SYS-15): a missing directory fsync after a create only under posix, a missing
#: fsync of a file renamed over another under every profile without ext4's flush, a missing
#: directory fsync between a swap's renames and its unlink under every profile that does not
#: order directory operations (CRASH-SYS-20), a missing fsync of appended data under all.
PROFILE_BUGS: dict[str, tuple[str, ...]] = {
    "fs-create-without-directory-fsync": ("posix",),
    "fs-rename-without-file-fsync": ("posix", "btrfs"),
    "fs-swap-without-directory-fsync": ("posix", "btrfs"),
    "fs-append-without-fsync": ("posix", "ext4-ordered", "btrfs"),
}

#: name -> (factory, the rules that may catch it, one line).
PLANTED = {
    "fs-ack-after-long-startup": (
        "fs_ack_after_long_startup",
        "CRASH-FS-6",
        f"{STARTUP_WRITES:,} unsynced writes before the first answer, then commits acknowledged "
        "before any fsync",
    ),
    "fs-group-commit-every-second": (
        "fs_group_commit_every_second",
        "CRASH-FS-6",
        "a file log fsynced on every second commit only",
    ),
    "fs-fsync-retry-after-eio": (
        "fs_fsync_retry_after_eio",
        "CRASH-FS-9",
        "a failed fsync retried, and the commit acknowledged when the retry succeeds",
    ),
    "fs-failed-append-not-cut-back": (
        "fs_failed_append_not_cut_back",
        "CRASH-FS-9 CRASH-FS-10",
        "the bytes of a failed append left in the log, the next commit appended after them",
    ),
    "fs-recovery-truncate-unsynced": (
        "fs_recovery_truncate_unsynced",
        "CRASH-FS-5",
        "a torn tail cut off by renaming an unsynced rewrite of the good prefix over the log",
    ),
    "fs-two-files-out-of-order": (
        "fs_two_files_out_of_order",
        "CRASH-FS-1",
        "two files made durable in the wrong order: an index fsynced before the log it names",
    ),
    "fs-create-without-directory-fsync": (
        "fs_create_without_directory_fsync",
        "CRASH-FS-2 CRASH-FS-6",
        "a new Session's log fsynced, its directory not: lost under posix only",
    ),
    "fs-rename-without-file-fsync": (
        "fs_rename_without_file_fsync",
        "CRASH-FS-6",
        "a rewritten log renamed over the old one and the directory fsynced, the new data not",
    ),
    "fs-swap-without-directory-fsync": (
        "fs_swap_without_directory_fsync",
        "CRASH-FS-2 CRASH-FS-6",
        "a log rewritten at open, swapped in by two renames and the old one unlinked with no "
        "directory fsync between: lost where directory operations are not ordered",
    ),
    "fs-append-without-fsync": (
        "fs_append_without_fsync",
        "CRASH-FS-3 CRASH-FS-6",
        "commits acknowledged once appended, never fsynced",
    ),
}


def spec_of(name: str) -> str:
    return f"{__name__}:{PLANTED[name][0]}"


def run(name: str, budget: float = 60.0) -> MutantResult:
    """Explore the planted bug as ``validate`` does -- crash states in coverage order, then
    single I/O faults -- until it is caught or ``budget`` seconds pass."""
    from scopecheck.crashsim.generic_sweep import explore

    function, rule, description = PLANTED[name]
    started = time.perf_counter()
    found = explore(globals()[function], budget=budget, seed=0, max_failures=1)
    seconds = round(time.perf_counter() - started, 3)
    failure = found.failures[0] if found.failures else None
    caught = failure is not None and failure.rule in rule.split()
    error = "" if failure is None else f"{failure.rule}: {failure.problem}"
    program = "" if failure is None else f"scopecheck replay <record>  # {failure}"
    return MutantResult(name, "fs", description, caught, seconds, None, program, error)


register_factories(__name__, "fs", PLANTED, run)
