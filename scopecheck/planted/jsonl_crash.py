"""Planted JSONL bugs that only a crash (or an I/O fault) can reveal, and the crash check that
runs them (``Mutant.check``).

Without a crash each of these backends ends every workload in the right state, so the
machine cannot see them; :func:`crash_result` runs the crash explorer
(``scopecheck.crashsim.jsonl_sweep``) over the named workloads until a state breaks a CRASH rule and
reports the first one.  The two older crash-only JSONL mutants
(``jsonl-unlink-before-retire-durable``, ``jsonl-torn-tail-kept``) get the same check here.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable

import attrs

from scopecheck.backends.crash_explorers import JsonlCrashExplorer
from scopecheck.backends.registry import Backend
from scopecheck.impl.fs import AppendFile, FileSystem, ForwardingFileSystem, fs_error
from scopecheck.impl.jsonl import JsonlRepository, session_paths
from scopecheck.models.errors import StorageIOError
from scopecheck.planted import CATALOGUE, Mutant, MutantResult, register
from scopecheck.planted.jsonl import REPOSITORIES, jsonl_backend
from scopecheck.planted.seams import OpeningFileSystem, opening_over, over_fs


class NoAppendFsync(ForwardingFileSystem):
    """Acknowledges a commit once its data is appended, without fsyncing it (JSONL-10,
    CRASH-FS-6)."""

    def fsync(self, handle: AppendFile) -> None:
        return None


class SidecarHeaderInPlace(ForwardingFileSystem):
    """Creates a sidecar by writing its header straight into the final path: no temp file,
    no fsync, no rename, no fsync of ``.scopes`` (JSONL-2, JSONL-11)."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self._in_place: set[str] = set()
        self._skip_dir: str | None = None

    def write_file(self, path: str, data: bytes) -> None:
        final = path.removesuffix(session_paths.TEMP_SUFFIX)
        if path.endswith(session_paths.TEMP_SUFFIX) and final.endswith(
            session_paths.SIDECAR_SUFFIX
        ):
            self.inner.write_file(final, data)
            self._in_place.add(path)
            return
        self.inner.write_file(path, data)

    def fsync_file(self, path: str) -> None:
        if path not in self._in_place:
            self.inner.fsync_file(path)

    def rename(self, source: str, target: str) -> None:
        if source in self._in_place:
            self._in_place.discard(source)
            self._skip_dir = posixpath.dirname(target)
            return
        self.inner.rename(source, target)

    def fsync_dir(self, path: str) -> None:
        if self._skip_dir == path:
            self._skip_dir = None
            return
        self.inner.fsync_dir(path)


class NoCutBack(ForwardingFileSystem):
    """A failed append leaves its partial line and the handle stays usable, so the next
    append follows the fragment (REFERENCE §1 "known weak spot", JSONL-12)."""

    def truncate(self, handle: AppendFile, size: int) -> None:
        return None


class NoRepublishAtOpen(OpeningFileSystem):
    """Open drops torn tails from what it replays but never republishes the files, so the
    next append lands after the fragment (JSONL-18)."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self._skipped: set[str] = set()

    def write_file(self, path: str, data: bytes) -> None:
        if self.opening and path.endswith(session_paths.TEMP_SUFFIX):
            self._skipped.add(path)
            return
        self.inner.write_file(path, data)

    def fsync_file(self, path: str) -> None:
        if path not in self._skipped:
            self.inner.fsync_file(path)

    def rename(self, source: str, target: str) -> None:
        if source in self._skipped:
            self._skipped.discard(source)
            return
        self.inner.rename(source, target)


class NoUnlinkRetryAtOpen(OpeningFileSystem):
    """Open never unlinks a retired sidecar again (000 §6.3 stage 9, JSONL-9): the file it
    finds stays, whatever it holds."""

    def unlink(self, path: str) -> None:
        if self.opening and path.endswith(session_paths.SIDECAR_SUFFIX):
            raise fs_error("unlink", path, PermissionError(13, "open does not retry unlinks"))
        self.inner.unlink(path)


class NoScopesDirFsync(ForwardingFileSystem):
    """Creates ``.scopes`` and publishes sidecars in it without fsyncing the directories, so
    power loss can undo a sidecar whose commits were acknowledged (JSONL-11)."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self._created: str | None = None

    def create_dir(self, path: str, recursive: bool = True) -> None:
        self.inner.create_dir(path, recursive=recursive)
        if path.endswith(session_paths.SCOPES_SUFFIX):
            self._created = posixpath.dirname(path)

    def fsync_dir(self, path: str) -> None:
        if path.endswith(session_paths.SCOPES_SUFFIX):
            return
        if path == self._created:
            self._created = None
            return
        self.inner.fsync_dir(path)


