"""The ``FileSystem`` path's trace as the persistence model's operations (CRASH-SYS-1).

:class:`~scopecheck.crashsim.fs_recorder.RecordingFs` records one
:class:`~scopecheck.crashsim.fs_recorder.Op` per mutating ``FileSystem`` call.  Each is turned
here into the :class:`~scopecheck.crashsim.persistence.FileOp` s the system calls of
:class:`~scopecheck.impl.fs.OsFileSystem` make for it, so a trace recorded in process and a
trace read from strace are judged by one model -- :class:`~scopecheck.crashsim.persistence.Volume`
-- and give the same crash images (a test runs the same calls both ways):

* ``write`` (``write_file``): ``open(O_CREAT|O_TRUNC)``, one ``write`` at offset 0 (none for
  empty data), ``close``;
* ``append`` through a handle: a ``write`` at the end of the file (``O_APPEND``);
* ``truncate``: ``ftruncate`` of the handle's file;
* ``fsync``, ``fsync_file``: the file opened and synced; ``fsync_dir``: the directory opened and
  synced; a failed one (``Op.failed``, an injected EIO) is a ``syncfail``: its writes are lost
  at power loss even if a later fsync succeeds (CRASH-SYS-11, CRASH-FS-9);
* ``rename``, ``unlink``: themselves;
* ``create_dir``: a ``mkdir`` of each missing level, outermost first (``os.makedirs``);
* ``remove``: ``unlink`` of a file; ``rmdir`` of a directory, after removing what it holds
  when recursive (entries in name order, files before subdirectories' contents).

Paths become relative to the root, which exists and is durable when the trace starts; a
``create_dir`` or ``fsync_dir`` of the root or one of its parents changes nothing.  Each
``FileOp`` keeps the index of the recorded call it came from (``call``) and its workload step.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence

import attrs

from scopecheck.crashsim.fs_recorder import Op
from scopecheck.crashsim.persistence import FileOp, Image


class OutsideRoot(ValueError):
    """A recorded call names a path outside the root: no crash image can hold it."""


def relative(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (``""`` for the root itself); ``None`` for the root's
    parents; :class:`OutsideRoot` for anything else."""
    path = posixpath.normpath(path)
    if path == root:
        return ""
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    if root.startswith(path.rstrip("/") + "/"):
        return None
    raise OutsideRoot(f"{path} is outside the root {root}")


