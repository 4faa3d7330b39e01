"""A :class:`~scopecheck.impl.fs.FileSystem` wrapper that records every operation and injects
faults.

Why it exists: a test has to see which calls a backend made (the durability policy, JSONL-10..12),
fail one of them (a failed append, an unlink that is refused) or stop the backend at one (a
simulated crash); the JSONL world variant whose unlinks fail (``jsonl-unlink-fails``,
:mod:`scopecheck.backends.registry`) runs the backend through it with a fault hook and no trace; and
``scopecheck bench legacy`` counts the mutating calls of an upgrade with it.  It is test tooling,
not a backend, so it lives beside the crash simulator and not in ``impl/``, which knows nothing
of it (ARCH-1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scopecheck.impl.fs import (
    AppendFile,
    DirEntry,
    FileSystem,
    ForwardingFileSystem,
    Lines,
    fs_error,
)

#: Names of the FileSystem operations that change the disk (as recorded by TracingFileSystem).
#: ``open_append`` counts: opening for append creates the file.
MUTATING_OPS = frozenset(
    {
        "write",
        "append",
        "truncate",
        "rename",
        "unlink",
        "create_dir",
        "remove",
        "fsync",
        "fsync_file",
        "fsync_dir",
        "open_append",
    }
)

#: ``fault(op, path)`` returns an ``OSError`` to inject before ``op`` runs, or ``None``.  For
#: ``append`` it may instead return ``(OSError, n)``: write the first ``n`` bytes, then fail.
FaultHook = Any


class TracingFileSystem(ForwardingFileSystem):
    """A :class:`FileSystem` wrapper that records every operation and can inject faults.

    Used by tests (durability policy, failed appends, unlink failures), by the JSONL world
    variant whose unlinks fail and by the legacy benchmark.  ``trace`` holds ``(op, path)`` in
    call order; only operations that completed are traced, failed ones are traced as
    ``("!" + op, path)``.
    """

    def __init__(self, inner: FileSystem, fault: FaultHook = None, *, record: bool = True) -> None:
        super().__init__(inner)
        self.fault = fault
        self.record = record
        self.trace: list[tuple[str, str]] = []

    def _maybe_fail(self, op: str, path: str) -> Any:
        if self.fault is None:
            return None
        injected = self.fault(op, path)
        if injected is None:
            return None
        if isinstance(injected, tuple):
            return injected
        if self.record:
            self.trace.append(("!" + op, path))
        raise fs_error(op, path, injected)

    def _done(self, op: str, path: str) -> None:
        if self.record:
            self.trace.append((op, path))

    def read_bytes(self, path: str) -> bytes:
        self._maybe_fail("read", path)
        return self.inner.read_bytes(path)

    def read_lines(self, path: str) -> Lines:
        self._maybe_fail("read", path)
        return self.inner.read_lines(path)

    def iter_prefix_lines(self, path: str, size: int) -> Iterator[tuple[bytes, bool]]:
        self._maybe_fail("read", path)
        self._done("read_prefix", path)
        return self.inner.iter_prefix_lines(path, size)

    def write_file(self, path: str, data: bytes) -> None:
        self._maybe_fail("write", path)
        self.inner.write_file(path, data)
        self._done("write", path)

    def open_append(self, path: str) -> AppendFile:
        self._maybe_fail("open_append", path)
        handle = self.inner.open_append(path)
        self._done("open_append", path)
        return handle

    def append(self, handle: AppendFile, data: bytes) -> None:
        partial = self._maybe_fail("append", handle.path)
        if partial is not None:
            error, count = partial
            self.inner.append(handle, data[:count])
            if self.record:
                self.trace.append(("!append", handle.path))
            raise fs_error("append", handle.path, error, written=count)
        self.inner.append(handle, data)
        self._done("append", handle.path)

    def fsync(self, handle: AppendFile) -> None:
        self._maybe_fail("fsync", handle.path)
        self.inner.fsync(handle)
        self._done("fsync", handle.path)

    def truncate(self, handle: AppendFile, size: int) -> None:
        self._maybe_fail("truncate", handle.path)
        self.inner.truncate(handle, size)
        self._done("truncate", handle.path)

    def close(self, handle: AppendFile) -> None:
        self.inner.close(handle)
        self._done("close", handle.path)

    def fsync_file(self, path: str) -> None:
        self._maybe_fail("fsync_file", path)
        self.inner.fsync_file(path)
        self._done("fsync_file", path)

    def fsync_dir(self, path: str) -> None:
        self._maybe_fail("fsync_dir", path)
        self.inner.fsync_dir(path)
        self._done("fsync_dir", path)

    def rename(self, source: str, target: str) -> None:
        self._maybe_fail("rename", source)
        self.inner.rename(source, target)
        self._done("rename", target)

    def unlink(self, path: str) -> None:
        self._maybe_fail("unlink", path)
        self.inner.unlink(path)
        self._done("unlink", path)

    def list_dir(self, path: str) -> list[DirEntry]:
        self._maybe_fail("list_dir", path)
        return self.inner.list_dir(path)

    def create_dir(self, path: str, recursive: bool = True) -> None:
        self._maybe_fail("create_dir", path)
        self.inner.create_dir(path, recursive)
        self._done("create_dir", path)

    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        self._maybe_fail("remove", path)
        self.inner.remove(path, recursive, force)
        self._done("remove", path)
