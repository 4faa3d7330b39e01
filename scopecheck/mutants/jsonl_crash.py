"""Planted JSONL bugs that only a crash (or an I/O fault) can reveal, and the crash check that
runs them (``Mutant.check``).

Without a crash each of these backends ends every workload in the right state, so the
machine cannot see them; :func:`crash_result` runs the crash explorer
(``scopecheck.crashsim.jsonl_sweep``) over the named workloads until a state breaks a CRASH rule and
reports the first one.  The two older crash-only JSONL mutants
(``jsonl-unlink-before-retire-durable``, ``jsonl-torn-tail-kept``) get the same check here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import attrs

from scopecheck.backends import Backend
from scopecheck.crash_explorers import JsonlCrashExplorer
from scopecheck.impl.fs import join_lines
from scopecheck.impl.jsonl import JsonlRepository, JsonlStorage, layout
from scopecheck.impl.jsonl.codec import encode_scope_header
from scopecheck.impl.jsonl.storage import publish
from scopecheck.models.errors import StorageIOError
from scopecheck.mutants import CATALOGUE, Mutant, MutantResult, register
from scopecheck.mutants.jsonl import _backend, _repository


class AckBeforeFsync(JsonlStorage):
    """Acknowledges a commit once its line is appended, without fsyncing it (JSONL-10)."""

    def _append_durably(self, handle: Any, size: int, line: bytes) -> int:
        try:
            self._fs.append(handle, line)
        except StorageIOError:
            self._fs.truncate(handle, size)
            raise
        return size + len(line)


class SidecarHeaderInPlace(JsonlStorage):
    """Creates a sidecar by writing its header straight into the final path (no temp file, no
    rename, no fsync; JSONL-2, JSONL-11)."""

    def _open_sidecar(self, scope_id: str) -> Any:
        fs = self._fs
        path = layout.sidecar_path(self._main, scope_id)
        if scope_id not in self._on_disk:
            directory = layout.scopes_dir(self._main)
            if not fs.is_dir(directory):
                fs.create_dir(directory, recursive=True)
            fs.write_file(path, encode_scope_header(self.session_id, scope_id) + b"\n")
            self._on_disk.add(scope_id)
        handle = fs.open_append(path)
        self._sidecar_handles[scope_id] = handle
        self._sidecar_sizes[scope_id] = fs.file_size(path)
        return handle


class FailedAppendNotCutBack(JsonlStorage):
    """A failed append leaves its partial line and the handle stays usable, so the next append
    follows the fragment (REFERENCE §1 "known weak spot", JSONL-12)."""

    def _append_durably(self, handle: Any, size: int, line: bytes) -> int:
        fs = self._fs
        try:
            fs.append(handle, line)
        except StorageIOError:
            raise  # planted bug: no cut back, and the handle stays usable
        fs.fsync(handle)
        return size + len(line)


def _load_variant(
    self: JsonlRepository, main: str, session_id: str, *, repair: bool, retry: bool
) -> JsonlStorage:
    """``JsonlRepository._load_files`` with torn-tail repair or stage-9 unlink switched off."""
    from scopecheck.impl.jsonl.replay import replay
    from scopecheck.impl.jsonl.storage import _dumps

    fs = self.fs
    load = self._load_plan(main, session_id)
    load.raise_if_corrupt()
    assert load.main.header is not None
    header = load.main.header
    main_size = sum(len(line) + 1 for line in load.main.lines)
    if load.main.torn is not None:
        if repair:
            header = dict(header)
            header["nextSeq"] = load.next_seq
            data = join_lines([_dumps(header), *load.main.lines[1:]])
            publish(fs, main, data)
            main_size = len(data)
        else:  # planted bug: the fragment stays, the next append follows it
            main_size = fs.file_size(main)
    on_disk: set[str] = set()
    for scope_id, scan in load.sidecars.items():
        if scope_id not in load.live and retry:
            with contextlib.suppress(StorageIOError):
                fs.unlink(scan.path)
                continue
        on_disk.add(scope_id)
        if scan.torn is not None and repair:
            publish(fs, scan.path, join_lines(scan.lines))
    for temp in load.temps:
        with contextlib.suppress(StorageIOError):
            fs.unlink(temp)
    state = replay(load)
    return self.storage_class(fs, main, session_id, header, state, self._clock, main_size, on_disk)


def _load_without_retry(self: JsonlRepository, main: str, session_id: str) -> JsonlStorage:
    """Open without stage 9: retired sidecars are never unlinked again (JSONL-9, JSONL-16)."""
    return _load_variant(self, main, session_id, repair=True, retry=False)


def _load_torn_not_repaired(self: JsonlRepository, main: str, session_id: str) -> JsonlStorage:
    """Open drops torn tails from what it replays but never republishes the files, so the next
    append lands after the fragment (JSONL-18)."""
    return _load_variant(self, main, session_id, repair=False, retry=True)


def _publish_no_dir_sync(fs: Any, path: str, data: bytes) -> None:
    temp = layout.temp_path(path)
    fs.write_file(temp, data)
    fs.fsync_file(temp)
    fs.rename(temp, path)


class NoDirFsyncStorage(JsonlStorage):
    """Creates sidecars (and the ``.scopes`` directory) without fsyncing their directory, so
    power loss can undo a file whose commits were acknowledged (JSONL-11)."""

    def _open_sidecar(self, scope_id: str) -> Any:
        fs = self._fs
        path = layout.sidecar_path(self._main, scope_id)
        if scope_id not in self._on_disk:
            directory = layout.scopes_dir(self._main)
            if not fs.is_dir(directory):
                fs.create_dir(directory, recursive=True)
            _publish_no_dir_sync(fs, path, encode_scope_header(self.session_id, scope_id) + b"\n")
            self._on_disk.add(scope_id)
        handle = fs.open_append(path)
        self._sidecar_handles[scope_id] = handle
        self._sidecar_sizes[scope_id] = fs.file_size(path)
        return handle


NEW: dict[str, tuple[str, type[JsonlRepository]]] = {
    "jsonl-ack-before-fsync": (
        "a commit is acknowledged after its append but before fsync (JSONL-10)",
        _repository("ack-before-fsync", AckBeforeFsync),
    ),
    "jsonl-sidecar-header-in-place": (
        "the first sidecar header is written in place instead of temp + fsync + rename "
        "(JSONL-2, JSONL-11)",
        _repository("sidecar-header-in-place", SidecarHeaderInPlace),
    ),
    "jsonl-torn-tail-not-repaired": (
        "open drops a torn tail from replay but leaves it in the file, so the next append "
        "follows it (JSONL-18)",
        _repository("torn-tail-not-repaired", _load=_load_torn_not_repaired),
    ),
    "jsonl-retire-unlink-never-retried": (
        "open never retries the unlink of a retired sidecar (JSONL-9, 000 §6.3 stage 9)",
        _repository("retire-unlink-never-retried", _load=_load_without_retry),
    ),
    "jsonl-failed-append-not-cut-back": (
        "a failed append leaves a partial line and the handle stays usable, so the next "
        "append follows it (JSONL-12)",
        _repository("failed-append-not-cut-back", FailedAppendNotCutBack),
    ),
    "jsonl-sidecar-without-dir-fsync": (
        "a new sidecar is published without fsyncing .scopes, so power loss can undo it "
        "after its commits were acknowledged (JSONL-11)",
        _repository("sidecar-without-dir-fsync", NoDirFsyncStorage),
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
        f"scopecheck crash --workload {first.workload} --mode unsynced\n"
        f"# crash at op {first.op_index} ({first.op}), {first.variant}: {first.rule} "
        f"{first.problem}"
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
        made = _backend(name.removeprefix("jsonl-"), repo)
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
    """Give the older crash-only JSONL mutants the crash explorer as their check."""
    from scopecheck.mutants.jsonl import TornTailKept, UnlinkBeforeRetireDurable

    classes = {
        "jsonl-unlink-before-retire-durable": _repository(
            "unlink-before-retire-durable", UnlinkBeforeRetireDurable
        ),
        "jsonl-torn-tail-kept": TornTailKept,
    }
    for name, repo in classes.items():
        old = CATALOGUE.get(name)
        if old is not None and old.check is None:
            CATALOGUE[name] = attrs.evolve(old, check=_check(old.name, old.description, repo))


_attach_existing()
