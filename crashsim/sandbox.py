"""The pyfakefs sandbox a ``FileSystem`` workload runs in, the clock its steps read, and how
its files and Session states are shown in reports -- shared by the JSONL sweep
(:mod:`scopecheck.crashsim.jsonl_sweep`), the ``FileSystem`` sweeps
(:mod:`scopecheck.crashsim.generic_sweep`, :mod:`scopecheck.crashsim.generic_faults`) and the
fault checker (:mod:`scopecheck.crashsim.fault_check`), none of which imports another for them.
"""

from __future__ import annotations

import errno
import posixpath
import weakref
from collections.abc import Iterator
from typing import Any

from pyfakefs.fake_file import FakeDirectory, FakeFile

from scopecheck.crashsim.fake_disk import FakeDiskFileSystem
from scopecheck.crashsim.fs_session import ROOT
from scopecheck.crashsim.fs_source import absolute, image_of
from scopecheck.crashsim.persistence import Image
from scopecheck.crashsim.shown import data as shown_data
from scopecheck.crashsim.shown import describe as describe  # the sweeps' import of it
from scopecheck.impl.fs import DirEntry, fs_error

#: The time of a workload's first step; step ``k`` is ``BASE_TIME + 1000 * k`` (StepClock).
BASE_TIME = 1_700_000_000_000


class StepClock:
    """Timestamps depend only on the step index, so the model and every run agree."""

    def __init__(self) -> None:
        self.now = BASE_TIME

    def at(self, step: int) -> None:
        self.now = BASE_TIME + 1000 * step

    def __call__(self) -> int:
        return self.now


class FakeFs(FakeDiskFileSystem):
    """:class:`~scopecheck.crashsim.fake_disk.FakeDiskFileSystem` whose read-only lookups walk
    the fake tree directly.

    Through the fake ``os`` module every call normalises and resolves its path (≈0.2 ms); our
    paths are already absolute and normal, so reads, ``exists``/``is_dir``/``file_size``,
    ``list_dir`` and an already-present ``create_dir`` skip that, and ``open_append`` takes
    the ``open_append`` fast path.  Whole-file writes, renames and unlinks of regular files
    act on the fake tree (below).
    """

    def __init__(self, fake: Any) -> None:
        super().__init__(fake, sync=False, fast={"open_append"})
        self.fake = fake

    def _lookup(self, path: str) -> Any:
        node = self.fake.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, FakeDirectory):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
            node = node.entries.get(part)
            if node is None:
                return None
        return node

    def read_bytes(self, path: str) -> bytes:
        try:
            node = self._lookup(path)
            if node is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
            if isinstance(node, FakeDirectory):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        except OSError as exc:
            raise fs_error("read", path, exc) from exc
        contents = node.byte_contents
        return bytes(contents) if contents else b""

    def exists(self, path: str) -> bool:
        try:
            return self._lookup(path) is not None
        except NotADirectoryError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return isinstance(self._lookup(path), FakeDirectory)
        except NotADirectoryError:
            return False

    def file_size(self, path: str) -> int:
        return len(self.read_bytes(path))

    def list_dir(self, path: str) -> list[DirEntry]:
        try:
            node = self._lookup(path)
        except NotADirectoryError as exc:
            raise fs_error("list_dir", path, exc) from exc
        if node is None:
            raise fs_error("list_dir", path, FileNotFoundError(errno.ENOENT, "missing", path))
        if not isinstance(node, FakeDirectory):
            raise fs_error("list_dir", path, NotADirectoryError(errno.ENOTDIR, "not a dir", path))
        return [
            DirEntry(name, isinstance(child, FakeDirectory), not isinstance(child, FakeDirectory))
            for name, child in node.entries.items()
        ]

    def create_dir(self, path: str, recursive: bool = True) -> None:
        if recursive and self.is_dir(path):
            return
        super().create_dir(path, recursive)

    # Whole-file writes, renames and unlinks of regular files act on the fake tree directly
    # (same effect as the fake os module: same inode kept on rewrite, target replaced on
    # rename); anything unusual falls back to the fake os module and its errors.
    def _parent(self, path: str) -> tuple[Any, str]:
        directory, name = posixpath.split(path)
        try:
            node = self._lookup(directory)
        except NotADirectoryError:
            return None, name
        return (node if isinstance(node, FakeDirectory) else None), name

    def write_file(self, path: str, data: bytes) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name) if parent is not None else None
        if parent is None or isinstance(node, FakeDirectory):
            super().write_file(path, data)
        elif node is not None:
            node.set_contents(data)
        else:
            parent.add_entry(FakeFile(name, contents=data, filesystem=self.fake))  # type: ignore[type-var]

    def rename(self, source: str, target: str) -> None:
        src_dir, src_name = self._parent(source)
        dst_dir, dst_name = self._parent(target)
        node = src_dir.entries.get(src_name) if src_dir is not None else None
        if node is None or dst_dir is None or isinstance(node, FakeDirectory):
            super().rename(source, target)
            return
        existing = dst_dir.entries.get(dst_name)
        if isinstance(existing, FakeDirectory):
            super().rename(source, target)
            return
        if existing is not None and existing is not node:
            dst_dir.remove_entry(dst_name)
        del src_dir._entries[src_name]
        node.name = dst_name
        dst_dir._entries[dst_name] = node
        node.parent_dir = weakref.ref(dst_dir)

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name) if parent is not None else None
        if node is None or isinstance(node, FakeDirectory):
            super().unlink(path)
        else:
            parent.remove_entry(name)


