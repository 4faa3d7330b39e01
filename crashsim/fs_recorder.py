"""The recorder of the ``FileSystem`` path (REFERENCE §2, §7).

pyfakefs has no durability model (a write is "on disk" at once and fsync does nothing), so the
simulator records what the backend did: :class:`RecordingFs` wraps the backend's
:class:`~scopecheck.impl.fs.FileSystem` and appends one :class:`Op` per mutating call (``write``,
``append``, ``truncate``, ``fsync``, ``fsync_file``, ``fsync_dir``, ``rename``, ``unlink``,
``create_dir``, ``remove``) with its arguments and bytes.  What a crash leaves of such a trace is
not decided here: :mod:`scopecheck.crashsim.fs_source` turns it into the persistence model's
operations, and :mod:`scopecheck.crashsim.persistence` -- the one model every recorder is judged
by (CRASH-SYS-1) -- builds the process-crash and power-loss images.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable
from typing import Any

import attrs

from scopecheck.impl.fs import AppendFile, FileSystem, ForwardingFileSystem, fs_error
from scopecheck.models.errors import StorageIOError

#: The calls that make data or directory entries durable.
FSYNCS = frozenset({"fsync", "fsync_file", "fsync_dir"})


class SimulatedCrash(BaseException):
    """The process dies here: a BaseException, so no ``except Exception`` can swallow it."""


@attrs.frozen
class Op:
    """One mutating call: ``kind``, its path(s), bytes or size, and the workload step it ran in."""

    kind: str
    path: str
    data: bytes = b""
    target: str = ""
    size: int = 0
    recursive: bool = False
    step: int = 0
    #: An fsync that failed (an injected EIO): it made nothing durable, and the writes it was
    #: to make durable never will be unless written again (CRASH-FS-9, CRASH-SYS-11).
    failed: bool = False

    def describe(self) -> str:
        extra = f" -> {self.target}" if self.target else ""
        if self.kind in ("write", "append"):
            extra = f" ({len(self.data)} bytes)"
        elif self.kind == "truncate":
            extra = f" to {self.size}"
        elif self.failed:
            extra = " (failed)"
        return f"{self.kind} {self.path}{extra}"


class RecordingFs(ForwardingFileSystem):
    """A :class:`FileSystem` that records every mutating call as an :class:`Op`.

    ``step`` is set by the workload runner.  ``crash_at`` (an op index) makes that call raise
    :class:`SimulatedCrash` instead of running, after applying its first ``partial`` bytes if
    it is a write or append (the machine's crash rule).  ``fault(index, op)`` may return an
    ``OSError`` to fail that call without a crash (or ``(OSError, n)``: write ``n`` bytes of
    an append first); a failed call is not recorded, but the bytes a partial append wrote
    are (as an ``append`` of just those bytes), and so is a failed fsync (``failed``: it
    changed what a power loss keeps), so the converted ``ops`` give the files the process
    sees and what is durable.
    """

    def __init__(
        self,
        inner: FileSystem,
        *,
        crash_at: int | None = None,
        partial: int = 0,
        fault: Callable[[int, Op], Any] | None = None,
    ) -> None:
        super().__init__(inner)
        self.ops: list[Op] = []
        self.step = 0
        self.crash_at = crash_at
        self.partial = partial
        self.fault = fault
        #: Mutating calls attempted so far (recorded or failed): the fault hook's index.
        self.calls = 0
        #: Handles opened through this recorder and not closed through it, by ``id``.
        self._open: dict[int, AppendFile] = {}

    def _before(self, op: Op) -> int | None:
        """Crash or fail here if asked; returns the byte count of a partial append fault."""
        index = self.calls
        self.calls += 1
        if self.crash_at is not None and len(self.ops) == self.crash_at:
            if self.partial and op.kind in ("write", "append"):
                if op.kind == "write":
                    self.inner.write_file(op.path, op.data[: self.partial])
                else:
                    self._append_partial(op, self.partial)
            raise SimulatedCrash(f"crash before op {self.crash_at}: {op.describe()}")
        if self.fault is not None:
            injected = self.fault(index, op)
            if isinstance(injected, tuple):
                return int(injected[1])
            if injected is not None:
                if op.kind in FSYNCS:
                    self.ops.append(attrs.evolve(op, failed=True))
                raise fs_error(op.kind, op.path, injected)
        self.ops.append(op)
        return None

    _handle: AppendFile | None = None

    def _append_partial(self, op: Op, count: int) -> None:
        assert self._handle is not None
        self.inner.append(self._handle, op.data[:count])

    # reads pass through (ForwardingFileSystem)

    def open_append(self, path: str) -> AppendFile:
        handle = self.inner.open_append(path)
        self._open[id(handle)] = handle
        return handle

    def close(self, handle: AppendFile) -> None:
        self._open.pop(id(handle), None)
        self.inner.close(handle)

    def release(self) -> None:
        """Close every handle opened through this recorder and still open, as the kernel does
        when the process holding them dies (after a :class:`SimulatedCrash`).  Closing writes
        nothing: every append already reached the file, so the files are what the crash left;
        a descriptor left open would outlive its process on the reused sandbox.  A close that
        fails is left as it is (there is no process left to tell)."""
        handles, self._open = list(self._open.values()), {}
        for handle in handles:
            with contextlib.suppress(StorageIOError):
                self.inner.close(handle)

    # mutating calls: recorded *before* they run (a crash at index k means op k never ran)
    def write_file(self, path: str, data: bytes) -> None:
        self._before(Op("write", path, data, step=self.step))
        self.inner.write_file(path, data)

    def append(self, handle: AppendFile, data: bytes) -> None:
        self._handle = handle
        op = Op("append", handle.path, data, step=self.step)
        partial = self._before(op)
        if partial is not None:
            self.ops.append(Op("append", handle.path, data[:partial], step=self.step))
            self.inner.append(handle, data[:partial])
            raise fs_error(
                "append", handle.path, OSError(errno.ENOSPC, "injected: disk full"), written=partial
            )
        self.inner.append(handle, data)

    def truncate(self, handle: AppendFile, size: int) -> None:
        self._before(Op("truncate", handle.path, size=size, step=self.step))
        self.inner.truncate(handle, size)

    def fsync(self, handle: AppendFile) -> None:
        self._before(Op("fsync", handle.path, step=self.step))
        self.inner.fsync(handle)

    def fsync_file(self, path: str) -> None:
        self._before(Op("fsync_file", path, step=self.step))
        self.inner.fsync_file(path)

    def fsync_dir(self, path: str) -> None:
        self._before(Op("fsync_dir", path, step=self.step))
        self.inner.fsync_dir(path)

    def rename(self, source: str, target: str) -> None:
        self._before(Op("rename", source, target=target, step=self.step))
        self.inner.rename(source, target)

    def unlink(self, path: str) -> None:
        self._before(Op("unlink", path, step=self.step))
        self.inner.unlink(path)

    def create_dir(self, path: str, recursive: bool = True) -> None:
        self._before(Op("create_dir", path, recursive=recursive, step=self.step))
        self.inner.create_dir(path, recursive)

    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        # A missing path with force is a no-op and changes nothing: not a crash point.
        if force and not self.inner.exists(path):
            return
        self._before(Op("remove", path, recursive=recursive, step=self.step))
        self.inner.remove(path, recursive, force)
