"""The persistence model: what a disk may hold after a crash, given the file operations so far.

One model for every source of operations (the syscall trace of any process, and the bytes the
filesystem layer records).  It is the conservative POSIX model, stated once in
``spec/rules/crash_sys.toml`` (CRASH-SYS-1):

* **Process crash** (the process dies, the kernel lives): every completed call is kept; a
  write in flight may have reached the file in part -- a prefix of its bytes, cut at any byte
  (:class:`~scopecheck.crashsim.points.TornCall`, :meth:`Volume.torn_calls`).
* **Power loss**: a file's data is durable up to its last ``fsync``/``fdatasync`` (or a
  ``sync``/``syncfs``); what was written after it may be lost, kept, or kept in part -- a prefix
  of those writes, the last one torn at any byte.  A directory entry (a create, a rename, an
  unlink, a link, a mkdir or rmdir) is durable only once that directory was fsynced; until then
  the directory may still show its entries as of its last fsync.  Entries and data are
  independent: a rename may reach the disk while the renamed file's unsynced data does not (the
  zero-length-file-after-rename failure), and the other way round.
* **A failed fsync** (``syncfail``, CRASH-SYS-11) loses the writes it was to make durable: Linux
  marks the pages of a failed writeback clean, so the page cache (a process crash, a read) still
  shows them, the disk never gets them, and a later successful fsync writes nothing for them --
  unless they are written again.
* **The device** (:class:`Device`, CRASH-SYS-12) says at what granularity a write may tear (any
  byte, a 512-byte sector, a 4096-byte block) and whether unsynced writes to different files may
  reach the disk out of order.
* **The profile** (:class:`Profile`, CRASH-SYS-14) says what a file system makes durable beyond
  that floor: ``posix`` (the default) nothing; ``ext4-ordered`` commits every earlier directory
  change with any fsync (its journal) and flushes a file's data when it is renamed over another
  or closed after a truncate to zero (``auto_da_alloc``); ``btrfs`` persists a file's names
  (and new ancestor directories) with its fsync (the log tree).  :data:`PROFILES` lists them;
  ``docs/crash-syscalls.md`` has their sources and limits.

:class:`Volume` applies :class:`FileOp` s to inodes and directories that each keep a current
and a durable version, and builds the images of a crash before any operation:
:meth:`Volume.process_image` and :meth:`Volume.power_images`, each named by its typed variant
(:mod:`scopecheck.crashsim.points`); :func:`power_image` rebuilds one image from its variant or
the variant's name (a replay needs nothing else), and :func:`coarser_tears` gives the same torn
write at sector and block granularity.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from scopecheck.crashsim.points import (
    DataKept,
    EntriesKept,
    Names,
    Only,
    PowerLoss,
    Prefix,
    ProcessCrash,
    Strict,
    Torn,
    TornCall,
    Variant,
    parse_variant,
)

OpKind = Literal[
    "open", "write", "truncate", "sync", "syncall", "rename", "unlink", "mkdir", "rmdir",
    "link", "symlink", "close", "syncfail",
]  # fmt: skip

#: The operations that change what a crash leaves, so each is a crash point.
MUTATING: frozenset[str] = frozenset(
    {"write", "truncate", "sync", "syncall", "rename", "unlink", "mkdir", "rmdir", "link",
     "symlink", "syncfail"}
)  # fmt: skip


@attrs.frozen
class FileOp:
    """One operation on the files under the root (paths are relative, ``/``-separated).

    ``open`` binds ``handle`` to the file at ``path`` (``flags``: ``create``, ``excl``,
    ``trunc``, ``directory``); ``write`` writes ``data`` through ``handle`` at ``offset``, or at
    the end when ``offset`` is ``None`` (``O_APPEND``); ``truncate`` sets the size through
    ``handle``; ``sync`` makes the handle's file (or directory) durable; ``syncfail`` is an
    fsync of the handle that failed with EIO, losing the writes it was to make durable
    (CRASH-SYS-11); ``rename``, ``link`` name ``target``; ``call`` is the index of the system
    call it came from, ``step`` the workload step it ran in, ``thread`` who made it."""

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
    #: The thread (or process) that made the call, where the recorder knows it (the system-call
    #: trace; ``-1`` elsewhere).  Not part of an operation's identity: a rerun's threads get
    #: other ids, and a replay compares the operations without them.
    thread: int = attrs.field(default=-1, eq=False)

    @property
    def mutating(self) -> bool:
        return self.kind in MUTATING or (
            self.kind == "open" and bool(self.flags & {"create", "trunc"})
        )

    def describe(self) -> str:
        """One line for a report; the root (path ``""``) shows as ``<root>``."""
        path = self.path or "<root>"
        where = f"{path} -> {self.target}" if self.target else path
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


def _tear(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"'{attribute.name}' must be a positive number of bytes (got {value!r})")


@attrs.frozen
class Device:
    """What the disk under the volume may do at a power loss (CRASH-SYS-12), in the spirit of
    SQLite's test VFS device flags.

    ``tear``: the granularity in bytes at which an unsynced write may be cut -- 1 (any byte, the
    conservative default), 512 (sectors), 4096 (blocks): a torn write keeps its bytes up to an
    absolute file offset that is a multiple of ``tear``.  ``reorder``: whether unsynced writes to
    *different files* may reach the disk out of order (a later write to B kept while an earlier
    one to A is lost); without it a power loss keeps a prefix, in trace order, of the unsynced
    writes of all files together."""

    tear: int = attrs.field(default=1, validator=_tear)
    reorder: bool = True


#: The conservative device: writes tear at any byte and files persist in any order.
ANY_BYTE = Device()


@attrs.frozen
class Profile:
    """What a file system makes durable beyond the POSIX floor at a power loss (CRASH-SYS-14).

    ``journal``: an fsync or fdatasync of any file or directory commits every earlier
    directory change (create, rename, unlink, link, mkdir, rmdir) -- the running journal
    transaction of ext4 ``data=ordered``.  ``replace_flush``: a rename over an existing file
    makes the renamed file's data durable first, and so does the close of a file that was
    truncated to zero and written (ext4's ``auto_da_alloc``; modelled as completing at the
    rename or close).  ``fsync_names``: an fsync of a file makes its current names durable
    and forgets its names that are gone (a rename's old name), with every directory on the
    way that was not durable (btrfs's log tree), but no other file's change.  Every profile
    keeps the floor: a file's data is durable after its own fsync, a directory's entries
    after the directory's fsync, and unsynced appended data may be lost, kept, or kept in
    part (a prefix: never garbage).  ``names_in_order``: the unsynced directory changes reach
    the disk in the order they were made (ext4's journal commits them in order); without it
    (``posix``, and ``btrfs``, whose log tree persists a file's names ahead of earlier
    changes, ALICE) any of them may reach it without the others.
    Sources: Linux ``Documentation/admin-guide/ext4.rst`` (``data=ordered``,
    ``auto_da_alloc``), btrfs's log tree (``fs/btrfs/tree-log.c``, "Btrfs:
    sync log after logging new name"), Pillai et al., OSDI 2014; ``docs/crash-syscalls.md``
    lists them with what the profiles approximate."""

    name: str
    journal: bool = False
    replace_flush: bool = False
    fsync_names: bool = False
    #: Directory changes reach the disk in the order they were made (a journal commits them
    #: in order): a power loss keeps a prefix of the unsynced ones, never a later one without
    #: an earlier (CRASH-SYS-20).
    names_in_order: bool = False
    #: One line: what it adds, for reports.
    summary: str = ""


#: The conservative POSIX model (the default): nothing is durable before its own fsync.
POSIX = Profile(
    "posix", summary="a name durable after its directory's fsync, data after its file's"
)
#: ext4, ``data=ordered`` with ``auto_da_alloc`` (its defaults).
EXT4_ORDERED = Profile(
    "ext4-ordered", journal=True, replace_flush=True, names_in_order=True,
    summary="any fsync commits every earlier directory change; a rename over a file, or a "
    "close after a truncate to zero, flushes the file's data first",
)  # fmt: skip
#: btrfs (its defaults): an fsync persists the file through the log tree.
BTRFS = Profile(
    "btrfs", fsync_names=True,
    summary="a file's fsync persists its data and its names, no other file's change",
)  # fmt: skip
#: Every profile, the default first: what an exploration builds images under.
PROFILES: tuple[Profile, ...] = (POSIX, EXT4_ORDERED, BTRFS)
PROFILE_NAMES: tuple[str, ...] = tuple(p.name for p in PROFILES)


def profile_named(name: str) -> Profile:
    """The profile called ``name``; :class:`ValueError` naming the choices for any other."""
    for profile in PROFILES:
        if profile.name == name:
            return profile
    raise ValueError(
        f"unknown file-system profile {name!r}: one of {', '.join(PROFILE_NAMES)} (CRASH-SYS-14)"
    )


#: The granularities :func:`coarser_tears` tries, coarsest first.
COARSER = (4096, 512)
#: At most this many aligned cut points per write for a granularity above one byte.
ALIGNED_CUTS = 8
#: At most this many ``only:`` or ``prefix:`` images per crash point.
_SIDE_IMAGES = 16
#: The operations that changed a directory whose :class:`Names` images a crash point gives:
#: the last this many with unsynced changes (CRASH-SYS-20).
RECENT_NAMES = 4
#: A write in flight at a process crash of at most this many bytes is cut at every byte.
SHORT_CALL = 64
#: Sampled cut points of a longer write in flight (besides its boundaries).
CALL_SAMPLES = 6


def call_cuts(
    data: bytes, rng: random.Random, short: int = SHORT_CALL, samples: int = CALL_SAMPLES
) -> list[int]:
    """The cut points (bytes that reached the file) of a write in flight at a process crash:
    every one for a write of at most ``short`` bytes; else 1, the middle, the last byte, each
    line end and 4 KiB boundary and ``samples`` seeded ones.  Never 0 nor ``len(data)``: those
    are the crash before and after the call."""
    size = len(data)
    if size <= short:
        return list(range(1, size))
    found = {1, size // 2, size - 1, *range(4096, size, 4096)}
    at = data.find(b"\n")
    while at >= 0:
        found.add(at + 1)
        at = data.find(b"\n", at + 1)
    found.update(rng.randrange(1, size) for _ in range(samples))
    return sorted(c for c in found if 0 < c < size)


@attrs.define
class _Node:
    kind: Literal["file", "dir", "link"]
    data: bytearray = attrs.field(factory=bytearray)
    synced: bytes = b""
    #: Writes and truncates the next successful sync will make durable, in order:
    #: ``(offset, data, seq)`` or ``(size, None, seq)``; ``seq`` orders them across files.
    pending: list[tuple[int, bytes | None, int]] = attrs.field(factory=list)
    target: str = ""
    #: Truncated to zero from a non-empty size since it was last closed (ext4's
    #: ``EXT4_STATE_DA_ALLOC_CLOSE``).
    truncated: bool = False
    #: Written since that truncate: a profile with ``replace_flush`` flushes its data at the
    #: next close.  A truncate with nothing written after it has no delayed blocks to flush,
    #: so the close makes nothing durable -- not even the truncate, which waits for the next
    #: journal commit (SQLite's ``journal_mode=TRUNCATE`` without its fsync: the journal may
    #: come back).
    flush_on_close: bool = False


def _replay(base: bytes, changes: Iterable[tuple[int, bytes | None, int]]) -> bytearray:
    buffer = bytearray(base)
    for offset, data, _ in changes:
        if data is None:
            _truncate(buffer, offset)
        else:
            _write(buffer, offset, data)
    return buffer


def _aligned(offset: int, length: int, granularity: int) -> range:
    """The cut points (bytes kept of the write) inside a write of ``length`` bytes at
    ``offset`` that end on an absolute multiple of ``granularity``."""
    first = (offset // granularity + 1) * granularity
    return range(first - offset, length, granularity)


def _write(buffer: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buffer):
        buffer.extend(b"\0" * (offset - len(buffer)))
    buffer[offset : offset + len(data)] = data


def _written(base: bytes, offset: int, data: bytes) -> bytes:
    buffer = bytearray(base)
    _write(buffer, offset, data)
    return bytes(buffer)


def _truncate(buffer: bytearray, size: int) -> None:
    if size < len(buffer):
        del buffer[size:]
    else:
        buffer.extend(b"\0" * (size - len(buffer)))


class PathError(ValueError):
    """An operation names a path the volume does not hold (the trace and the model disagree:
    a bug in the source, never a backend's fault)."""


#: One operation's changes of directory entries: ``(directory, name, inode)``, ``None`` for a
#: name removed.  A rename is one such change of one or two directories (it is atomic).
_NameChange = list[tuple[int, str, int | None]]


class Volume:
    """Inodes and directories under one root, each with a current and a durable version, the
    durable one kept by ``profile``'s rules (CRASH-SYS-1, CRASH-SYS-14).  Besides the two
    versions of its entries, a directory's changes since its last fsync are kept in order,
    each with the index of the operation that made it, so a power loss can keep some of them
    (CRASH-SYS-20)."""

    ROOT = 0

    def __init__(self, image: Image | None = None, profile: Profile = POSIX) -> None:
        self.profile = profile
        self._nodes: dict[int, _Node] = {self.ROOT: _Node("dir")}
        self._entries: dict[int, dict[str, int]] = {self.ROOT: {}}
        self._durable: dict[int, dict[str, int]] = {self.ROOT: {}}
        self._handles: dict[int, int] = {}
        self._next = 1
        self._seq = 0
        #: The operations applied so far: the index of the next one.
        self._applied = 0
        #: The directory changes no fsync has made durable yet, by operation, in order.
        self._unsynced_names: list[tuple[int, _NameChange]] = []
        #: The changes of the operation being applied (``None`` while loading an image).
        self._changing: _NameChange | None = None
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
        self._name(parent, leaf, number)
        self._entries[number] = {}
        self._durable[number] = {}

    def _name(self, directory: int, leaf: str, number: int | None) -> None:
        """Point ``leaf`` of ``directory`` at inode ``number`` (``None``: remove it), noted as
        a change of the operation being applied (CRASH-SYS-20)."""
        if number is None:
            self._entries[directory].pop(leaf, None)
        else:
            self._entries[directory][leaf] = number
        if self._changing is not None:
            self._changing.append((directory, leaf, number))

    # -- applying operations ---------------------------------------------------------------------

    def apply(self, op: FileOp) -> None:
        self._changing = []
        try:
            self._apply(op)
        finally:
            if self._changing:
                self._unsynced_names.append((self._applied, self._changing))
            self._changing = None
            self._applied += 1

    def _apply(self, op: FileOp) -> None:
        kind = op.kind
        if kind == "open":
            found = self.lookup(op.path)
            if found is None:
                if "create" not in op.flags:
                    raise PathError(f"open of a missing {op.path}")
                parent, leaf = self._parent(op.path)
                found = self._new("file")
                self._name(parent, leaf, found)
            elif "trunc" in op.flags and self._nodes[found].kind == "file":
                self._change(found, 0, None)
            self._handles[op.handle] = found
        elif kind == "close":
            number = self._handles.pop(op.handle, None)
            if number is not None:
                node = self._nodes[number]
                flush, node.flush_on_close, node.truncated = node.flush_on_close, False, False
                if flush:
                    self._sync(number)  # auto_da_alloc: a truncated, rewritten file at close
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
            self._synced(self._handles[op.handle])
        elif kind == "syncfail":
            self._syncfail(self._handles[op.handle])
        elif kind == "syncall":
            for number in list(self._nodes):
                self._sync(number)
        elif kind == "mkdir":
            self._mkdir(op.path)
        elif kind == "rmdir" or kind == "unlink":
            parent, leaf = self._parent(op.path)
            if leaf in self._entries[parent]:
                self._name(parent, leaf, None)
        elif kind == "rename":
            self._rename(op)
        elif kind == "link":
            source = self.lookup(op.path)
            if source is None:
                raise PathError(f"link of a missing {op.path}")
            parent, leaf = self._parent(op.target)
            self._name(parent, leaf, source)
        elif kind == "symlink":
            parent, leaf = self._parent(op.path)
            number = self._new("link")
            self._nodes[number].target = op.target
            self._name(parent, leaf, number)

    def _rename(self, op: FileOp) -> None:
        source_parent, source_leaf = self._parent(op.path)
        moving = self._entries[source_parent].get(source_leaf)
        if moving is None:
            raise PathError(f"rename of a missing {op.path}")
        target_parent, target_leaf = self._parent(op.target)
        replaced = self._entries[target_parent].get(target_leaf)
        if (
            self.profile.replace_flush
            and replaced is not None
            and self._nodes[replaced].kind == "file"
            and self._nodes[moving].kind == "file"
        ):
            self._sync(moving)  # auto_da_alloc: the data before the rename over a file
        if "exchange" in op.flags:
            other = self._entries[target_parent][target_leaf]
            self._name(source_parent, source_leaf, other)
        else:
            self._name(source_parent, source_leaf, None)
        self._name(target_parent, target_leaf, moving)

    def _change(self, number: int, offset: int, data: bytes | None) -> None:
        node = self._nodes[number]
        if data is None:
            if offset == 0 and node.data and self.profile.replace_flush:
                node.truncated, node.flush_on_close = True, False
            _truncate(node.data, offset)
        else:
            node.flush_on_close = node.flush_on_close or node.truncated
            _write(node.data, offset, data)
        node.pending.append((offset, data, self._seq))
        self._seq += 1

    def _sync(self, number: int) -> None:
        """Write back what is dirty.  That is every change since the last sync except the
        writes a failed sync dropped, so the durable version is the synced one with the pending
        changes replayed, not the page cache (CRASH-SYS-11)."""
        node = self._nodes[number]
        if node.kind == "dir":
            self._durable[number] = dict(self._entries[number])
            self._forget_names(lambda directory, _: directory == number)
        elif node.kind == "file":
            node.synced = bytes(_replay(node.synced, node.pending))
            node.pending.clear()

    def _synced(self, number: int) -> None:
        """An fsync of ``number`` that succeeded: its own changes durable (CRASH-SYS-1), and
        what the profile adds (CRASH-SYS-14): every directory change so far with a journal,
        the file's names with ``fsync_names``."""
        self._sync(number)
        if self.profile.journal:
            for directory, entries in self._entries.items():
                self._durable[directory] = dict(entries)
            self._unsynced_names.clear()
        elif self.profile.fsync_names and self._nodes[number].kind == "file":
            self._persist_names(number)

    def _persist_names(self, number: int) -> None:
        """Make the current names of file ``number`` durable, each with the directories on its
        way that were not, and forget its durable names that are gone.  The log tree replays
        over the last transaction, so those names are no longer unsynced changes."""
        persisted: set[tuple[int, str]] = set()
        for directory, entries in self._durable.items():
            for leaf, found in list(entries.items()):
                if found == number and self._entries.get(directory, {}).get(leaf) != number:
                    del entries[leaf]
                    persisted.add((directory, leaf))
        for path, found in self._names(self._entries).items():
            if found != number:
                continue
            directory = self.ROOT
            for part in path.split("/"):
                child = self._entries[directory][part]
                self._durable.setdefault(directory, {})[part] = child
                persisted.add((directory, part))
                directory = child
        self._forget_names(lambda directory, leaf: (directory, leaf) in persisted)

    def _forget_names(self, durable: Callable[[int, str], bool]) -> None:
        """Drop the unsynced directory changes of the names ``durable(directory, leaf)`` says
        were made durable."""
        kept: list[tuple[int, _NameChange]] = []
        for op, changes in self._unsynced_names:
            left = [change for change in changes if not durable(change[0], change[1])]
            if left:
                kept.append((op, left))
        self._unsynced_names = kept

    def _syncfail(self, number: int) -> None:
        """An fsync failed with EIO: the writeback of its dirty pages failed and Linux marked
        them clean, so they are no longer pending -- the page cache keeps them, the disk never
        will unless they are written again (CRASH-SYS-11).  Size changes stay pending: they are
        metadata, written with the inode."""
        node = self._nodes[number]
        if node.kind == "file":
            node.pending = [change for change in node.pending if change[1] is None]

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

    def torn_calls(self, op: FileOp, cuts: Iterable[int]) -> Iterator[tuple[TornCall, Image]]:
        """A process crash while ``op`` -- the next operation, a write -- was in flight: only
        its first ``cut`` bytes reached the file, as ``(TornCall(path, cut), image)`` for each
        cut point in ``cuts`` (:func:`call_cuts`).  Nothing for any other operation, nor
        for a write to a file no name reaches; images equal to the process image are left
        out.  :meth:`torn_call` rebuilds one by its name."""
        if op.kind != "write" or len(op.data) < 2 or op.handle not in self._handles:
            return
        number = self._handles[op.handle]
        path = self._path_of(number)
        if path is None:
            return
        data = {n: bytes(self._nodes[n].data) for n in self._files()}
        current = data[number]
        offset = len(current) if op.offset is None else op.offset
        for cut in cuts:
            if not 0 < cut < len(op.data):
                continue
            if current[offset : offset + cut] == op.data[:cut]:
                continue  # the bytes were there already: the process image
            data[number] = _written(current, offset, op.data[:cut])
            yield TornCall(path, cut), self._walk(self._entries, data)

    def torn_call(self, op: FileOp, variant: TornCall) -> Image:
        """The image :meth:`torn_calls` gives as ``variant`` for a crash before ``op``; raises
        :class:`ValueError` for one this volume and operation cannot have produced."""
        number = self._handles.get(op.handle) if op.kind == "write" else None
        if (
            number is None
            or self._path_of(number) != variant.path
            or not 0 < variant.cut < len(op.data)
        ):
            raise ValueError(f"no torn call {variant.name!r} before {op.describe()}")
        data = {n: bytes(self._nodes[n].data) for n in self._files()}
        offset = len(data[number]) if op.offset is None else op.offset
        data[number] = _written(data[number], offset, op.data[: variant.cut])
        return self._walk(self._entries, data)

    def _path_of(self, number: int) -> str | None:
        """A current name of the file ``number`` (the first in path order), if any."""
        names = sorted(p for p, n in self._names(self._entries).items() if n == number)
        return names[0] if names else None

    def _kept(self, number: int) -> bytes:
        """The file as the disk would hold it if every pending change reached it."""
        node = self._nodes[number]
        return bytes(_replay(node.synced, node.pending))

    def power_images(
        self,
        rng: random.Random,
        cuts: int = 3,
        *,
        device: Device = ANY_BYTE,
        limit: int = 64,
        unread: Callable[[str], bool] | None = None,
    ) -> Iterator[tuple[PowerLoss, Image]]:
        """Power loss now, as ``(variant, image)`` (CRASH-SYS-1, CRASH-SYS-12):

        * :class:`Strict` (``strict``): only what was synced;
        * :class:`DataKept` (``data-kept``): every pending write reached the disk, no unsynced
          directory change did;
        * :class:`EntriesKept` (``entries-kept``): every directory change reached the disk, no
          unsynced data did;
        * with ``device.reorder``, :class:`Only` (``only:<path>``) for each file with unsynced
          changes: that file keeps them all, every other file only its synced data;
        * without it, :class:`Prefix` (``prefix:<m>``): the first ``m`` unsynced changes of
          all files together, in trace order, reached the disk;
        * :class:`Torn` (``torn@<g>:<path>:<n>:<cut>``): one file's ``n``-th unsynced change
          (a write) kept its first ``cut`` bytes, ``g`` being ``device.tear``: before it, that
          file's earlier unsynced changes (with ``reorder``) or every earlier unsynced change
          of every file (without) reached the disk.  At one byte the cut points are the
          first, middle and last byte and ``cuts`` sampled ones; at coarser granularities
          every aligned cut, sampled down to :data:`ALIGNED_CUTS` per write;
        * :class:`Names` (``names-before:<op>``, ``names-only:<op>``, ``names-but:<op>``):
          some of the unsynced directory changes reached the disk, no unsynced data did
          (CRASH-SYS-20): those of the operations before ``op`` under every profile, and
          where the profile does not order them (``posix``, ``btrfs``) ``op``'s alone or all but
          ``op``'s -- a later unlink kept and an earlier rename lost.

        Data variants are built under the synced directory entries.  A crash point gives at
        most ``3 + 16 + limit + 12`` images: 16 ``only:``/``prefix:`` images (sampled with
        ``rng`` beyond that), ``limit`` torn ones (sampled likewise) and the ``names-`` ones of
        the last :data:`RECENT_NAMES` operations that changed a directory (built last, drawing
        nothing from ``rng``, so the other samples are as they were).  Images equal to one already
        given are left out.  A file ``unread`` names (no reopen reads it) is torn once, at the
        middle cut of its last unsynced write: its contents cannot change what a reopen reads,
        only its size might (CRASH-SYS-19).  Every variant rebuilds its image through
        :meth:`power_image`, without ``rng``."""
        given: list[Image] = []
        paths = self._names(self._durable)
        names = {number: path for path, number in paths.items()}
        variants: list[PowerLoss] = [Strict(), DataKept(), EntriesKept()]
        if device.reorder:
            movers = [n for n in self._files() if self._nodes[n].pending and n in names]
            if len(movers) > _SIDE_IMAGES:
                movers = sorted(rng.sample(movers, _SIDE_IMAGES))
            variants += [Only(names[n]) for n in movers]
        else:
            counts: Sequence[int] = range(1, len(self._order()))
            if len(counts) > _SIDE_IMAGES:
                counts = sorted(rng.sample(counts, _SIDE_IMAGES))
            variants += [Prefix(m) for m in counts]
        torn: list[Torn] = []
        for number in self._files():
            if number not in names:
                continue
            tears = [
                Torn(device.tear, names[number], count, cut)
                for count, (offset, data, _) in enumerate(self._nodes[number].pending)
                if data is not None
                for cut in self._cuts(offset, data, device, rng, cuts)
            ]
            if tears and unread is not None and unread(names[number]):
                last = [tear for tear in tears if tear.change == tears[-1].change]
                tears = [last[len(last) // 2]]
            torn += tears
        if len(torn) > limit:
            torn = [torn[i] for i in sorted(rng.sample(range(len(torn)), limit))]
        for variant in [*variants, *torn, *self._names_variants()]:
            image = self._build(variant, device, paths)
            if image not in given:
                given.append(image)
                yield variant, image

    def _names_variants(self) -> list[Names]:
        """The :class:`Names` images of this point (CRASH-SYS-20): with two or more operations'
        directory changes unsynced, for each of the last :data:`RECENT_NAMES` of those
        operations, the changes of the operations before it (every profile) and -- where the
        profile does not order them -- its change alone and all but its change.  An older
        operation had its turn at the crash points right after it, so a store that never
        fsyncs a directory costs at most ``3 * RECENT_NAMES`` images a point, not three for
        every change it ever made."""
        made = [op for op, _ in self._unsynced_names]
        if len(made) < 2:
            return []
        recent = made[-RECENT_NAMES:]
        found = [Names("before", op) for op in recent if op != made[0]]
        if not self.profile.names_in_order:
            found += [Names(keep, op) for op in recent for keep in ("only", "but")]
        return found

    @staticmethod
    def _cuts(offset: int, data: bytes, device: Device, rng: random.Random, cuts: int) -> list[int]:
        if device.tear == 1:
            if len(data) < 2:
                return []
            sample = rng.sample(range(1, len(data)), min(cuts, len(data) - 1))
            return sorted({1, len(data) // 2, len(data) - 1, *sample})
        points = _aligned(offset, len(data), device.tear)
        if len(points) > ALIGNED_CUTS:
            return sorted(rng.sample(points, ALIGNED_CUTS))
        return list(points)

    def _order(self) -> list[int]:
        """The sequence numbers of every pending change of every file, in trace order."""
        return sorted(seq for n in self._files() for _, _, seq in self._nodes[n].pending)

    def power_image(self, variant: PowerLoss, device: Device = ANY_BYTE) -> Image:
        """The power-loss image :meth:`power_images` gives as ``variant`` (for a :class:`Torn`
        the granularity is the variant's; ``device`` gives the ordering).  Raises
        :class:`ValueError` for one this volume and device cannot have produced."""
        return self._build(variant, device, self._names(self._durable))

    def _build(self, variant: PowerLoss, device: Device, paths: dict[str, int]) -> Image:
        synced = {n: self._nodes[n].synced for n in self._files()}
        try:
            match variant:
                case Strict():
                    return self._walk(self._durable, synced)
                case DataKept():
                    return self._walk(self._durable, {n: self._kept(n) for n in self._files()})
                case EntriesKept():
                    return self._walk(self._entries, synced)
                case Only(path) if device.reorder:
                    number = paths[path]
                    return self._walk(self._durable, {**synced, number: self._kept(number)})
                case Prefix(count):
                    order = self._order()
                    if count > len(order):
                        raise IndexError(count)
                    kept = set(order[:count])
                    return self._walk(self._durable, self._before(kept.__contains__))
                case Torn():
                    return self._torn(variant, device, paths, synced)
                case Names():
                    return self._walk(self._some_names(variant), synced)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"no power-loss image {variant.name!r} here ({exc!r})") from None
        raise ValueError(f"no power-loss image {variant.name!r} on {device}")

    def _some_names(self, variant: Names) -> dict[int, dict[str, int]]:
        """The durable entries with the unsynced changes ``variant`` keeps made on them, in
        the order they were made (CRASH-SYS-20)."""
        made = [op for op, _ in self._unsynced_names]
        if variant.op not in made or (variant.keep != "before" and self.profile.names_in_order):
            raise ValueError(f"no unsynced directory change of operation {variant.op} to keep")
        keep: Callable[[int], bool] = {
            "before": lambda op: op < variant.op,
            "only": lambda op: op == variant.op,
            "but": lambda op: op != variant.op,
        }[variant.keep]
        entries = {directory: dict(names) for directory, names in self._durable.items()}
        for op, changes in self._unsynced_names:
            if keep(op):
                for directory, leaf, number in changes:
                    if number is None:
                        entries.setdefault(directory, {}).pop(leaf, None)
                    else:
                        entries.setdefault(directory, {})[leaf] = number
        return entries

    def _before(self, keep: Callable[[int], bool]) -> dict[int, bytes]:
        return {
            n: bytes(_replay(node.synced, [c for c in node.pending if keep(c[2])]))
            for n in self._files()
            for node in (self._nodes[n],)
        }

    def _torn(
        self, variant: Torn, device: Device, paths: dict[str, int], synced: dict[int, bytes]
    ) -> Image:
        path, count, cut = variant.path, variant.change, variant.cut
        number = paths[path]
        node = self._nodes[number]
        offset, data, seq = node.pending[count]
        if data is None or not 0 < cut < len(data) or (offset + cut) % variant.granularity:
            raise ValueError(f"change {count} of {path} cannot be cut at {cut}")
        if device.reorder:
            files = {**synced, number: bytes(_replay(node.synced, node.pending[:count]))}
        else:
            files = self._before(lambda other: other < seq)
        partial = bytearray(files[number])
        _write(partial, offset, data[:cut])
        files[number] = bytes(partial)
        return self._walk(self._durable, files)

    def torn_write(self, variant: Torn) -> tuple[int, int, int]:
        """``(offset, length, cut)`` of the write ``variant`` cuts."""
        number = self._names(self._durable).get(variant.path)
        pending = [] if number is None else self._nodes[number].pending
        change = pending[variant.change] if variant.change < len(pending) else None
        if change is None or change[1] is None:
            raise ValueError(f"{variant.name!r}: no unsynced write there")
        return change[0], len(change[1]), variant.cut

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


def _image_key(image: Image) -> tuple[Any, ...]:
    """``image`` as a dictionary key (equal keys, equal images)."""
    return (tuple(sorted(image.files.items())), image.dirs, image.links)


class ProfiledVolume(Volume):
    """The volume of the first of ``profiles`` -- what every caller of a :class:`Volume` sees
    -- with a volume of each other profile beside it, applying the same operations
    (CRASH-SYS-14).  :meth:`power_images` gives the power-loss images of every profile,
    each distinct image once (the first profile to give it builds it, by its variant), and
    :meth:`profiles_of` says which profiles give an image at this crash point: an image
    the profiles share is checked once, and a failure of it says where it happens."""

    def __init__(self, image: Image | None = None, profiles: Sequence[Profile] = PROFILES) -> None:
        super().__init__(image, profiles[0])
        self.others = [Volume(image, profile) for profile in profiles[1:]]
        self._given: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}

    def apply(self, op: FileOp) -> None:
        super().apply(op)
        for other in self.others:
            other.apply(op)

    def power_images(
        self,
        rng: random.Random,
        cuts: int = 3,
        *,
        device: Device = ANY_BYTE,
        limit: int = 64,
        unread: Callable[[str], bool] | None = None,
    ) -> Iterator[tuple[PowerLoss, Image]]:
        """Every profile's :meth:`Volume.power_images`, sampled alike (each starts from
        ``rng``'s state), each distinct image once: the first profile's in its order, then
        the images only later profiles give."""
        state = rng.getstate()
        found: dict[tuple[Any, ...], tuple[PowerLoss, Image, str, list[str]]] = {}
        for volume in (self, *self.others):
            rng.setstate(state)
            name = volume.profile.name
            for variant, image in Volume.power_images(
                volume, rng, cuts, device=device, limit=limit, unread=unread
            ):
                key = _image_key(image)
                seen = found.get(key)
                if seen is None:
                    found[key] = (variant, image, name, [name])
                elif seen[3][-1] != name:
                    seen[3].append(name)
        self._given = {key: (built, tuple(names)) for key, (_, _, built, names) in found.items()}
        for variant, image, _, _ in found.values():
            yield variant, image

    def profiles_of(self, image: Image) -> tuple[str, tuple[str, ...]] | None:
        """For a power-loss image :meth:`power_images` gave at this crash point: the profile
        that builds it (its variant's) and every profile that gives it; ``None`` for another
        image."""
        return self._given.get(_image_key(image))


def profiled_volume(image: Image | None, profiles: Sequence[Profile]) -> Volume:
    """A volume of ``profiles`` (a plain one for a single profile)."""
    if len(profiles) == 1:
        return Volume(image, profiles[0])
    return ProfiledVolume(image, profiles)


def op_to_json(op: FileOp) -> dict[str, Any]:
    """``op`` as JSON (data in base64): how a reproducer keeps the operations it rebuilds its
    image from byte for byte (CRASH-COV-5)."""
    found = attrs.asdict(op)
    found["data"] = base64.b64encode(op.data).decode()
    found["flags"] = sorted(op.flags)
    return found


def op_from_json(data: Mapping[str, Any]) -> FileOp:
    return FileOp(
        **{**data, "data": base64.b64decode(data["data"]), "flags": frozenset(data["flags"])}
    )


def image_to_json(image: Image) -> dict[str, Any]:
    """``image`` as JSON (file contents in base64), for a reproducer's starting disk."""
    return {
        "files": {name: base64.b64encode(data).decode() for name, data in image.files.items()},
        "dirs": sorted(image.dirs),
        "links": sorted(image.links),
    }


def image_from_json(data: Mapping[str, Any]) -> Image:
    return Image(
        {name: base64.b64decode(text) for name, text in data["files"].items()},
        frozenset(data.get("dirs", [""])),
        frozenset(data.get("links", [])),
    )


def _volume(ops: Sequence[FileOp], k: int, start: Image | None, profile: Profile = POSIX) -> Volume:
    volume = Volume(start, profile)
    for op in ops[:k]:
        volume.apply(op)
    return volume


def power_image(
    ops: Sequence[FileOp],
    k: int,
    variant: Variant | str,
    seed: int = 0,
    device: Device = ANY_BYTE,
    *,
    start: Image | None = None,
    profile: Profile | str = POSIX,
) -> Image:
    """The image ``variant`` of a crash before ``ops[k]`` under ``profile`` (or its name,
    CRASH-SYS-14) -- :class:`ProcessCrash`, :class:`TornCall` (:meth:`Volume.torn_calls`:
    ``ops[k]``, a write, in flight at a process crash) or one of :meth:`Volume.power_images`'
    power losses, or the name of one, as a reproducer stores it
    (:func:`~scopecheck.crashsim.points.parse_variant`) -- rebuilt from the operations alone, so
    a replay gets exactly the image the exploration checked (CRASH-SYS-9). A variant spells out
    everything the image depends on (the cut of a torn write included), so ``seed`` -- the one
    the exploration sampled with -- does not change the result: any seed gives the same image.
    :class:`ValueError` for a name of no image, or an image these operations cannot have."""
    del seed
    if isinstance(variant, str):
        variant = parse_variant(variant)
    if isinstance(profile, str):
        profile = profile_named(profile or POSIX.name)
    volume = _volume(ops, k, start, profile)
    match variant:
        case ProcessCrash():
            return volume.process_image()
        case TornCall():
            if k >= len(ops):
                raise ValueError(f"no torn call {variant.name!r} at the end of the operations")
            return volume.torn_call(ops[k], variant)
    return volume.power_image(variant, device)


def coarser_tears(
    source: Volume | Sequence[FileOp],
    k: int,
    variant: Torn,
    *,
    device: Device = ANY_BYTE,
    start: Image | None = None,
    profile: Profile = POSIX,
) -> list[tuple[int, Torn, Image]]:
    """The write a failing torn variant cuts, cut instead at block and sector boundaries
    (CRASH-SYS-12): ``(granularity, variant, image)`` for 4096 then 512, at each the
    aligned cuts inside the write nearest to the original cut (below it first), so a caller can
    report the coarsest tearing under which a finding still happens.  A granularity with no
    boundary inside the write gives nothing: the write cannot tear there.  ``source`` is the
    operations (the volume is rebuilt up to ``k``) or a volume already at the crash point (``k``
    unused)."""
    volume = source if isinstance(source, Volume) else _volume(source, k, start, profile)
    offset, length, cut = volume.torn_write(variant)
    found: list[tuple[int, Torn, Image]] = []
    for granularity in COARSER:
        coarse = Device(tear=granularity, reorder=device.reorder)
        below = (offset + cut) // granularity * granularity - offset
        for point in (below, below + granularity):
            if 0 < point < length:
                torn = attrs.evolve(variant, granularity=granularity, cut=point)
                found.append((granularity, torn, volume.power_image(torn, coarse)))
    return found