class Sandbox:
    """One pyfakefs filesystem reused for every state (a fake FS cannot be copied; rebuilding
    it from ``{path: bytes}`` is the cheap way, REFERENCE §7).  :meth:`load` changes only the
    files and directories that differ from what is there."""

    def __init__(self) -> None:
        from pyfakefs.fake_filesystem import FakeFilesystem

        self.fake: Any = FakeFilesystem()
        self.fs = FakeFs(self.fake)
        self.fake.create_dir(ROOT)

    def load(self, image: Image) -> None:
        """Make the files under the root those of ``image`` (paths relative to the root)."""
        fake, fs = self.fake, self.fs
        files = absolute(image, ROOT)
        dirs = {ROOT, *(f"{ROOT}/{d}" for d in image.dirs if d)}
        # One walk of the fake tree gives every node; contents are compared on the nodes
        # rather than read back through paths (a state differs from the last in a file or two).
        present: dict[str, Any] = {}
        current: dict[str, Any] = {}
        stack = [(ROOT, fs._lookup(ROOT))]
        while stack:
            path, node = stack.pop()
            present[path] = node
            for name, child in node.entries.items():
                if isinstance(child, FakeDirectory):
                    stack.append((f"{path}/{name}", child))
                else:
                    current[f"{path}/{name}"] = child
        for path in current:
            if path not in files:
                fake.remove_object(path)
        for directory in sorted(present.keys() - dirs, reverse=True):
            if fs.is_dir(directory):
                fake.remove_object(directory)
        for directory in sorted(dirs - present.keys()):
            if not fs.is_dir(directory):
                fake.create_dir(directory)
        for path, data in files.items():
            node = current.get(path)
            if node is None:
                fs.write_file(path, data)
            elif (node.byte_contents or b"") != data:
                node.set_contents(data)

    def tree(self) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for directory, _, files in _walk(self.fs, ROOT):
            for name in files:
                path = f"{directory}/{name}"
                found[path] = self.fs.read_bytes(path)
        return found

    def state(self) -> Image:
        """The files under the root now, as an image relative to it."""
        return image_of(self.tree(), _dirs(self.fs, ROOT), ROOT)


def _walk(fs: FakeFs, top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    node = fs._lookup(top)
    if not isinstance(node, FakeDirectory):
        return
    dirs = [n for n, c in node.entries.items() if isinstance(c, FakeDirectory)]
    files = [n for n, c in node.entries.items() if not isinstance(c, FakeDirectory)]
    yield top, dirs, files
    for d in dirs:
        yield from _walk(fs, f"{top}/{d}")


def _dirs(fs: FakeFs, top: str) -> list[str]:
    return [d for d, _, _ in _walk(fs, top)]


def show_files(files: dict[str, bytes], limit: int = 400) -> dict[str, str]:
    """Each file's first ``limit`` bytes as text (:func:`~scopecheck.crashsim.shown.data`)."""
    return {path: shown_data(data, limit) for path, data in sorted(files.items())}


def render_files(title: str, files: dict[str, Any]) -> list[str]:
    lines = [f"{title}:"]
    if not files:
        lines.append("  (no files)")
    for path, data in sorted(files.items()):
        text = shown_data(data, 1 << 16) if isinstance(data, bytes) else str(data)
        lines.append(f"  {path}" + ("   (empty)" if not text else ""))
        for line in text.splitlines(keepends=True)[:12]:
            shown = line.rstrip("\n")
            lines.append(
                f"    | {shown[:160]}" + ("" if line.endswith("\n") else "   <- no newline")
            )
    return lines
