"""The durable half of an open JSONL Session: the main log and one sidecar per live scope.

A JSONL Session is a resident Session (``scopecheck.impl.resident_session``) whose
:class:`~scopecheck.impl.resident_session.Journal` is a :class:`JsonlJournal`: every acknowledged
commit is one fsynced line in exactly one file (JSONL-3, JSONL-10) -- a session-scope
transaction in the main log, an ephemeral one in its scope's sidecar -- and retirement cleanup
runs on the commit queue after the main transaction is durable (JSONL-8, JSONL-9).  All I/O goes
through :mod:`scopecheck.impl.fs`, the seam the crash simulator records and faults.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import orjson

from scopecheck.impl.fs import AppendFile, FileSystem, fs_code
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import encode_scope_header, encode_transaction
from scopecheck.impl.jsonl.legacy import LegacyImport
from scopecheck.impl.jsonl.legacy import upgrade_bytes as legacy_upgrade_bytes
from scopecheck.models.errors import StorageIOError
from scopecheck.models.records import Committed
from scopecheck.models.writes import RetireScope


def publish(fs: FileSystem, path: str, data: bytes) -> None:
    """Atomic publish (REFERENCE §1, JSONL-11): write ``<path>.tmp``, fsync it, rename it over
    ``path``, fsync the directory; the temp file is removed if any step fails."""
    temp = session_paths.temp_path(path)
    try:
        fs.write_file(temp, data)
        fs.fsync_file(temp)
        fs.rename(temp, path)
    except BaseException:
        with contextlib.suppress(StorageIOError):
            fs.remove(temp, force=True)
        raise
    fs.fsync_dir(os.path.dirname(path))


class JsonlJournal:
    """Open file handles, sizes and sidecar bookkeeping of one open JSONL Session."""

    def __init__(
        self,
        fs: FileSystem,
        main: str,
        session_id: str,
        header: dict[str, Any],
        main_size: int,
        sidecars_on_disk: set[str],
        legacy: LegacyImport | None = None,
    ) -> None:
        self._fs = fs
        self._main = main
        self._session_id = session_id
        self.header = header
        self._main_handle: AppendFile | None = None
        self._main_size = main_size
        self._sidecar_handles: dict[str, AppendFile] = {}
        self._sidecar_sizes: dict[str, int] = {}
        #: Scope IDs whose sidecar file exists on disk (live, or retired but not yet unlinked).
        self._on_disk = set(sidecars_on_disk)
        self._unusable: str | None = None
        #: Retired sidecars this handle could not unlink: (scope ID, error).  The commit does
        #: not fail and reopen retries the unlink (JSONL-9); ``JsonlStorage.cleanup_failures``
        #: tells the caller.
        self.cleanup_failures: list[tuple[str, StorageIOError]] = []
        #: An imported legacy file not yet rewritten as format 4 (LEGACY-9).
        self.legacy = legacy

    @property
    def path(self) -> str:
        return self._main

    # -- the Journal protocol --------------------------------------------------------------

    def check_writable(self) -> None:
        if self._unusable is not None:
            raise StorageIOError(
                "unusable",
                f"this handle stopped accepting writes after a failed append "
                f"({self._unusable}); close it and reopen the Session (JSONL-12)",
            )

    def before_first_write(self) -> None:
        if self.legacy is not None:
            self._upgrade_legacy(self.legacy)

    def persist(
        self, scope_id: str | None, committed: tuple[Committed, ...], apply: Callable[[], None]
    ) -> None:
        """One line in one file, durable before ``apply`` (JSONL-3, JSONL-10); a session-scope
        line's retirements then unlink their sidecars, still on the queue (JSONL-9)."""
        line = encode_transaction(committed)
        if scope_id is not None:
            self._append_sidecar(scope_id, line)
            apply()
            return
        self._append_main(line)
        apply()
        retired = [
            item.write.retired.id for item in committed if isinstance(item.write, RetireScope)
        ]
        for retired_id in dict.fromkeys(retired):
            self._cleanup_retired(retired_id)

    def close(self) -> None:
        handles = [self._main_handle, *self._sidecar_handles.values()]
        self._main_handle = None
        self._sidecar_handles.clear()
        for handle in handles:
            if handle is not None:
                with contextlib.suppress(StorageIOError):
                    self._fs.close(handle)

    # -- files -----------------------------------------------------------------------------

    def _upgrade_legacy(self, imported: LegacyImport) -> None:
        """Rewrite the legacy file as format 4 under the commit queue, before the caller's
        transaction is appended anywhere (LEGACY-9, 000 §6.4).  A failure leaves the legacy file
        and this handle as they were; the caller's commit fails and may be retried."""
        data = legacy_upgrade_bytes(imported)
        # A stray .scopes directory could otherwise join the new format-4 Session.
        self._fs.remove(session_paths.scopes_dir(self._main), recursive=True, force=True)
        publish(self._fs, self._main, data)
        self.header = orjson.loads(data[: data.index(b"\n")])
        self._main_size = len(data)
        self._on_disk.clear()
        self.legacy = None

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
        path = session_paths.sidecar_path(self._main, scope_id)
        if scope_id not in self._on_disk:
            directory = session_paths.scopes_dir(self._main)
            if not fs.is_dir(directory):
                fs.create_dir(directory, recursive=True)
                fs.fsync_dir(os.path.dirname(directory))
            header = encode_scope_header(self._session_id, scope_id) + b"\n"
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
            self._fs.unlink(session_paths.sidecar_path(self._main, scope_id))
        except StorageIOError as exc:
            if fs_code(exc) != "not_found":
                self.cleanup_failures.append((scope_id, exc))
                return
        self._on_disk.discard(scope_id)
        try:
            self._fs.fsync_dir(session_paths.scopes_dir(self._main))
        except StorageIOError as exc:
            self.cleanup_failures.append((scope_id, exc))
