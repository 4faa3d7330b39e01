"""The filesystem capability the JSONL backend does all of its I/O through (REFERENCE §2).

Why a layer of our own: the crash simulator must see, and be able to fail or cut short, every
mutating file operation the backend performs.  So the operations are *coarse and explicit*: one
method is one syscall-level effect (one ``write`` of a whole buffer, one ``fsync``, one
``rename``), and nothing here buffers, retries or syncs behind the caller's back.  The durability
policy lives in the backend and is written down in ``spec/rules/jsonl.toml`` (JSONL-10..12).

:class:`OsFileSystem` runs over any module with the ``os`` API: the real :mod:`os` by default,
or pyfakefs's ``FakeOsModule`` so a whole session can live on a fake filesystem
(``OsFileSystem(FakeOsModule(fake_fs))``) without patching globals.

For the crash simulator, the mutating operations and what each one changes:

=================  ===========================================================================
``write_file``     create/truncate a file and write all bytes (unsynced until ``fsync_file``)
``open_append``    open an existing file for appending (no change on disk)
``append``         append bytes at the end (unsynced until ``fsync``); may be torn
``truncate``       cut an open file back to a size (the JSONL failed-append undo)
``fsync``          make an open file's data durable
``fsync_file``     make a closed file's data durable (opened read-only for the call)
``fsync_dir``      make a directory's entries (create/rename/unlink) durable
``rename``         atomically replace the target with the source (durable after fsync_dir)
``unlink``         remove a file (durable after fsync_dir)
``create_dir``     create a directory and missing parents
``remove``         remove a file or a tree (``force``: missing is fine)
=================  ===========================================================================

Every failure is a :class:`~scopecheck.models.errors.StorageIOError` with code ``io_error``; its
``details`` carry ``fs_code`` (one of :data:`FS_CODES`, the seeds' FileSystem error codes plus
``no_space`` and ``exists``), ``op``, ``path`` and ``errno``.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Protocol

import attrs

from scopecheck.models.errors import StorageIOError

#: FileSystem error codes (REFERENCE §2) carried in ``StorageIOError.details["fs_code"]``.
FS_CODES = frozenset(
    {
        "not_found",
        "permission_denied",
        "not_directory",
        "is_directory",
        "invalid",
        "not_supported",
        "no_space",
        "exists",
        "unknown",
    }
)

_ERRNO_CODES = {
    errno_mod.ENOENT: "not_found",
    errno_mod.EACCES: "permission_denied",
    errno_mod.EPERM: "permission_denied",
    errno_mod.ENOTDIR: "not_directory",
    errno_mod.EISDIR: "is_directory",
    errno_mod.EINVAL: "invalid",
    errno_mod.ENAMETOOLONG: "invalid",
    errno_mod.ENOTSUP: "not_supported",
    errno_mod.ENOSPC: "no_space",
    errno_mod.EDQUOT: "no_space",
    errno_mod.EEXIST: "exists",
    errno_mod.ENOTEMPTY: "exists",
}


def fs_error(op: str, path: str, exc: OSError, **details: Any) -> StorageIOError:
    """Wrap an ``OSError`` from ``op`` on ``path`` as ``StorageIOError(io_error)``."""
    code = _ERRNO_CODES.get(exc.errno or 0, "unknown")
    return StorageIOError(
        "io_error",
        f"{op} {path!r} failed: {exc.strerror or exc} ({code}); check the path, permissions "
        "and free space, then retry",
        fs_code=code,
        op=op,
        path=path,
        errno=exc.errno,
        **details,
    )


def fs_code(error: BaseException) -> str | None:
    """The FileSystem code of a :class:`StorageIOError` raised by this layer, else ``None``."""
    if isinstance(error, StorageIOError):
        code = error.details.get("fs_code")
        return code if isinstance(code, str) else None
    return None


@attrs.frozen
class Lines:
    """A file split into lines.

    ``complete`` holds every line that ended with ``\\n`` (without it); ``tail`` is the final
    fragment that did *not* end with ``\\n`` (a torn tail, REFERENCE §1), or ``None``.
    """

    complete: list[bytes]
    tail: bytes | None

    @property
    def complete_size(self) -> int:
        """Bytes taken by the complete lines, newlines included."""
        return sum(len(line) + 1 for line in self.complete)


@attrs.frozen
class DirEntry:
    name: str
    is_dir: bool
    is_file: bool


@attrs.define(eq=False)
class AppendFile:
    """An open append-only handle; every operation on it goes through the FileSystem."""

    path: str
    fd: int
    closed: bool = False


class FileSystem(Protocol):
    """What the JSONL backend needs from a filesystem.  One method, one effect."""

    def read_bytes(self, path: str) -> bytes: ...
    def read_lines(self, path: str) -> Lines: ...
    def iter_prefix_lines(self, path: str, size: int) -> Iterator[tuple[bytes, bool]]:
        """Lines of the first ``size`` bytes, streamed read-only in chunks (001 §1.3)."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Create or truncate ``path`` and write ``data`` (no fsync)."""
        ...

    def open_append(self, path: str) -> AppendFile:
        """Open an existing file for appending."""
        ...

    def append(self, handle: AppendFile, data: bytes) -> None:
        """Append all of ``data`` or raise; ``details["written"]`` says how much got out."""
        ...

    def fsync(self, handle: AppendFile) -> None: ...
    def truncate(self, handle: AppendFile, size: int) -> None: ...
    def close(self, handle: AppendFile) -> None: ...
    def fsync_file(self, path: str) -> None: ...
    def fsync_dir(self, path: str) -> None: ...
    def rename(self, source: str, target: str) -> None:
        """Atomically replace ``target`` with ``source``."""
        ...

    def unlink(self, path: str) -> None: ...
    def list_dir(self, path: str) -> list[DirEntry]: ...
    def create_dir(self, path: str, recursive: bool = True) -> None: ...
    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None: ...
    def file_size(self, path: str) -> int: ...
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...


