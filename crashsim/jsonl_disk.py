"""Trace and disk model of the JSONL crash simulator (REFERENCE §2, §7).

pyfakefs has no durability model (a write is "on disk" at once and fsync does nothing), so the
simulator keeps its own: :class:`RecordingFs` wraps the backend's
:class:`~scopecheck.impl.fs.FileSystem` and appends one :class:`Op` per mutating call (``write``,
``append``, ``truncate``, ``fsync``, ``fsync_file``, ``fsync_dir``, ``rename``, ``unlink``,
``create_dir``, ``remove``) with its arguments and bytes; :class:`Disk` replays such a trace and
tracks, next to what the process sees, what is *durable*:

* file data is durable up to the content at the last ``fsync``/``fsync_file`` of that inode;
* a directory entry (create, rename, unlink, mkdir, rmdir) is durable once its parent
  directory is fsynced; until then a crash may undo it.

What it does not model: reordering of data *within* one unsynced append beyond a prefix (a
torn write keeps a prefix, never a hole or garbage), metadata other than names (sizes come from
contents, no timestamps or modes), hard links, and other processes.  The session root directory
is taken as durable when the trace starts.
"""

from __future__ import annotations

import errno
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from scopecheck.impl.fs import AppendFile, DirEntry, FileSystem, Lines, fs_error


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

    def describe(self) -> str:
        extra = f" -> {self.target}" if self.target else ""
        if self.kind in ("write", "append"):
            extra = f" ({len(self.data)} bytes)"
        elif self.kind == "truncate":
            extra = f" to {self.size}"
        return f"{self.kind} {self.path}{extra}"


class RecordingFs:
    """A :class:`FileSystem` that records every mutating call as an :class:`Op`.

    ``step`` is set by the workload runner.  ``crash_at`` (an op index) makes that call raise
    :class:`SimulatedCrash` instead of running, after applying its first ``partial`` bytes if
    it is a write or append (the machine's crash rule).  ``fault(index, op)`` may return an
    ``OSError`` to fail that call without a crash (or ``(OSError, n)``: write ``n`` bytes of
    an append first); a failed call is not recorded, but the bytes a partial append wrote
    are (as an ``append`` of just those bytes), so replaying ``ops`` on a :class:`Disk` gives
    the files the process sees.
    """

    def __init__(
        self,
        inner: FileSystem,
        *,
        crash_at: int | None = None,
        partial: int = 0,
        fault: Callable[[int, Op], Any] | None = None,
    ) -> None:
        self.inner = inner
        self.ops: list[Op] = []
        self.step = 0
        self.crash_at = crash_at
        self.partial = partial
        self.fault = fault
        #: Mutating calls attempted so far (recorded or failed): the fault hook's index.
        self.calls = 0

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
                raise fs_error(op.kind, op.path, injected)
        self.ops.append(op)
        return None

    _handle: AppendFile | None = None

    def _append_partial(self, op: Op, count: int) -> None:
        assert self._handle is not None
        self.inner.append(self._handle, op.data[:count])

    # reads pass through
    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    def read_lines(self, path: str) -> Lines:
        return self.inner.read_lines(path)

    def iter_prefix_lines(self, path: str, size: int) -> Iterator[tuple[bytes, bool]]:
        return self.inner.iter_prefix_lines(path, size)

    def list_dir(self, path: str) -> list[DirEntry]:
        return self.inner.list_dir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def open_append(self, path: str) -> AppendFile:
        return self.inner.open_append(path)

    def close(self, handle: AppendFile) -> None:
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


Files = dict[str, bytes]


@attrs.frozen
class DiskState:
    """One materialisable filesystem image: regular files and directories (absolute paths)."""

    files: dict[str, bytes]
    dirs: frozenset[str]


