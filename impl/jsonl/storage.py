"""The JSONL backend: a format-4 main log plus one sidecar file per live ephemeral scope.

An open JSONL Session is a resident Session (the seeds' JSONL storage also projects into the
shared in-memory state) whose journal, :class:`~scopecheck.impl.jsonl.journal.JsonlJournal`,
makes every acknowledged commit one fsynced line in exactly one file (JSONL-3, JSONL-10).  The
repository here creates, lists, deletes and forks Sessions, and opens them by replaying the
files through the nine stages of 000 §6.3 with the high-water mark taken before anything is
ignored (JSONL-7, JSONL-8).  All I/O goes through :mod:`scopecheck.impl.fs`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

import orjson

from scopecheck.impl.fs import FileSystem, OsFileSystem, fs_code, join_lines
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import encode_header, record_op
from scopecheck.impl.jsonl.fork import Capture, SourcePrefix, fork_jsonl
from scopecheck.impl.jsonl.journal import JsonlJournal, publish
from scopecheck.impl.jsonl.legacy import (
    LegacyIds,
    LegacyImport,
    import_legacy,
    is_legacy_header,
    uuid7_ids,
)
from scopecheck.impl.jsonl.legacy_fork import LegacyCapture
from scopecheck.impl.jsonl.load import FileScan, SessionLoad, Tx, load_session
from scopecheck.impl.jsonl.replay import replay
from scopecheck.impl.jsonl.root_layouts import (
    FileLayout,
    FlatLayout,
    Layout,
    UpstreamLayout,
    header_session_id,
)
from scopecheck.impl.memory import new_fork_id, wall_clock_ms
from scopecheck.impl.resident import RETIRE_EXACT_SCOPE, ResidentState, Retirement
from scopecheck.impl.resident_session import ResidentSession
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, SequencePolicy
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import ClosedError, StorageIOError, UsageError, usage
from scopecheck.models.fork import ForkOptions, check_fork_options
from scopecheck.models.fork_policy import ForkDriver
from scopecheck.models.protocols import Clock

__all__ = ["JsonlRepository", "JsonlStorage", "legacy_not_upgraded", "publish", "valid_id"]

_dumps = orjson.dumps


def valid_id(session_id: str) -> str:
    """A session id that can name a main log in every layout (REPO-5, JSONL-14)."""
    session_paths.encode_session_id(check_session_id(session_id))
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


class JsonlStorage(ResidentSession):
    """One open JSONL Session: a resident Session with a :class:`JsonlJournal`.  Build
    through :class:`JsonlRepository`."""

    def __init__(
        self,
        session_id: str,
        state: ResidentState,
        clock: Clock,
        journal: JsonlJournal,
        *,
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = RETIRE_EXACT_SCOPE,
    ) -> None:
        super().__init__(
            session_id, state, clock, sequence=sequence, retirement=retirement, journal=journal
        )
        self._files = journal

    @property
    def path(self) -> str:
        """The main log."""
        return self._files.path

    @property
    def parent_session_id(self) -> str | None:
        """``parentSessionId`` of the header (FORK-11), else ``None``."""
        parent = self._files.header.get("parentSessionId")
        return parent if isinstance(parent, str) else None

    @property
    def legacy(self) -> LegacyImport | None:
        """The imported legacy file this handle opened, until its first non-empty commit
        rewrites it as format 4 (LEGACY-9); ``None`` for a format-4 Session."""
        return self._files.legacy

    @property
    def cleanup_failures(self) -> list[tuple[str, StorageIOError]]:
        """Retired sidecars this handle could not unlink, with the error (JSONL-9)."""
        return self._files.cleanup_failures


class JsonlRepository:
    """JSONL Sessions under one root directory (REPO-*, 000 §6.5)."""

    def __init__(
        self,
        root: str,
        fs: FileSystem | None = None,
        clock: Clock = wall_clock_ms,
        cwd: str | None = None,
        legacy_ids: LegacyIds = uuid7_ids,
        layout: str | Layout = "flat",
        *,
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = RETIRE_EXACT_SCOPE,
        fork_driver: type[ForkDriver] = ForkDriver,
    ) -> None:
        """``layout`` is ``"flat"`` (``<root>/<id>.jsonl``), ``"upstream"`` (the upstream
        TypeScript repository's ``<root>/--<cwd>--/<createdAt>_<id>.jsonl``, for the Sessions
        of ``cwd``) or any :class:`~scopecheck.impl.jsonl.root_layouts.Layout` (JSONL-26).
        ``sequence``, ``retirement`` and ``fork_driver`` are the contract's policies (SEQ-1,
        RETIRE-2, FORK-7), the same objects every resident backend uses."""
        self._fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._sequence = sequence
        self._retirement = retirement
        self._fork_driver = fork_driver
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
            fs.remove(session_paths.scopes_dir(main), recursive=True, force=True)
            header = encode_header(session_id, created_at, self._cwd)
            publish(fs, main, header + b"\n")
            journal = JsonlJournal(
                fs, main, session_id, orjson.loads(header), len(header) + 1, set()
            )
            return self._track(self._session(session_id, ResidentState(), journal))

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
            return self._track(storage)

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
                fs.fsync_dir(session_paths.scopes_dir(main))
        journal = JsonlJournal(fs, main, session_id, header, main_size, on_disk)
        return self._session(session_id, replay(load), journal)

    def _remove_main_temp(self, main: str) -> None:
        """Remove ``<id>.jsonl.tmp`` left by a crash between a publish's temp write and its
        rename (the first-commit upgrade of a legacy file, LEGACY-9, or a torn-tail repair).

        The main file exists and is not open here, so no publish of it can be in flight: the
        temp is dead.  It never reaches a listing either way (``list()`` takes ``*.jsonl``
        only, JSONL-13); a failed removal is harmless and retried at the next open."""
        temp = session_paths.temp_path(main)
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
        journal = JsonlJournal(
            self._fs, main, session_id, imported.header, 0, set(), legacy=imported
        )
        return self._session(session_id, replay(load), journal)

    def _session(
        self, session_id: str, state: ResidentState, journal: JsonlJournal
    ) -> JsonlStorage:
        return JsonlStorage(
            session_id,
            state,
            self._clock,
            journal,
            sequence=self._sequence,
            retirement=self._retirement,
        )

    def _track(self, storage: JsonlStorage) -> JsonlStorage:
        session_id = storage.session_id
        storage.on_close.append(lambda _: self._open.pop(session_id, None))
        self._open[session_id] = storage
        return storage

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
            boundary = (
                handle.at_commit_boundary() if handle is not None else contextlib.nullcontext()
            )
            with boundary:
                if handle is not None and handle.legacy is not None:
                    raise legacy_not_upgraded(source_id)
                capture = self.capture(source)
            created_at = self._clock()
            dest = self._placed(dest_id, created_at)
            fs.remove(session_paths.scopes_dir(dest), recursive=True, force=True)

            def header(high_water: int) -> bytes:
                return encode_header(
                    dest_id,
                    created_at,
                    self._cwd,
                    parent_session_id=source_id,
                    next_seq=high_water,
                )

            fork_jsonl(fs, capture, source_id, options, dest, header, self._fork_driver)
        return dest_id

    def capture(self, source: str) -> SourcePrefix:
        """The fixed prefix of ``source`` a fork reads: its length now (FORK-12, JSONL-20).

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
            fs.remove(session_paths.scopes_dir(main), recursive=True, force=True)
            fs.remove(session_paths.temp_path(main), force=True)  # a publish interrupted by a crash
            fs.fsync_dir(directory)

    def close(self) -> None:
        self._closed = True
        for storage in list(self._open.values()):
            storage.close()

    @property
    def closed(self) -> bool:
        return self._closed
