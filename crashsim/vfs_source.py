"""The recording SQLite VFS as a source of file operations for the one persistence model.

:class:`~scopecheck.crashsim.sqlite_vfs.RecordingVFS` numbers SQLite's ``xWrite``,
``xTruncate``, ``xSync`` and ``xDelete`` calls as :class:`~scopecheck.crashsim.sqlite_vfs.IOCall`
s; :func:`file_ops` turns them into the :class:`~scopecheck.crashsim.persistence.FileOp` s that
every other recorder (the syscall trace, the ``FileSystem`` layer) gives, so a SQLite crash
image is built by the same :class:`~scopecheck.crashsim.persistence.Volume` and judged under
the same model (CRASH-SYS-1, CRASH-SQL-2):

* the first call on a path implies its ``open`` (``create`` when the path is not on the disk
  at that point: SQLite opened a journal or WAL it had not made yet);
* ``xSync`` is an fsync of that file; one flagged ``sync_dir`` is followed by an fsync of the
  root directory (the unix VFS syncs the directory the first time it syncs a journal or WAL it
  opened with ``SQLITE_OPEN_CREATE``), and so is an ``xDelete`` whose ``syncDir`` was set --
  until then a created or deleted name is not durable;
* a sync that failed (an injected I/O error) is a ``syncfail``: its writes are not durable,
  nor made so by a later sync (CRASH-SYS-11); other failed calls and reads change nothing and
  are dropped;
* ``-shm`` files are left out: they are shared memory (SQLite maps them and rebuilds them from
  the WAL on recovery), never part of a crash image;
* anonymous temp files (no name) and files outside the root are left out too: SQLite deletes
  them on close and never reads them after a crash.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from scopecheck.crashsim.persistence import FileOp, Image
from scopecheck.crashsim.sqlite_vfs import IOCall

#: The handle the converted operations sync the root directory through.
ROOT_HANDLE = 0


@attrs.frozen
class VfsOps:
    """The operations of a VFS trace, and where each call's operations begin: ``at[i]`` is
    the index in ``ops`` of the first operation of call ``i`` (``at[len(calls)]`` is
    ``len(ops)``), so a position in the I/O trace -- where a commit returned -- is a position
    among the operations."""

    ops: tuple[FileOp, ...]
    at: tuple[int, ...]


def relative(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` with ``/`` separators, or ``None`` when it has no place
    in an image (no name, outside the root, or ``-shm`` shared memory)."""
    if not path or path.endswith("-shm"):
        return None
    found = os.path.relpath(path, root)
    if found == "." or found.startswith(".."):
        return None
    return found.replace(os.sep, "/")


def file_ops(calls: Sequence[IOCall], root: str, existing: Iterable[str] = ()) -> VfsOps:
    """Convert ``calls`` (absolute paths) into file operations on paths relative to ``root``;
    ``existing`` are the files on the disk before the first call (the base image)."""
    ops: list[FileOp] = [FileOp("open", "", handle=ROOT_HANDLE, flags=frozenset({"directory"}))]
    at: list[int] = []
    present = set(existing)
    handles: dict[str, int] = {}
    numbers = itertools.count(ROOT_HANDLE + 1)
    for call in calls:
        at.append(len(ops))
        if call.kind == "read" or (call.failed and call.kind != "sync"):
            continue
        path = relative(call.path, root)
        if path is None:
            continue
        if call.kind == "delete":
            if path in present:
                ops.append(FileOp("unlink", path, call=call.index))
                present.discard(path)
            handles.pop(path, None)
            if call.sync_dir:
                ops.append(FileOp("sync", "", handle=ROOT_HANDLE, call=call.index))
            continue
        handle = handles.get(path)
        if handle is None:
            handle = handles[path] = next(numbers)
            flags = frozenset() if path in present else frozenset({"create"})
            ops.append(FileOp("open", path, handle=handle, flags=flags, call=call.index))
            present.add(path)
        if call.kind == "write":
            ops.append(
                FileOp(
                    "write", path, handle=handle, offset=call.offset, data=call.data,
                    call=call.index,
                )
            )  # fmt: skip
        elif call.kind == "truncate":
            ops.append(FileOp("truncate", path, handle=handle, size=call.size, call=call.index))
        elif call.kind == "sync" and call.failed:
            ops.append(FileOp("syncfail", path, handle=handle, call=call.index))
        elif call.kind == "sync":
            ops.append(FileOp("sync", path, handle=handle, call=call.index))
            if call.sync_dir:
                ops.append(FileOp("sync", "", handle=ROOT_HANDLE, call=call.index))
    at.append(len(ops))
    return VfsOps(tuple(ops), tuple(at))


def read_image(root: str) -> Image:
    """The regular files directly under ``root`` as an image, ``-shm`` left out (a base
    image: the disk after a clean close, all of it durable)."""
    files = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and relative(path, root) is not None:
            files[name] = Path(path).read_bytes()
    return Image(files)


def materialise(image: Image, directory: str) -> None:
    """Write ``image`` -- SQLite's files, all directly under the root -- as the only files
    under ``directory`` (an existing directory: whatever it held is removed first, so every
    file is a new one).  Every crash check of the SQLite source writes its image here, so the
    writes are plain ``os`` calls (``open(..., "wb")``'s flags and mode, without its buffered
    file object)."""
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    for name, data in image.files.items():
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