class RetryingFsync(ForwardingFileSystem):
    """Retries a failed fsync of the log and acknowledges when the retry succeeds: after EIO
    Linux marks the failed pages clean, so the retry wrote nothing ("fsyncgate",
    CRASH-SYS-11)."""

    def fsync(self, handle: AppendFile) -> None:
        try:
            self.inner.fsync(handle)
        except StorageIOError:
            self.inner.fsync(handle)


NEW: dict[str, tuple[str, type[JsonlRepository]]] = {
    "jsonl-ack-before-fsync": (
        "a commit is acknowledged after its append but before fsync (JSONL-10)",
        over_fs("ack-before-fsync", NoAppendFsync),
    ),
    "jsonl-sidecar-header-in-place": (
        "the first sidecar header is written in place instead of temp + fsync + rename "
        "(JSONL-2, JSONL-11)",
        over_fs("sidecar-header-in-place", SidecarHeaderInPlace),
    ),
    "jsonl-torn-tail-not-repaired": (
        "open drops a torn tail from replay but leaves it in the file, so the next append "
        "follows it (JSONL-18)",
        opening_over("torn-tail-not-repaired", NoRepublishAtOpen),
    ),
    "jsonl-retire-unlink-never-retried": (
        "open never retries the unlink of a retired sidecar (JSONL-9, 000 §6.3 stage 9)",
        opening_over("retire-unlink-never-retried", NoUnlinkRetryAtOpen),
    ),
    "jsonl-failed-append-not-cut-back": (
        "a failed append leaves a partial line and the handle stays usable, so the next "
        "append follows it (JSONL-12)",
        over_fs("failed-append-not-cut-back", NoCutBack),
    ),
    "jsonl-fsync-retry-after-eio": (
        "a failed fsync of the log retried, and the commit acknowledged when the retry "
        "succeeds (CRASH-SYS-11)",
        over_fs("fsync-retry-after-eio", RetryingFsync),
    ),
    "jsonl-sidecar-without-dir-fsync": (
        "a new sidecar is published without fsyncing .scopes, so power loss can undo it "
        "after its commits were acknowledged (JSONL-11)",
        over_fs("sidecar-without-dir-fsync", NoScopesDirFsync),
    ),
}


def crash_result(name: str, description: str, repo_class: type[JsonlRepository]) -> MutantResult:
    """Run the crash explorer over the named workloads until a state fails (CRASH-*)."""
    from scopecheck.crashsim.jsonl_sweep import explore_workload
    from scopecheck.crashsim.jsonl_workloads import BUNDLED, NAMED

    started = time.perf_counter()
    first = None
    for workload_name in NAMED:
        report = explore_workload(
            BUNDLED[workload_name](), repo_class=repo_class, max_failures=1, mode="unsynced"
        )
        if report.failures:
            first = report.failures[0]
            break
    seconds = round(time.perf_counter() - started, 3)
    program = (
        f"scopecheck crash --workload {first.workload['name']} --mode unsynced\n# {first}"
        if first
        else ""
    )
    return MutantResult(
        name, "jsonl", description, first is not None, seconds, None, program, str(first or "")
    )


def _check(
    name: str, description: str, repo_class: type[JsonlRepository]
) -> Callable[[], MutantResult]:
    return lambda: crash_result(name, description, repo_class)


def _make(name: str, repo: type[JsonlRepository]) -> Callable[[], Backend]:
    def make() -> Backend:
        made = jsonl_backend(name.removeprefix("jsonl-"), repo)
        return attrs.evolve(made, crash=JsonlCrashExplorer(repo, backend=name))

    return make


for _name, (_description, _repo) in NEW.items():
    register(
        Mutant(
            _name,
            "jsonl",
            _description,
            _make(_name, _repo),
            "crash",
            check=_check(_name, _description, _repo),
        )
    )


def _attach_existing() -> None:
    """Give the crash-only mutants of ``mutants/jsonl.py`` the crash explorer as their check."""
    for name in ("jsonl-unlink-before-retire-durable", "jsonl-torn-tail-kept"):
        old = CATALOGUE.get(name)
        if old is not None and old.check is None:
            check = _check(old.name, old.description, REPOSITORIES[name])
            CATALOGUE[name] = attrs.evolve(old, check=check)


_attach_existing()
