"""The persistence model: what a disk may hold after a crash, given the file operations so far.

One model for every source of operations (the syscall trace of any process, and the bytes the
filesystem layer records).  It is the conservative POSIX model, stated once in
``spec/rules/crash_sys.toml`` (CRASH-SYS-1):

* **Process crash** (the process dies, the kernel lives): every completed call is kept.
* **Power loss**: a file's data is durable up to its last ``fsync``/``fdatasync`` (or a
  ``sync``/``syncfs``); what was written after it may be lost, kept, or kept in part -- a prefix
  of those writes, the last one torn at any byte.  A directory entry (a create, a rename, an
  unlink, a link, a mkdir or rmdir) is durable only once that directory was fsynced; until then
  the directory may still show its entries as of its last fsync.  Entries and data are
  independent: a rename may reach the disk while the renamed file's unsynced data does not (the
  zero-length-file-after-rename failure), and the other way round.

:class:`Volume` applies :class:`FileOp` s to inodes and directories that each keep a current
and a durable version, and builds the images of a crash before any operation:
:meth:`Volume.process_image` and :meth:`Volume.power_images`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Literal

import attrs

OpKind = Literal[
    "open", "write", "truncate", "sync", "syncall", "rename", "unlink", "mkdir", "rmdir",
    "link", "symlink", "close",
]  # fmt: skip

#: The operations that change what a crash leaves, so each is a crash point.
MUTATING: frozenset[str] = frozenset(
    {"write", "truncate", "sync", "syncall", "rename", "unlink", "mkdir", "rmdir", "link",
     "symlink"}
)  # fmt: skip


@attrs.frozen
class FileOp:
    """One operation on the files under the root (paths are relative, ``/``-separated).

    ``open`` binds ``handle`` to the file at ``path`` (``flags``: ``create``, ``excl``,
    ``trunc``, ``directory``); ``write`` writes ``data`` through ``handle`` at ``offset``, or at
    the end when ``offset`` is ``None`` (``O_APPEND``); ``truncate`` sets the size through
    ``handle``; ``sync`` makes the handle's file (or directory) durable; ``rename``, ``link``
    name ``target``; ``call`` is the index of the system call it came from, ``step`` the
    workload step it ran in."""

    kind: OpKind
    path: str = ""
    target: str = ""
    handle: int = -1
    offset: int | None = None
    data: bytes = b""
    size: int = 0
    flags: frozenset[str] = frozenset()
    call: int = -1
    step: int = -1

    @property
    def mutating(self) -> bool:
        return self.kind in MUTATING or (
            self.kind == "open" and bool(self.flags & {"create", "trunc"})
        )

    def describe(self) -> str:
        where = f"{self.path} -> {self.target}" if self.target else self.path
        if self.kind == "write":
            at = "end" if self.offset is None else f"offset {self.offset}"
            return f"write {len(self.data)} bytes at {at} of {where}"
        if self.kind == "truncate":
            return f"truncate {where} to {self.size}"
        if self.kind == "open":
            return f"open {where} ({', '.join(sorted(self.flags)) or 'existing'})"
        return f"{self.kind} {where}".strip()


@attrs.frozen
class Image:
    """What a disk holds: regular files by relative path, and directories (``""`` is the
    root).  Symlinks are kept as files holding their target, flagged in ``links``."""

    files: Mapping[str, bytes]
    dirs: frozenset[str] = frozenset({""})
    links: frozenset[str] = frozenset()


@attrs.define
class _Node:
    kind: Literal["file", "dir", "link"]
    data: bytearray = attrs.field(factory=bytearray)
    synced: bytes = b""
    #: Writes and truncates since the last sync: ``(offset, data)`` or ``(size, None)``.
    pending: list[tuple[int, bytes | None]] = attrs.field(factory=list)
    target: str = ""


def _write(buffer: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buffer):
        buffer.extend(b"\0" * (offset - len(buffer)))
    buffer[offset : offset + len(data)] = data


def _truncate(buffer: bytearray, size: int) -> None:
    if size < len(buffer):
        del buffer[size:]
    else:
        buffer.extend(b"\0" * (size - len(buffer)))


class PathError(ValueError):
    """An operation names a path the volume does not hold (the trace and the model disagree:
    a bug in the source, never a backend's fault)."""


class Volume:
    """Inodes and directories under one root, each with a current and a durable version."""

    ROOT = 0

    def __init__(self, image: Image | None = None) -> None:
        self._nodes: dict[int, _Node] = {self.ROOT: _Node("dir")}
        self._entries: dict[int, dict[str, int]] = {self.ROOT: {}}
        self._durable: dict[int, dict[str, int]] = {self.ROOT: {}}
        self._handles: dict[int, int] = {}
        self._next = 1
        if image is not None:
            self._load(image)

    def _load(self, image: Image) -> None:
        """Start from ``image``, all of it durable (a disk after a clean restart)."""
        for name in sorted(image.dirs - {""}, key=lambda d: d.count("/")):
            self._mkdir(name)
        for name, data in sorted(image.files.items()):
            kind: Literal["file", "link"] = "link" if name in image.links else "file"
            number = self._new(kind)
            node = self._nodes[number]
            if kind == "link":
                node.target = data.decode("utf-8", "surrogateescape")
            else:
                node.data[:] = data
                node.synced = bytes(data)
            parent, leaf = self._parent(name)
            self._entries[parent][leaf] = number
        for directory, entries in self._entries.items():
            self._durable[directory] = dict(entries)

    # -- the namespace ---------------------------------------------------------------------------

    def _new(self, kind: Literal["file", "dir", "link"]) -> int:
        number = self._next
        self._nodes[number] = _Node(kind)
        self._next += 1
        return number

    def _parent(self, path: str) -> tuple[int, str]:
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise PathError("the root has no parent")
        directory = self.ROOT
        for part in parts[:-1]:
            found = self._entries.get(directory, {}).get(part)
            if found is None or self._nodes[found].kind != "dir":
                raise PathError(f"{path}: no directory {part!r}")
            directory = found
        return directory, parts[-1]

    def lookup(self, path: str) -> int | None:
        if path in ("", "."):
            return self.ROOT
        try:
            parent, leaf = self._parent(path)
        except PathError:
            return None
        return self._entries[parent].get(leaf)

    def _mkdir(self, path: str) -> None:
        parent, leaf = self._parent(path)
        number = self._new("dir")
        self._entries[parent][leaf] = number
        self._entries[number] = {}
        self._durable[number] = {}

    # -- applying operations ---------------------------------------------------------------------

    def apply(self, op: FileOp) -> None:
        kind = op.kind
        if kind == "open":
            found = self.lookup(op.path)
            if found is None:
                if "create" not in op.flags:
                    raise PathError(f"open of a missing {op.path}")
                parent, leaf = self._parent(op.path)
                found = self._new("file")
                self._entries[parent][leaf] = found
            elif "trunc" in op.flags and self._nodes[found].kind == "file":
                self._change(found, 0, None)
            self._handles[op.handle] = found
        elif kind == "close":
            self._handles.pop(op.handle, None)
        elif kind == "write":
            number = self._handles[op.handle]
            node = self._nodes[number]
            offset = len(node.data) if op.offset is None else op.offset
            self._change(number, offset, op.data)
        elif kind == "truncate":
            number = self._handles[op.handle]
            if "extend" not in op.flags or op.size > len(self._nodes[number].data):
                self._change(number, op.size, None)
        elif kind == "sync":
            self._sync(self._handles[op.handle])
        elif kind == "syncall":
            for number in list(self._nodes):
                self._sync(number)
        elif kind == "mkdir":
            self._mkdir(op.path)
        elif kind == "rmdir" or kind == "unlink":
            parent, leaf = self._parent(op.path)
            self._entries[parent].pop(leaf, None)
        elif kind == "rename":
            self._rename(op)
        elif kind == "link":
            source = self.lookup(op.path)
            if source is None:
                raise PathError(f"link of a missing {op.path}")
            parent, leaf = self._parent(op.target)
            self._entries[parent][leaf] = source
        elif kind == "symlink":
            parent, leaf = self._parent(op.path)
            number = self._new("link")
            self._nodes[number].target = op.target
            self._entries[parent][leaf] = number

    def _rename(self, op: FileOp) -> None:
        source_parent, source_leaf = self._parent(op.path)
        moving = self._entries[source_parent].get(source_leaf)
        if moving is None:
            raise PathError(f"rename of a missing {op.path}")
        target_parent, target_leaf = self._parent(op.target)
        if "exchange" in op.flags:
            other = self._entries[target_parent][target_leaf]
            self._entries[source_parent][source_leaf] = other
        else:
            del self._entries[source_parent][source_leaf]
        self._entries[target_parent][target_leaf] = moving

    def _change(self, number: int, offset: int, data: bytes | None) -> None:
        node = self._nodes[number]
        if data is None:
            _truncate(node.data, offset)
        else:
            _write(node.data, offset, data)
        node.pending.append((offset, data))

    def _sync(self, number: int) -> None:
        node = self._nodes[number]
        if node.kind == "dir":
            self._durable[number] = dict(self._entries[number])
        elif node.kind == "file":
            node.synced = bytes(node.data)
            node.pending.clear()

    # -- images ----------------------------------------------------------------------------------

    def _walk(self, entries: dict[int, dict[str, int]], data: dict[int, bytes]) -> Image:
        files: dict[str, bytes] = {}
        dirs = {""}
        links = set()
        seen = {self.ROOT}
        stack = [(self.ROOT, "")]
        while stack:
            directory, prefix = stack.pop()
            for name, number in entries.get(directory, {}).items():
                path = f"{prefix}{name}"
                node = self._nodes[number]
                if node.kind == "dir":
                    if number not in seen:
                        seen.add(number)
                        dirs.add(path)
                        stack.append((number, path + "/"))
                elif node.kind == "link":
                    files[path] = node.target.encode("utf-8", "surrogateescape")
                    links.add(path)
                else:
                    files[path] = data[number]
        return Image(files, frozenset(dirs), frozenset(links))

    def _files(self) -> list[int]:
        return [n for n, node in self._nodes.items() if node.kind == "file"]

    def process_image(self) -> Image:
        """A process crash now: every completed call kept."""
        return self._walk(self._entries, {n: bytes(self._nodes[n].data) for n in self._files()})

    def power_images(self, rng: random.Random, cuts: int = 3) -> Iterator[tuple[str, Image]]:
        """Power loss now, as ``(variant, image)``: ``strict`` (only what was synced),
        ``data-kept`` (every write reached the disk, no unsynced directory change did),
        ``entries-kept`` (every directory change reached the disk, no unsynced data did), and
        ``torn:<path>:<n>:<bytes>`` (under the synced entries, one file keeps its first ``n``
        unsynced writes and ``bytes`` of the next, every other file its synced data).  Images
        equal to one already given are left out."""
        synced = {n: self._nodes[n].synced for n in self._files()}
        current = {n: bytes(self._nodes[n].data) for n in self._files()}
        given: list[Image] = []

        def fresh(image: Image) -> bool:
            if image in given:
                return False
            given.append(image)
            return True

        for variant, image in (
            ("strict", self._walk(self._durable, synced)),
            ("data-kept", self._walk(self._durable, current)),
            ("entries-kept", self._walk(self._entries, synced)),
        ):
            if fresh(image):
                yield variant, image
        names = {n: p for p, n in self._names(self._durable).items()}
        for number in self._files():
            node = self._nodes[number]
            if not node.pending or number not in names:
                continue
            for count, (offset, data) in enumerate(node.pending):
                if data is None or len(data) < 2:
                    continue
                sample = rng.sample(range(1, len(data)), min(cuts, len(data) - 1))
                points = sorted({1, len(data) // 2, len(data) - 1, *sample})
                for cut in points:
                    partial = bytearray(node.synced)
                    for before_offset, before in node.pending[:count]:
                        if before is None:
                            _truncate(partial, before_offset)
                        else:
                            _write(partial, before_offset, before)
                    _write(partial, offset, data[:cut])
                    image = self._walk(self._durable, {**synced, number: bytes(partial)})
                    if fresh(image):
                        yield f"torn:{names[number]}:{count}:{cut}", image

    def _names(self, entries: dict[int, dict[str, int]]) -> dict[str, int]:
        """Path -> inode of every regular file reachable through ``entries``."""
        found: dict[str, int] = {}
        stack = [(self.ROOT, "")]
        seen = {self.ROOT}
        while stack:
            directory, prefix = stack.pop()
            for name, number in entries.get(directory, {}).items():
                node = self._nodes[number]
                if node.kind == "dir" and number not in seen:
                    seen.add(number)
                    stack.append((number, f"{prefix}{name}/"))
                elif node.kind == "file":
                    found[f"{prefix}{name}"] = number
        return found
