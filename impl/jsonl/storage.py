"""The JSONL backend: a format-4 main log plus one sidecar file per live ephemeral scope.

Resident state is the Memory backend's (the seeds' JSONL storage also projects into the shared
in-memory state); what this module adds is the durable log: every acknowledged commit is one
fsynced line in exactly one file (JSONL-3, JSONL-10), reopen replays the files through the nine
stages of 000 §6.3 with the high-water mark taken before anything is ignored (JSONL-7, JSONL-8),
and retirement cleanup runs on the commit queue after the main transaction is durable
(JSONL-9, JSONL-16).  All I/O goes through :mod:`scopecheck.impl.fs`.

Subclasses in ``scopecheck/mutants/jsonl.py`` override the small hook methods
(``_load_plan``, ``_cleanup_retired``, ``_append_main_then_cleanup``, ``list``) to plant known
bugs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Sequence
from typing import Any

import orjson

from scopecheck.impl.fs import AppendFile, FileSystem, OsFileSystem, fs_code, join_lines
from scopecheck.impl.jsonl import layout
from scopecheck.impl.jsonl.codec import (
    encode_header,
    encode_scope_header,
    encode_transaction,
    record_op,
)
from scopecheck.impl.jsonl.fork import Capture, SourcePrefix, fork_jsonl
from scopecheck.impl.jsonl.layouts import (
    FileLayout,
    FlatLayout,
    Layout,
    UpstreamLayout,
    header_session_id,
)
from scopecheck.impl.jsonl.legacy import (
    LegacyIds,
    LegacyImport,
    import_legacy,
    is_legacy_header,
    uuid7_ids,
)
from scopecheck.impl.jsonl.legacy import upgrade_bytes as legacy_upgrade_bytes
from scopecheck.impl.jsonl.legacy_fork import LegacyCapture
from scopecheck.impl.jsonl.load import FileScan, SessionLoad, Tx, load_session
from scopecheck.impl.jsonl.replay import replay
from scopecheck.impl.memory import MemoryState, MemoryStorage, new_fork_id, wall_clock_ms
from scopecheck.impl.validation import check_references, check_session_id, check_shape
from scopecheck.models.errors import ClosedError, StorageIOError, UsageError, usage
from scopecheck.models.fork import ForkOptions, check_fork_options
from scopecheck.models.fork_policy import ForkDriver
from scopecheck.models.protocols import Clock
from scopecheck.models.records import Committed
from scopecheck.models.writes import RetireScope, Write

_dumps = orjson.dumps


def publish(fs: FileSystem, path: str, data: bytes) -> None:
    """Atomic publish (REFERENCE §1, JSONL-11): write ``<path>.tmp``, fsync it, rename it over
    ``path``, fsync the directory; the temp file is removed if any step fails."""
    temp = layout.temp_path(path)
    try:
        fs.write_file(temp, data)
        fs.fsync_file(temp)
        fs.rename(temp, path)
    except BaseException:
        with contextlib.suppress(StorageIOError):
            fs.remove(temp, force=True)
        raise
    fs.fsync_dir(os.path.dirname(path))


def valid_id(session_id: str) -> str:
    """A session id that can name a main log in every layout (REPO-5, JSONL-14)."""
    layout.encode_session_id(check_session_id(session_id))
    return session_id


def legacy_not_upgraded(session_id: str) -> UsageError:
    """The rejection of forking an open, not yet upgraded legacy Session (001 §1.3, LEGACY-13).

    Its entry ids were minted for this open only (UUIDv7 tails); a disk reparse cannot
    reproduce them, so neither the destination nor a caller's ``entry_id`` could match what the
    open Session shows — and a fork never upgrades its source itself."""
    return usage(
        "legacy_not_upgraded",
        f"session {session_id!r} is an open legacy file not yet upgraded to format 4: its "
        "entry ids exist only in this open handle until the first non-empty commit persists "
        "them; commit to it first, or close it and fork the closed file (001 §1.3)",
        session=session_id,
    )


class JsonlStorage(MemoryStorage):
    """One open JSONL Session.  Build through :class:`JsonlRepository`."""

    def __init__(
        self,
        fs: FileSystem,
        main: str,
        session_id: str,
        header: dict[str, Any],
        state: MemoryState,
        clock: Clock,
        main_size: int,
        sidecars_on_disk: set[str],
    ) -> None:
        super().__init__(session_id, state, clock)
        self._fs = fs
        self._main = main
        self._header = header
        self._main_handle: AppendFile | None = None
        self._main_size = main_size
        self._sidecar_handles: dict[str, AppendFile] = {}
        self._sidecar_sizes: dict[str, int] = {}
        #: Scope IDs whose sidecar file exists on disk (live, or retired but not yet unlinked).
        self._on_disk = set(sidecars_on_disk)
        self._unusable: str | None = None
        #: Cleanup failures seen by this handle: (scope ID, error); for tests and the inspector.
        self.cleanup_failures: list[tuple[str, StorageIOError]] = []
        #: An imported legacy file not yet rewritten as format 4 (LEGACY-9).
        self.legacy: LegacyImport | None = None

    @property
    def path(self) -> str:
        return self._main

    @property
    def parent_session_id(self) -> str | None:
        """``parentSessionId`` of the header (FORK-11), else ``None``."""
        parent = self._header.get("parentSessionId")
        return parent if isinstance(parent, str) else None

    # -- commit ------------------------------------------------------------------------------

    def _run_commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        """Runs inside Memory's admission bookkeeping (seal, drain on close; LIFE-1): validate,
        write the one line durably, then apply (JSONL-3, JSONL-10)."""
        checked = check_shape(writes)
        with self._queue:
            if self._unusable is not None:
                raise StorageIOError(
                    "unusable",
                    f"this handle stopped accepting writes after a failed append "
                    f"({self._unusable}); close it and reopen the Session (JSONL-12)",
                )
            state = self._state
            check_references(checked.writes, self._id_exists, state.entries.__contains__)
            if not checked.writes:
                return ()
            if self.legacy is not None:
                self._upgrade_legacy(self.legacy)
            timestamp = self._clock()
            first = self._first_seq(checked.scope_id)
            committed = tuple(
                Committed(first + index, timestamp, write)
                for index, write in enumerate(checked.writes)
            )
            line = encode_transaction(committed)
            if checked.scope_id is None:
                retired = [w.retired.id for w in checked.writes if isinstance(w, RetireScope)]
                self._append_main_then_cleanup(line, committed, list(dict.fromkeys(retired)))
            else:
                self._append_sidecar(checked.scope_id, line)
                self._apply_all(committed)
            return committed

    def _upgrade_legacy(self, imported: LegacyImport) -> None:
        """Rewrite the legacy file as format 4 under the commit queue, before the caller's
        transaction is appended anywhere (LEGACY-9, 000 §6.4).  A failure leaves the legacy file
        and this handle as they were; the caller's commit fails and may be retried."""
        data = legacy_upgrade_bytes(imported)
        # A stray .scopes directory could otherwise join the new format-4 Session.
        self._fs.remove(layout.scopes_dir(self._main), recursive=True, force=True)
        publish(self._fs, self._main, data)
        self._header = orjson.loads(data[: data.index(b"\n")])
        self._main_size = len(data)
        self._on_disk.clear()
        self.legacy = None

    def _apply_all(self, committed: tuple[Committed, ...]) -> None:
        for item in committed:
            self._apply(item)
        self._advance(None, len(committed))

    def _append_main_then_cleanup(
        self, line: bytes, committed: tuple[Committed, ...], retired: list[str]
    ) -> None:
        """Append the main transaction durably, apply it, then clean up retired sidecars while
        still holding the commit queue (JSONL-8, JSONL-9)."""
        self._append_main(line)
        self._apply_all(committed)
        for scope_id in retired:
            self._cleanup_retired(scope_id)

    def _append_main(self, line: bytes) -> None:
        if self._main_handle is None:
            self._main_handle = self._fs.open_append(self._main)
        self._main_size = self._append_durably(self._main_handle, self._main_size, line)

    def _append_sidecar(self, scope_id: str, line: bytes) -> None:
        handle = self._sidecar_handles.get(scope_id)
        if handle is None:
            handle = self._open_sidecar(scope_id)
        size = self._sidecar_sizes[scope_id]
        self._sidecar_sizes[scope_id] = self._append_durably(handle, size, line)

    def _open_sidecar(self, scope_id: str) -> AppendFile:
        """Open the scope's sidecar, creating it (header via temp + rename) if absent
        (JSONL-2, 000 §6.1)."""
        fs = self._fs
        path = layout.sidecar_path(self._main, scope_id)
        if scope_id not in self._on_disk:
            directory = layout.scopes_dir(self._main)
            if not fs.is_dir(directory):
                fs.create_dir(directory, recursive=True)
                fs.fsync_dir(os.path.dirname(directory))
            header = encode_scope_header(self.session_id, scope_id) + b"\n"
            publish(fs, path, header)
            self._on_disk.add(scope_id)
            size = len(header)  # just published: no need to ask the filesystem
        else:
            size = fs.file_size(path)
        handle = fs.open_append(path)
        self._sidecar_handles[scope_id] = handle
        self._sidecar_sizes[scope_id] = size
        return handle

    def _append_durably(self, handle: AppendFile, size: int, line: bytes) -> int:
        """Append one whole line and fsync it before the commit is acknowledged (JSONL-10).

        A failed append is cut back to ``size`` so no later line can follow a partial one; if
        that is impossible, or the fsync itself failed, the handle becomes unusable (JSONL-12).
        """
        fs = self._fs
        try:
            fs.append(handle, line)
        except StorageIOError as exc:
            try:
                fs.truncate(handle, size)
            except StorageIOError:
                self._unusable = f"append to {handle.path} failed and could not be cut back"
            raise exc from None
        try:
            fs.fsync(handle)
        except StorageIOError as exc:
            with contextlib.suppress(StorageIOError):
                fs.truncate(handle, size)
            self._unusable = f"fsync of {handle.path} failed"
            raise exc from None
        return size + len(line)

    def _cleanup_retired(self, scope_id: str) -> None:
        """Close and unlink a retired scope's sidecar; a failure is recorded, not raised: the
        retirement is already committed and reopen retries the unlink (JSONL-9)."""
        handle = self._sidecar_handles.pop(scope_id, None)
        self._sidecar_sizes.pop(scope_id, None)
        if handle is not None:
            with contextlib.suppress(StorageIOError):
                self._fs.close(handle)
        if scope_id not in self._on_disk:
            return
        try:
            self._fs.unlink(layout.sidecar_path(self._main, scope_id))
        except StorageIOError as exc:
            if fs_code(exc) != "not_found":
                self.cleanup_failures.append((scope_id, exc))
                return
        self._on_disk.discard(scope_id)
        try:
            self._fs.fsync_dir(layout.scopes_dir(self._main))
        except StorageIOError as exc:
            self.cleanup_failures.append((scope_id, exc))

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Seal, drain admitted commits, then release file handles (LIFE-1, 000 §6.5).

        Closing never retires a scope: sidecars stay for the next open (JSONL-17).
        """
        super().close()
        handles = [self._main_handle, *self._sidecar_handles.values()]
        self._main_handle = None
        self._sidecar_handles.clear()
        for handle in handles:
            if handle is not None:
                with contextlib.suppress(StorageIOError):
                    self._fs.close(handle)


class JsonlRepository:
    """JSONL Sessions under one root directory (REPO-*, 000 §6.5)."""

    storage_class: type[JsonlStorage] = JsonlStorage

    def __init__(
        self,
        root: str,
        fs: FileSystem | None = None,
        clock: Clock = wall_clock_ms,
        cwd: str | None = None,
        legacy_ids: LegacyIds = uuid7_ids,
        layout: str | Layout = "flat",
    ) -> None:
        """``layout`` is ``"flat"`` (``<root>/<id>.jsonl``), ``"upstream"`` (the upstream
        TypeScript repository's ``<root>/--<cwd>--/<createdAt>_<id>.jsonl``, for the Sessions
        of ``cwd``) or any :class:`~scopecheck.impl.jsonl.layouts.Layout` (JSONL-26)."""
        self._fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._legacy_ids = legacy_ids
        self._root = root.rstrip("/") or "/"
        self._clock = clock
        self._cwd = os.getcwd() if cwd is None else cwd
        self._layout = self._choose_layout(layout)
        self._open: dict[str, JsonlStorage] = {}
        self._lock = threading.Lock()
        self._closed = False
        if not self._fs.is_dir(self._root):  # reopening an existing root creates nothing
            self._fs.create_dir(self._root, recursive=True)

    def _choose_layout(self, choice: str | Layout) -> Layout:
        if choice == "flat":
            return FlatLayout(self._root)
        if choice == "upstream":
            return UpstreamLayout(self._root, self._cwd)
        if isinstance(choice, str) or not all(
            callable(getattr(choice, name, None)) for name in ("find", "place", "session_ids")
        ):
            raise usage(
                "invalid_layout",
                f"layout must be 'flat', 'upstream' or a Layout (got {choice!r})",
            )
        return choice

    @classmethod
    def at_file(
        cls,
        path: str,
        fs: FileSystem | None = None,
        clock: Clock = wall_clock_ms,
        cwd: str | None = None,
        legacy_ids: LegacyIds = uuid7_ids,
    ) -> JsonlRepository:
        """A repository of the one session file at ``path``, whatever its name (an upstream
        ``<createdAt>_<id>.jsonl`` or a copy): its Session is the id in its header (JSONL-26).
        Its sidecars are ``<path>.scopes/`` as always."""
        fs = fs if fs is not None else OsFileSystem()
        if not fs.exists(path) or fs.is_dir(path):
            raise usage("not_found", f"no session file {path}")
        session_id = header_session_id(fs, path)
        directory = os.path.dirname(path) or "."
        return cls(directory, fs, clock, cwd, legacy_ids, FileLayout(path, session_id))

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def root(self) -> str:
        return self._root

    @property
    def fs(self) -> FileSystem:
        return self._fs

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("repository is closed")

    def path_of(self, session_id: str) -> str:
        """The main log of the existing Session ``session_id`` (``not_found`` if none)."""
        main = self._layout.find(self._fs, valid_id(session_id))
        if main is None:
            raise usage("not_found", f"no session {session_id!r}")
        return main

    def _exists(self, session_id: str) -> bool:
        return self._layout.find(self._fs, valid_id(session_id)) is not None

    def _placed(self, session_id: str, created_at: int) -> str:
        """Where the new Session goes, its directory made first (upstream's cwd directory may
        not exist yet) and made durable (JSONL-11)."""
        main = self._layout.place(session_id, created_at)
        directory = os.path.dirname(main)
        if not self._fs.is_dir(directory):
            self._fs.create_dir(directory, recursive=True)
            self._fs.fsync_dir(os.path.dirname(directory))
        return main

    def create(self, session_id: str) -> JsonlStorage:
        """Publish a header-only main log atomically.  A leftover ``.scopes`` directory (from a
        delete interrupted after the main file went) is removed first so its sidecars can never
        join the new Session (JSONL-15)."""
        with self._lock:
            self._check()
            fs = self._fs
            if self._exists(session_id):
                raise usage("already_exists", f"session {session_id!r} already exists (REPO-1)")
            created_at = self._clock()
            main = self._placed(session_id, created_at)
            fs.remove(layout.scopes_dir(main), recursive=True, force=True)
            header = encode_header(session_id, created_at, self._cwd)
            publish(fs, main, header + b"\n")
            state = MemoryState()
            storage = self.storage_class(
                fs,
                main,
                session_id,
                orjson.loads(header),
                state,
                self._clock,
                len(header) + 1,
                set(),
            )
            return self._track(session_id, storage)

    def open(self, session_id: str) -> JsonlStorage:
        with self._lock:
            self._check()
            main = self.path_of(session_id)
            if session_id in self._open:
                raise usage("already_open", f"session {session_id!r} is already open (REPO-4)")
            try:
                storage = self._load(main, session_id)
            except StorageIOError as exc:
                if fs_code(exc) == "not_found" and exc.details.get("path") == main:
                    raise usage("not_found", f"no session {session_id!r}") from None
                raise
            return self._track(session_id, storage)

    def _load_plan(self, main: str, session_id: str) -> SessionLoad:
        return load_session(self._fs, main, session_id, fold=True)

    def _load(self, main: str, session_id: str) -> JsonlStorage:
        """Open stages 1–9 (000 §6.3): plan read-only, fail on corruption before touching
        anything, then repair torn tails, replay, and remove dead sidecars.

        The cyclic garbage collector is paused while loading: replay allocates one object per
        record and none of them form cycles, and repeated full collections over a growing heap
        would make open time superlinear in file size.
        """
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._load_files(main, session_id)
        finally:
            if enabled:
                gc.enable()

    def _load_files(self, main: str, session_id: str) -> JsonlStorage:
        fs = self._fs
        load = self._load_plan(main, session_id)
        self._remove_main_temp(main)
        if load.main.header is None and load.main.lines and is_legacy_header(load.main.lines[0]):
            return self._open_legacy(main, session_id, load.main)
        load.raise_if_corrupt()
        assert load.main.header is not None
        header = load.main.header
        main_size = sum(map(len, load.main.lines)) + len(load.main.lines)
        # Stage 1 repair: republish the complete prefix (with nextSeq) before any write (JSONL-18).
        if load.main.torn is not None:
            header = dict(header)
            header["nextSeq"] = load.next_seq
            rewritten = [_dumps(header), *load.main.lines[1:]]
            data = join_lines(rewritten)
            publish(fs, main, data)
            main_size = len(data)
        # Stage 3 repair and stage 9: torn live sidecars republished, dead ones removed (JSONL-16).
        on_disk: set[str] = set()
        removed = False
        for scope_id, scan in load.sidecars.items():
            if scope_id in load.live:
                on_disk.add(scope_id)
                if scan.torn is not None:
                    publish(fs, scan.path, join_lines(scan.lines))
                continue
            try:
                fs.unlink(scan.path)
                removed = True
            except StorageIOError:
                # Retried on the next open; its contents stay bounded by the retirement.  A
                # later reuse appends to this file, so a torn tail must go first (JSONL-18).
                on_disk.add(scope_id)
                if scan.torn is not None:
                    publish(fs, scan.path, join_lines(scan.lines))
        for temp in load.temps:
            try:
                fs.unlink(temp)
                removed = True
            except StorageIOError:
                pass
        if removed:
            with contextlib.suppress(StorageIOError):
                fs.fsync_dir(layout.scopes_dir(main))
        state = replay(load)
        return self.storage_class(
            fs, main, session_id, header, state, self._clock, main_size, on_disk
        )

    def _remove_main_temp(self, main: str) -> None:
        """Remove ``<id>.jsonl.tmp`` left by a crash between a publish's temp write and its
        rename (the first-commit upgrade of a legacy file, LEGACY-9, or a torn-tail repair).

        The main file exists and is not open here, so no publish of it can be in flight: the
        temp is dead.  It never reaches a listing either way (``list()`` takes ``*.jsonl``
        only, JSONL-13); a failed removal is harmless and retried at the next open."""
        temp = layout.temp_path(main)
        fs = self._fs
        if not fs.exists(temp):
            return
        try:
            fs.unlink(temp)
            fs.fsync_dir(os.path.dirname(main))
        except StorageIOError:
            pass

    def _open_legacy(self, main: str, session_id: str, scan: FileScan) -> JsonlStorage:
        """A legacy v1/v2/v3 file opens read-only as its import (LEGACY-1..LEGACY-8); nothing
        on disk changes until the first non-empty commit (LEGACY-9)."""
        imported = import_legacy(
            main, scan.lines, session_id, self._legacy_ids, torn=scan.torn is not None
        )
        load = SessionLoad(session_id, scan, next_seq=imported.next_seq)
        load.retained = [
            (None, Tx(0, r["seq"], r["seq"], [record_op(r, None, r, -1)], [r]))
            for r in imported.records
        ]
        state = replay(load)
        storage = self.storage_class(
            self._fs, main, session_id, imported.header, state, self._clock, 0, set()
        )
        storage.legacy = imported
        return storage

    def _track(self, session_id: str, storage: JsonlStorage) -> JsonlStorage:
        storage.on_close.append(lambda _: self._open.pop(session_id, None))
        self._open[session_id] = storage
        return storage

    #: The fork driver class; planted bugs substitute a broken one (scopecheck/mutants/fork.py).
    fork_driver: type[ForkDriver] = ForkDriver

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """Fork from a fixed read-only prefix of the source (001 §1.3 JSONL, JSONL-20).

        The repository lock is held throughout, reserving the destination id; when the source
        is open here its length is captured at its commit-queue boundary (FORK-12) and later
        source commits proceed.  The source file is never written, torn tail or not (FORK-14).
        """
        options = check_fork_options(options)
        valid_id(source_id)
        dest_id = valid_id(options.id if options.id is not None else new_fork_id())
        with self._lock:
            self._check()
            fs = self._fs
            source = self.path_of(source_id)
            if dest_id in self._open or self._exists(dest_id):
                raise usage("already_exists", f"session {dest_id!r} already exists (REPO-1)")
            handle = self._open.get(source_id)
            with handle._queue if handle is not None else contextlib.nullcontext():
                if handle is not None and handle.legacy is not None:
                    raise legacy_not_upgraded(source_id)
                capture = self.capture(source)
            created_at = self._clock()
            dest = self._placed(dest_id, created_at)
            fs.remove(layout.scopes_dir(dest), recursive=True, force=True)

            def header(high_water: int) -> bytes:
                return encode_header(
                    dest_id,
                    created_at,
                    self._cwd,
                    parent_session_id=source_id,
                    next_seq=high_water,
                )

            fork_jsonl(fs, capture, source_id, options, dest, header, self.fork_driver)
        return dest_id

    def capture(self, source: str) -> SourcePrefix:
        """Record the fixed prefix (hook for tests that append after the boundary).

        A closed legacy file (its first line a legacy header) is normalised by the bounded
        disk-backed :class:`LegacyCapture`, never by the in-memory importer and never by
        writing the file (001 §1.3, LEGACY-13)."""
        fs = self._fs
        first = b""
        lines = fs.iter_prefix_lines(source, fs.file_size(source))
        try:
            for raw, _ in lines:
                first = raw
                break
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        if is_legacy_header(first):
            return LegacyCapture(fs, source, self._legacy_ids)
        return Capture(fs, source)

    def list(self) -> list[str]:
        """Session ids of the main logs the layout finds: in the flat layout regular ``*.jsonl``
        files with a canonical name.  ``.scopes`` directories, sidecars and temp files never
        appear (JSONL-13)."""
        self._check()
        return self._layout.session_ids(self._fs)

    def delete(self, session_id: str) -> None:
        """Remove the main file, then its ``.scopes`` directory recursively (000 §6.5)."""
        with self._lock:
            self._check()
            main = self.path_of(session_id)
            if session_id in self._open:
                raise usage("already_open", f"close session {session_id!r} before deleting it")
            fs = self._fs
            directory = os.path.dirname(main)
            try:
                fs.unlink(main)
            except StorageIOError as exc:
                if fs_code(exc) == "not_found":
                    raise usage("not_found", f"no session {session_id!r}") from None
                raise
            fs.fsync_dir(directory)
            fs.remove(layout.scopes_dir(main), recursive=True, force=True)
            fs.remove(layout.temp_path(main), force=True)  # a publish interrupted by a crash
            fs.fsync_dir(directory)

    def close(self) -> None:
        self._closed = True
        for storage in list(self._open.values()):
            storage.close()

    @property
    def closed(self) -> bool:
        return self._closed