class FsSource:
    """Converts recorded calls one by one, keeping the names that exist (a recursive
    ``create_dir`` or ``remove`` depends on them).  ``start``: the files and directories under
    the root when the trace starts."""

    def __init__(self, root: str, start: Image | None = None) -> None:
        self.root = root.rstrip("/") or "/"
        self.files: set[str] = set(start.files) if start is not None else set()
        self.dirs: set[str] = set(start.dirs) if start is not None else {""}
        self._handle = 0

    def _new_handle(self) -> int:
        self._handle += 1
        return self._handle

    def convert(self, op: Op, call: int = -1) -> list[FileOp]:
        """The persistence operations of the recorded call ``op`` (``call``: its index)."""
        return [attrs.evolve(made, call=call, step=op.step) for made in self._ops(op)]

    def _on_handle(
        self, path: str, *middle: FileOp, flags: frozenset[str] = frozenset()
    ) -> list[FileOp]:
        """``middle`` through a descriptor opened on ``path`` for it, then closed."""
        handle = self._new_handle()
        return [
            FileOp("open", path, handle=handle, flags=flags),
            *(attrs.evolve(o, path=path, handle=handle) for o in middle),
            FileOp("close", path, handle=handle),
        ]

    def _ops(self, op: Op) -> list[FileOp]:
        kind = op.kind
        path = relative(op.path, self.root)
        if kind in ("create_dir", "fsync_dir") and path is None:
            return []  # the root and its parents exist and are durable
        if path is None:
            raise OutsideRoot(f"{op.describe()}: not a file under the root {self.root}")
        if kind == "write":
            self.files.add(path)
            writes = (FileOp("write", offset=0, data=op.data),) if op.data else ()
            return self._on_handle(path, *writes, flags=frozenset({"create", "trunc"}))
        if kind == "append":
            return self._on_handle(path, FileOp("write", data=op.data))
        if kind == "truncate":
            return self._on_handle(path, FileOp("truncate", size=op.size))
        if kind in ("fsync", "fsync_file", "fsync_dir"):
            sync = FileOp("syncfail" if op.failed else "sync")
            flags = frozenset({"directory"}) if kind == "fsync_dir" else frozenset()
            return self._on_handle(path, sync, flags=flags)
        if kind == "rename":
            return self._rename(path, op)
        if kind == "unlink":
            self.files.discard(path)
            return [FileOp("unlink", path)]
        if kind == "create_dir":
            return self._mkdirs(path, op.recursive)
        if kind == "remove":
            return self._remove(path, op.recursive)
        raise ValueError(f"unknown recorded call {kind!r}")

    def _rename(self, path: str, op: Op) -> list[FileOp]:
        target = relative(op.target, self.root)
        if target is None:
            raise OutsideRoot(f"{op.describe()}: not a file under the root {self.root}")
        if path in self.dirs:
            inside = path + "/"
            self.dirs = {
                target + d[len(path) :] if d == path or d.startswith(inside) else d
                for d in self.dirs
            }
            self.files = {
                target + f[len(path) :] if f.startswith(inside) else f for f in self.files
            }
        elif path in self.files:
            self.files.discard(path)
            self.files.add(target)
        return [FileOp("rename", path, target)]

    def _mkdirs(self, path: str, recursive: bool) -> list[FileOp]:
        if not recursive:
            self.dirs.add(path)
            return [FileOp("mkdir", path)]
        missing: list[str] = []
        here = path
        while here and here not in self.dirs:
            missing.append(here)
            here = posixpath.dirname(here)
        self.dirs.update(missing)
        return [FileOp("mkdir", name) for name in reversed(missing)]

    def _remove(self, path: str, recursive: bool) -> list[FileOp]:
        if path in self.files:
            self.files.discard(path)
            return [FileOp("unlink", path)]
        if path not in self.dirs:
            return []  # missing: removing it changes nothing
        found: list[FileOp] = []
        if recursive:
            prefix = path + "/"
            names = sorted(
                {n[len(prefix) :].split("/", 1)[0] for n in (*self.files, *self.dirs)
                 if n.startswith(prefix)}
            )  # fmt: skip
            for name in names:
                found += self._remove(prefix + name, True)
        self.dirs.discard(path)
        return [*found, FileOp("rmdir", path)]


def file_ops(ops: Iterable[Op], root: str, start: Image | None = None) -> tuple[FileOp, ...]:
    """Every recorded call of ``ops`` as persistence operations, ``call`` being its index."""
    source = FsSource(root, start)
    return tuple(file_op for call, op in enumerate(ops) for file_op in source.convert(op, call))


def acknowledged_at(ops: Sequence[FileOp], steps: int) -> tuple[int, ...]:
    """``[i]``: how many of ``ops`` had completed when step ``i`` returned -- its
    acknowledgement (CRASH-SYS-2): a step is acknowledged once its calls are done."""
    found = []
    done = 0
    for step in range(steps):
        while done < len(ops) and ops[done].step <= step:
            done += 1
        found.append(done)
    return tuple(found)


def image_of(files: Mapping[str, bytes], dirs: Iterable[str], root: str) -> Image:
    """The absolute ``files`` and ``dirs`` under ``root`` as an image relative to it."""
    rel_files = {}
    for path, data in files.items():
        name = relative(path, root)
        if name:
            rel_files[name] = data
    rel_dirs = {""}
    for directory in dirs:
        try:
            name = relative(directory, root)
        except OutsideRoot:
            continue
        if name:
            rel_dirs.add(name)
    return Image(rel_files, frozenset(rel_dirs))


def absolute(image: Image, root: str) -> dict[str, bytes]:
    """The files of ``image`` by absolute path under ``root`` (as reports show them)."""
    return {f"{root}/{name}": data for name, data in image.files.items()}