class OsFileSystem:
    """:class:`FileSystem` over an ``os``-like module (real :mod:`os` or pyfakefs's fake)."""

    def __init__(self, os_module: ModuleType | Any = os, *, sync: bool = True) -> None:
        """``sync=False`` turns ``fsync``/``fsync_file``/``fsync_dir`` into no-ops at the OS
        level, for filesystems with no durability model (pyfakefs: fsync does nothing there
        anyway).  The calls still happen on this object, so a tracer or crash simulator
        wrapping it sees every one of them.  A caller that knows the filesystem under
        ``os_module`` better subclasses this and overrides the public methods it can do
        faster (``crashsim/fake_disk.py`` for pyfakefs).
        """
        self.os = os_module
        self.sync = sync

    # -- reading -----------------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        o = self.os
        try:
            fd = o.open(path, o.O_RDONLY)
        except OSError as exc:
            raise fs_error("read", path, exc) from exc
        try:
            info = o.fstat(fd)
            if stat.S_ISDIR(info.st_mode):  # pyfakefs says EBADF here, Linux EISDIR on read
                raise IsADirectoryError(errno_mod.EISDIR, "Is a directory", path)
            size = info.st_size
            first: bytes = o.read(fd, size + 1 if size else 1 << 16)
            if len(first) <= size:  # the common case: the whole file in one read
                return first
            chunks = [first]
            while True:
                chunk = o.read(fd, 1 << 22)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise fs_error("read", path, exc) from exc
        finally:
            o.close(fd)

    def read_lines(self, path: str) -> Lines:
        return split_lines(self.read_bytes(path))

    def iter_prefix_lines(
        self, path: str, size: int, chunk: int = 1 << 20
    ) -> Iterator[tuple[bytes, bool]]:
        """Yield ``(line, ended_with_newline)`` over the first ``size`` bytes of ``path``.

        Read-only and bounded: one chunk plus one line in memory at a time.  A fork reads its
        source through this and never writes it (FORK-14).
        """
        o = self.os
        try:
            fd = o.open(path, o.O_RDONLY)
        except OSError as exc:
            raise fs_error("read", path, exc) from exc
        try:
            left = size
            carry = b""
            while left > 0:
                try:
                    data: bytes = o.read(fd, min(chunk, left))
                except OSError as exc:
                    raise fs_error("read", path, exc) from exc
                if not data:
                    break
                left -= len(data)
                parts = (carry + data).split(b"\n")
                carry = parts.pop()
                for part in parts:
                    yield part, True
            if carry:
                yield carry, False
        finally:
            o.close(fd)

    # -- writing -----------------------------------------------------------------------------

    def write_file(self, path: str, data: bytes) -> None:
        o = self.os
        try:
            fd = o.open(path, o.O_WRONLY | o.O_CREAT | o.O_TRUNC, 0o644)
        except OSError as exc:
            raise fs_error("write", path, exc) from exc
        try:
            _write_all(o, fd, data, "write", path)
        finally:
            o.close(fd)

    def open_append(self, path: str) -> AppendFile:
        o = self.os
        try:
            return AppendFile(path, o.open(path, o.O_WRONLY | o.O_APPEND))
        except OSError as exc:
            raise fs_error("open_append", path, exc) from exc

    def append(self, handle: AppendFile, data: bytes) -> None:
        _check_handle(handle)
        _write_all(self.os, handle.fd, data, "append", handle.path)

    def fsync(self, handle: AppendFile) -> None:
        _check_handle(handle)
        if not self.sync:
            return
        try:
            self.os.fsync(handle.fd)
        except OSError as exc:
            raise fs_error("fsync", handle.path, exc) from exc

    def truncate(self, handle: AppendFile, size: int) -> None:
        _check_handle(handle)
        try:
            self.os.ftruncate(handle.fd, size)
        except OSError as exc:
            raise fs_error("truncate", handle.path, exc) from exc

    def close(self, handle: AppendFile) -> None:
        if handle.closed:
            return
        handle.closed = True
        try:
            self.os.close(handle.fd)
        except OSError as exc:
            raise fs_error("close", handle.path, exc) from exc

    def fsync_file(self, path: str) -> None:
        self._fsync_path(path, "fsync_file")

    def fsync_dir(self, path: str) -> None:
        self._fsync_path(path, "fsync_dir")

    def _fsync_path(self, path: str, op: str) -> None:
        if not self.sync:
            return
        o = self.os
        try:
            fd = o.open(path, o.O_RDONLY)
        except OSError as exc:
            raise fs_error(op, path, exc) from exc
        try:
            o.fsync(fd)
        except OSError as exc:
            raise fs_error(op, path, exc) from exc
        finally:
            o.close(fd)

    def rename(self, source: str, target: str) -> None:
        try:
            self.os.replace(source, target)
        except OSError as exc:
            raise fs_error("rename", source, exc, target=target) from exc

    def unlink(self, path: str) -> None:
        try:
            self.os.unlink(path)
        except OSError as exc:
            raise fs_error("unlink", path, exc) from exc

    # -- directories -------------------------------------------------------------------------

    def list_dir(self, path: str) -> list[DirEntry]:
        try:
            with self.os.scandir(path) as it:
                return [
                    DirEntry(
                        e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)
                    )
                    for e in it
                ]
        except OSError as exc:
            raise fs_error("list_dir", path, exc) from exc

    def create_dir(self, path: str, recursive: bool = True) -> None:
        try:
            if recursive:
                self.os.makedirs(path, exist_ok=True)
            else:
                self.os.mkdir(path)
        except OSError as exc:
            raise fs_error("create_dir", path, exc) from exc

    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        """Remove a file or directory; ``force`` makes a missing ``path`` a no-op."""
        o = self.os
        try:
            mode = o.lstat(path).st_mode
        except OSError as exc:
            if force and exc.errno == errno_mod.ENOENT:
                return
            raise fs_error("remove", path, exc) from exc
        try:
            if not stat.S_ISDIR(mode):
                o.unlink(path)
                return
            if recursive:
                for name in o.listdir(path):
                    self.remove(o.path.join(path, name), recursive=True, force=force)
            o.rmdir(path)
        except OSError as exc:
            if force and exc.errno == errno_mod.ENOENT:
                return
            raise fs_error("remove", path, exc) from exc

    # -- metadata ----------------------------------------------------------------------------

    def file_size(self, path: str) -> int:
        try:
            return int(self.os.stat(path).st_size)
        except OSError as exc:
            raise fs_error("file_size", path, exc) from exc

    def exists(self, path: str) -> bool:
        try:
            self.os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise fs_error("exists", path, exc) from exc
        return True

    def is_dir(self, path: str) -> bool:
        try:
            return stat.S_ISDIR(self.os.lstat(path).st_mode)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise fs_error("is_dir", path, exc) from exc


