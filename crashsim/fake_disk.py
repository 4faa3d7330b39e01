"""Fast paths for :class:`~scopecheck.impl.fs.OsFileSystem` over pyfakefs's ``FakeOsModule``.

Why they exist: a JSONL world on pyfakefs (``jsonl-fakefs``, ``jsonl-unlink-fails``) would run
every file operation through the fake ``os`` module, which resolves and validates the path again
at every step: the fake ``os.open`` path of a read is about 15 times slower than
:func:`pyfakefs_reader`, and ``os.replace`` spends most of its time re-validating paths (the
pyfakefs machine's commits are dominated by sidecar publishes).  :class:`FakeDiskFileSystem`
is ``OsFileSystem`` over the fake ``os`` module with the public methods it can do faster
overridden: the functions below build each fast path from the ``FakeFilesystem`` itself and
skip the fake ``os`` layer by reaching its file objects directly.  They are pyfakefs tooling,
not part of a backend, so they live beside the crash simulator and ``impl/`` knows nothing of
them (ARCH-1); ``OsFileSystem`` has no hook for them.

What each assumes (``tests/jsonl/test_fs.py`` compares each with the fake ``os`` path):

* :func:`pyfakefs_reader` -- ``fake_filesystem.resolve(path)`` gives the file object, whose
  ``byte_contents`` are the whole file (a directory is refused with ``EISDIR``).
* :func:`pyfakefs_lister` -- a directory object's ``entries`` are exactly what ``scandir``
  lists, each entry's ``st_mode`` telling directory from regular file (symlinks not followed);
  the fake ``scandir`` resolves every entry's path twice, this reads the directory once.
* :func:`pyfakefs_renamer` -- only the common case: a regular file moved onto a new name or over
  another regular file, both paths absolute and normal, both parents existing directories; the
  move is pyfakefs's private ``_do_rename`` (pinned pyfakefs), so open handles follow the file.
  Anything else returns ``False`` and goes through ``os.replace``, errors included.
* :func:`pyfakefs_writer` -- only a *new* file under an existing directory, built and added as
  pyfakefs's own ``create_file`` does (mode ``0o644`` less the umask); an existing target, a
  missing parent or an unusual path returns ``False`` and goes through the fake ``os``.
* :func:`pyfakefs_appender` -- only an existing regular file reached through directories
  alone (no symlink on the way), by a caller allowed to write it; it opens the file exactly
  as the fake ``os.open(O_WRONLY | O_APPEND)`` does (the same raw append wrapper, the next
  free descriptor, and pyfakefs's ``chmod`` to ``0o777`` less the umask that follows every
  fake ``os.open``).  Anything else returns ``None`` and goes through the fake ``os``, errors
  included.  The fake ``os.open`` resolves the path four times (``exists``, ``resolve_path``,
  ``get_object_from_normpath``, ``chmod``); a backend that reopens its log on every open
  spends most of a crash check there.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
import sys
from collections.abc import Callable, Iterable
from typing import Any

from scopecheck.impl.fs import AppendFile, DirEntry, OsFileSystem, fs_error

#: The fast paths :class:`FakeDiskFileSystem` can take, by the method they speed up.
FAST_PATHS = frozenset({"read_bytes", "list_dir", "rename", "write_file", "open_append"})

#: The fast paths a JSONL world on pyfakefs takes (``open_append`` is the crash sweep's).
WORLD_FAST_PATHS = frozenset({"read_bytes", "list_dir", "rename", "write_file"})


class FakeDiskFileSystem(OsFileSystem):
    """:class:`~scopecheck.impl.fs.OsFileSystem` over pyfakefs's ``FakeOsModule`` taking the
    ``fast`` paths (names from :data:`FAST_PATHS`) straight through the fake tree.

    Each fast method does the common case itself and leaves everything else to the fake
    ``os`` module, errors included; an ``OSError`` a fast path raises is reported as the
    operation's failure, as ``OsFileSystem`` reports the fake ``os``'s.  Reads and listings
    change nothing, so a crash simulator wrapping this loses nothing by them.
    """

    def __init__(
        self, fake_filesystem: Any, *, sync: bool = True, fast: Iterable[str] = WORLD_FAST_PATHS
    ) -> None:
        from pyfakefs.fake_os import FakeOsModule

        super().__init__(FakeOsModule(fake_filesystem), sync=sync)
        chosen = frozenset(fast)
        if not chosen <= FAST_PATHS:
            raise ValueError(f"no fast path for {sorted(chosen - FAST_PATHS)}")
        self.fake_filesystem = fake_filesystem
        self.fast = chosen
        self.fast_read = pyfakefs_reader(fake_filesystem) if "read_bytes" in chosen else None
        self.fast_list = pyfakefs_lister(fake_filesystem) if "list_dir" in chosen else None
        self.fast_rename = pyfakefs_renamer(fake_filesystem) if "rename" in chosen else None
        self.fast_write = pyfakefs_writer(fake_filesystem) if "write_file" in chosen else None
        self.fast_append = pyfakefs_appender(fake_filesystem) if "open_append" in chosen else None

    def read_bytes(self, path: str) -> bytes:
        if self.fast_read is None:
            return super().read_bytes(path)
        try:
            return self.fast_read(path)
        except OSError as exc:
            raise fs_error("read", path, exc) from exc

    def list_dir(self, path: str) -> list[DirEntry]:
        if self.fast_list is None:
            return super().list_dir(path)
        try:
            return self.fast_list(path)
        except OSError as exc:
            raise fs_error("list_dir", path, exc) from exc

    def rename(self, source: str, target: str) -> None:
        try:
            if self.fast_rename is not None and self.fast_rename(source, target):
                return
        except OSError as exc:
            raise fs_error("rename", source, exc, target=target) from exc
        super().rename(source, target)

    def write_file(self, path: str, data: bytes) -> None:
        try:
            if self.fast_write is not None and self.fast_write(path, data):
                return
        except OSError as exc:
            raise fs_error("write", path, exc) from exc
        super().write_file(path, data)

    def open_append(self, path: str) -> AppendFile:
        try:
            fd = self.fast_append(path) if self.fast_append is not None else None
        except OSError as exc:
            raise fs_error("open_append", path, exc) from exc
        if fd is not None:
            return AppendFile(path, fd)
        return super().open_append(path)


def pyfakefs_reader(fake_filesystem: Any) -> Callable[[str], bytes]:
    """A fast whole-file reader for :class:`OsFileSystem` over a pyfakefs filesystem."""

    def read(path: str) -> bytes:
        target = fake_filesystem.resolve(path)
        if stat.S_ISDIR(target.st_mode):
            raise IsADirectoryError(errno_mod.EISDIR, "Is a directory", path)
        contents = target.byte_contents
        return bytes(contents) if contents else b""

    return read


def pyfakefs_lister(fake_filesystem: Any) -> Callable[[str], list[DirEntry]]:
    """A fast directory lister for :class:`OsFileSystem` over a pyfakefs filesystem: the same
    entries as ``scandir`` (names, directory / regular file, symlinks not followed)."""

    def list_dir(path: str) -> list[DirEntry]:
        directory = fake_filesystem.resolve(path)
        if not stat.S_ISDIR(directory.st_mode):
            raise NotADirectoryError(errno_mod.ENOTDIR, "Not a directory", path)
        listed = []
        for name, item in directory.entries.items():
            mode = item.st_mode
            listed.append(DirEntry(name, stat.S_ISDIR(mode), stat.S_ISREG(mode)))
        return listed

    return list_dir


def _plain_parts(path: str) -> tuple[str, str] | None:
    """``(directory, name)`` of an absolute, normal path with no ``.``-led components, else
    ``None`` (the pyfakefs fast paths leave every other path to the fake ``os`` module)."""
    directory, _, name = path.rpartition("/")
    if not directory.startswith("/") or not name or "/." in path or "//" in path:
        return None
    return directory, name


def pyfakefs_renamer(fake_filesystem: Any) -> Callable[[str, str], bool]:
    """The common case of an atomic replace over pyfakefs, without its generic checks: a
    regular file moved onto a new name or over another regular file, both parents existing
    directories and both paths absolute and normal.  The move itself is pyfakefs's own
    (``_do_rename``, pinned pyfakefs), so open handles follow the file as on a real system;
    anything else returns ``False`` and goes through ``os.replace``, errors included.
    ``os.replace`` spends most of its time re-validating paths (the pyfakefs
    machine's commits are dominated by sidecar publishes)."""
    resolve = fake_filesystem.resolve

    def rename(source: str, target: str) -> bool:
        old_parts, new_parts = _plain_parts(source), _plain_parts(target)
        if old_parts is None or new_parts is None:
            return False
        (source_dir, source_name), (target_dir, target_name) = old_parts, new_parts
        try:
            old_dir = resolve(source_dir)
            new_dir = old_dir if target_dir == source_dir else resolve(target_dir)
        except OSError:
            return False
        if not (stat.S_ISDIR(old_dir.st_mode) and stat.S_ISDIR(new_dir.st_mode)):
            return False
        moving = old_dir.entries.get(source_name)
        replaced = new_dir.entries.get(target_name)
        if moving is None or not stat.S_ISREG(moving.st_mode) or moving is replaced:
            return False
        if replaced is not None and not stat.S_ISREG(replaced.st_mode):
            return False
        fake_filesystem._do_rename(old_dir, source_name, new_dir, target_name)
        return True

    return rename


def pyfakefs_writer(fake_filesystem: Any) -> Callable[[str, bytes], bool]:
    """Creating a *new* file with its bytes over pyfakefs, as ``os.open(O_CREAT, 0o644)`` plus
    one write does (the umask applies), without re-validating the path at every step: the
    file object is built and added exactly as pyfakefs's own ``create_file`` does.  An
    existing target, a missing parent or an unusual path returns ``False`` (the fake ``os``
    path handles it, errors included)."""
    from pyfakefs.fake_file import FakeFile

    resolve = fake_filesystem.resolve

    def write(path: str, data: bytes) -> bool:
        parts = _plain_parts(path)
        if parts is None:
            return False
        directory, name = parts
        try:
            parent = resolve(directory)
        except OSError:
            return False
        if not stat.S_ISDIR(parent.st_mode) or name in parent.entries:
            return False
        mode = stat.S_IFREG | (0o644 & ~fake_filesystem.umask)
        created = FakeFile(name, mode, filesystem=fake_filesystem)
        parent.add_entry(created)
        created.set_initial_contents(data)
        return True

    return write


def _real_umask() -> int:
    """The process umask, read the way pyfakefs's fake ``os.open`` reads it on a POSIX host."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def pyfakefs_appender(fake_filesystem: Any) -> Callable[[str], int | None]:
    """Opening an existing file for appending over pyfakefs, as the fake
    ``os.open(path, O_WRONLY | O_APPEND)`` does, without resolving the path four times: the
    file object is reached by walking directory entries, and the descriptor is pyfakefs's own
    raw append wrapper, registered as its ``FakeFileOpen`` registers it.  Returns the
    descriptor, or ``None`` for anything but the common case -- a Windows or macOS flavoured
    fake filesystem, an unusual path, a missing or symlinked component, a target that is not a
    regular file, or permissions pyfakefs would check for a non-root caller that are not the
    owner's -- which then goes through the fake ``os`` (errors included)."""
    from pyfakefs import helpers
    from pyfakefs.fake_file import FakeBinaryFileWrapper
    from pyfakefs.helpers import _OpenModes

    modes = _OpenModes(
        must_exist=True,
        can_read=False,
        can_write=True,
        truncate=False,
        append=True,
        must_not_exist=False,
    )
    reachable = helpers.PERM_READ | helpers.PERM_EXE

    def open_append(path: str) -> int | None:
        fs = fake_filesystem
        if fs.is_windows_fs or fs.is_macos or sys.platform == "win32":
            return None
        if _plain_parts(path) is None or path == fs.dev_null.name:
            return None
        root = helpers.is_root()
        uid = helpers.get_uid()
        node = fs.root
        for part in path[1:].split("/"):
            if not stat.S_ISDIR(node.st_mode):
                return None
            if not root and (node.st_uid != uid or node.st_mode & reachable != reachable):
                return None
            node = node.entries.get(part)
            if node is None:
                return None
        mode = node.st_mode
        if not stat.S_ISREG(mode) or node is fs.dev_null:
            return None
        writable = helpers.PERM_READ | helpers.PERM_WRITE
        if not root and (node.st_uid != uid or mode & writable != writable):
            return None
        node.opened_as = path
        wrapper = FakeBinaryFileWrapper(
            node,
            path,
            open_modes=modes,
            allow_update=True,
            delete_on_close=False,
            filesystem=fs,
            newline=None,
            binary=True,
            closefd=True,
            encoding=None,
            errors=None,
            buffering=-1,
            raw_io=True,
            opened_as_fd=False,
        )
        wrapper.filedes = fs.add_open_file(wrapper)
        # The fake os.open chmods every file it opens to its mode argument (here the default,
        # 0o777 less the umask), an existing one included.
        permissions = 0o777 & ~_real_umask()
        node.st_mode = (mode & ~helpers.PERM_ALL) | (permissions & helpers.PERM_ALL)
        node.st_ctime = helpers.now()  # type: ignore[no-untyped-call]
        fd: int = wrapper.filedes
        return fd

    return open_append