class Disk:
    """Replays a trace; knows what the process sees and what survives power loss."""

    def __init__(self, files: Files, dirs: set[str] | frozenset[str]) -> None:
        self._inode = 0
        self.names: dict[str, int] = {}
        self.data: dict[int, bytes] = {}
        self.synced: dict[int, bytes] = {}
        for path, content in files.items():
            ino = self._new(content)
            self.synced[ino] = content
            self.names[path] = ino
        self.dirs: set[str] = set(dirs)
        #: Durable directory entries: file names and directories as of their parent's last fsync.
        self.dnames: dict[str, int] = dict(self.names)
        self.ddirs: set[str] = set(self.dirs)

    def _new(self, content: bytes) -> int:
        self._inode += 1
        self.data[self._inode] = content
        self.synced[self._inode] = b""
        return self._inode

    def apply(self, op: Op, partial: int | None = None) -> None:
        """Apply ``op`` (only its first ``partial`` bytes for a write/append)."""
        kind = op.kind
        if kind == "write":
            content = op.data if partial is None else op.data[:partial]
            ino = self.names.get(op.path)
            if ino is None:
                self.names[op.path] = self._new(content)
            else:
                self.data[ino] = content
        elif kind == "append":
            ino = self.names[op.path]
            self.data[ino] += op.data if partial is None else op.data[:partial]
        elif kind == "truncate":
            ino = self.names[op.path]
            self.data[ino] = self.data[ino][: op.size]
        elif kind in ("fsync", "fsync_file"):
            ino = self.names[op.path]
            self.synced[ino] = self.data[ino]
        elif kind == "fsync_dir":
            self._sync_dir(op.path.rstrip("/") or "/")
        elif kind == "rename":
            self.names[op.target] = self.names.pop(op.path)
        elif kind == "unlink":
            self.names.pop(op.path, None)
        elif kind == "create_dir":
            path = op.path.rstrip("/")
            while path and path != "/" and path not in self.dirs:
                self.dirs.add(path)
                path = posixpath.dirname(path)
        elif kind == "remove":
            prefix = op.path.rstrip("/") + "/"
            self.names.pop(op.path, None)
            for name in [n for n in self.names if n.startswith(prefix)]:
                del self.names[name]
            self.dirs.discard(op.path)
            self.dirs -= {d for d in self.dirs if d.startswith(prefix)}
        else:  # pragma: no cover - RecordingFs records nothing else
            raise ValueError(f"unknown op {kind}")

    def _sync_dir(self, directory: str) -> None:
        parent = posixpath.dirname
        for path in {*self.names, *self.dnames}:
            if parent(path) == directory:
                if path in self.names:
                    self.dnames[path] = self.names[path]
                else:
                    self.dnames.pop(path, None)
        for path in self.dirs | self.ddirs:
            if parent(path) == directory:
                if path in self.dirs:
                    self.ddirs.add(path)
                elif path in self.ddirs:
                    # Its removal is durable: everything that was durable inside goes with it
                    # (a directory created again later under the name is a new, empty one).
                    inside = path + "/"
                    self.ddirs = {d for d in self.ddirs if d != path and not d.startswith(inside)}
                    self.dnames = {n: i for n, i in self.dnames.items() if not n.startswith(inside)}

    # -- images ------------------------------------------------------------------------------

    def visible(self) -> DiskState:
        """What the process sees now (a process crash keeps exactly this)."""
        return DiskState({p: self.data[i] for p, i in self.names.items()}, frozenset(self.dirs))

    def has_unsynced(self) -> bool:
        if self.names != self.dnames or self.dirs != self.ddirs:
            return True
        return any(self.data[i] != self.synced[i] for i in self.names.values())

    def strict(self) -> DiskState:
        """Power loss, strict: every unsynced byte and undurable directory entry is gone."""
        dirs = {d for d in self.ddirs if _reachable(d, self.ddirs)}
        files = {p: self.synced[i] for p, i in self.dnames.items() if posixpath.dirname(p) in dirs}
        return DiskState(files, frozenset(dirs))

    def torn_variants(self, samples: int, rng: Any) -> Iterator[tuple[str, DiskState]]:
        """Power loss, plain prefix: directory operations persist in order, and the data of
        each file since its last fsync is cut back to the synced content plus a prefix of the
        rest (every line boundary, plus ``samples`` random offsets).  ``lost`` drops all of
        it at once."""
        visible = self.visible()
        pending = {
            p: (self.synced[i], self.data[i])
            for p, i in self.names.items()
            if self.data[i] != self.synced[i]
        }
        if not pending:
            return
        base = dict(visible.files)
        lost = dict(base)
        for path, (synced, _) in pending.items():
            lost[path] = synced
        yield "lost", DiskState(lost, visible.dirs)
        for path, (synced, current) in sorted(pending.items()):
            if not current.startswith(synced):
                continue  # rewritten in place: only "lost" or "kept" (the visible state)
            extra = current[len(synced) :]
            cuts = {i + 1 for i, b in enumerate(extra) if b == 0x0A}
            cuts |= {rng.randrange(1, len(extra)) for _ in range(samples) if len(extra) > 1}
            cuts.discard(len(extra))
            for cut in sorted(cuts):
                files = dict(lost)
                files[path] = synced + extra[:cut]
                yield f"torn:{path}:{cut}", DiskState(files, visible.dirs)


def _reachable(directory: str, dirs: set[str]) -> bool:
    """A durable directory counts only if its parents are durable too (or are the root)."""
    parent = posixpath.dirname(directory)
    while parent and parent != "/":
        if parent not in dirs:
            return False
        parent = posixpath.dirname(parent)
    return True