class ForwardingFileSystem:
    """A :class:`FileSystem` that forwards every call to ``inner``: the one base of every
    wrapper (a tracer, a crash recorder, a read-only view, a broken filesystem a test plants),
    which overrides just the calls it changes.  Being a real class rather than
    ``__getattr__``, it states each method of the protocol, so a wrapper type-checks as a
    :class:`FileSystem` and a method added to the protocol is added here once (ARCH-3:
    wrappers reach a backend only through this public seam)."""

    def __init__(self, inner: FileSystem) -> None:
        self.inner = inner

    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    def read_lines(self, path: str) -> Lines:
        return self.inner.read_lines(path)

    def iter_prefix_lines(self, path: str, size: int) -> Iterator[tuple[bytes, bool]]:
        return self.inner.iter_prefix_lines(path, size)

    def write_file(self, path: str, data: bytes) -> None:
        self.inner.write_file(path, data)

    def open_append(self, path: str) -> AppendFile:
        return self.inner.open_append(path)

    def append(self, handle: AppendFile, data: bytes) -> None:
        self.inner.append(handle, data)

    def fsync(self, handle: AppendFile) -> None:
        self.inner.fsync(handle)

    def truncate(self, handle: AppendFile, size: int) -> None:
        self.inner.truncate(handle, size)

    def close(self, handle: AppendFile) -> None:
        self.inner.close(handle)

    def fsync_file(self, path: str) -> None:
        self.inner.fsync_file(path)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)

    def rename(self, source: str, target: str) -> None:
        self.inner.rename(source, target)

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)

    def list_dir(self, path: str) -> list[DirEntry]:
        return self.inner.list_dir(path)

    def create_dir(self, path: str, recursive: bool = True) -> None:
        self.inner.create_dir(path, recursive)

    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        self.inner.remove(path, recursive, force)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)


def _check_handle(handle: AppendFile) -> None:
    if handle.closed:
        raise StorageIOError(
            "io_error",
            f"handle for {handle.path!r} is closed",
            fs_code="invalid",
            op="append",
            path=handle.path,
        )


def _write_all(o: Any, fd: int, data: bytes, op: str, path: str) -> None:
    view = memoryview(data)
    written = 0
    while written < len(data):
        try:
            count = o.write(fd, view[written:])
        except OSError as exc:
            raise fs_error(op, path, exc, written=written) from exc
        if count <= 0:  # pragma: no cover - a zero-byte write would loop forever
            raise StorageIOError(
                "io_error",
                f"{op} {path!r} wrote nothing",
                fs_code="unknown",
                op=op,
                path=path,
                written=written,
            )
        written += count


def split_lines(data: bytes) -> Lines:
    """Split ``data`` at ``\\n``; the unterminated final fragment, if any, becomes ``tail``."""
    parts = data.split(b"\n")
    last = parts.pop()
    return Lines(parts, last if last else None)


def join_lines(lines: Sequence[bytes]) -> bytes:
    """Inverse of :func:`split_lines` for complete lines."""
    return b"".join(line + b"\n" for line in lines)
