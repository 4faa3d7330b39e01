"""From a process's system calls to the file operations under its root, with the moments its
responses left it.

:func:`extract` follows what the kernel would: descriptors (``open``, ``dup``, ``fcntl
F_DUPFD``, ``close``) bound to the file they were opened on, each descriptor's offset (moved by
``read``, ``write``, ``lseek``; ``O_APPEND`` writes at the end), the working directory
(``chdir``) for relative paths and ``*at`` directories, and turns every call that changes a
file or a directory under the root into a :class:`~.persistence.FileOp`.  Failed calls change
nothing and are left out, and so are calls that never returned (``= ?``: killed in the call);
but an fsync or fdatasync failed with EIO becomes a
``syncfail``, the writes it was to make durable being lost (CRASH-SYS-11).  Every way a call is
made durable counts (CRASH-SYS-10): a write through a descriptor opened ``O_SYNC`` or
``O_DSYNC``, and a ``pwritev2`` with ``RWF_SYNC`` or ``RWF_DSYNC``, is followed by a ``sync`` of
its handle.  An ``ftruncate`` through such a descriptor is not: ``O_SYNC`` covers writes, and
Linux does not sync a truncate for it, so the model keeps the conservative answer.

A response of the process protocol is a line ``{"id": N, "ok"|"error": ...}`` written to a pipe;
each one becomes an :class:`Ack` at its place among the operations (CRASH-SYS-2).  What the run
cannot see or should not do becomes a :class:`Finding`, each once per path (or once per run):

* ``mmap``: a file under the root mapped shared (``MAP_SHARED``, ``MAP_SHARED_VALIDATE``) and
  writable, at ``mmap`` or later by ``mprotect`` (CRASH-SYS-8, CRASH-SYS-13);
* ``msync``: an ``msync`` of a shared mapping of a file under the root, a sync the model
  cannot follow (CRASH-SYS-13);
* ``no-guarantee``: a ``sync_file_range``, which promises no durability and is not taken as a
  sync (CRASH-SYS-10);
* ``outside``: a file changed outside the root (CRASH-SYS-4);
* ``unreadable``: a line of the trace the reader could not read (:class:`~.strace.Unreadable`)
  naming a call the crash model follows, or no call it can name: the operations after it may
  miss that call, so no crash image built past it is judged (CRASH-SYS-16).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Literal

import attrs
import orjson

from scopecheck.crashsim.persistence import FileOp
from scopecheck.crashsim.strace import TRACED, Exit, Fd, Syscall, Unreadable

#: Paths outside the root that a backend may touch without it being reported.
QUIET_PREFIXES = ("/dev/", "/proc/", "/sys/")

#: ``open`` flag bits (x86-64 and arm64 values, for flags strace could not name).
_O_DSYNC = 0o10000
#: ``RWF_DSYNC | RWF_SYNC`` and ``RWF_APPEND`` of ``pwritev2``.
_RWF_SYNCS, _RWF_APPEND = 0x2 | 0x4, 0x10
#: ``mmap``'s mapping type bits, and the shared types (``MAP_SHARED``, ``MAP_SHARED_VALIDATE``).
_MAP_TYPE, _MAP_SHARED_TYPES = 0x0F, (0x01, 0x03)
_PROT_WRITE = 0x2
_PAGE = 4096


@attrs.frozen
class Ack:
    """The response to request ``request_id`` was written after the first ``ops`` operations."""

    ops: int
    request_id: int
    call: int


FindingKind = Literal["mmap", "msync", "no-guarantee", "outside", "unreadable"]


@attrs.frozen
class Finding:
    """What the run cannot see or should not do, at call ``call``; ``kind`` is ``mmap``,
    ``msync``, ``no-guarantee``, ``outside`` or ``unreadable`` (see the module docstring);
    ``at`` is how many of the timeline's operations came before it, ``path`` the file it is
    about (relative to the root) when it is about one."""

    kind: FindingKind
    call: int
    text: str
    at: int = 0
    path: str | None = None


@attrs.frozen
class Timeline:
    """One process's operations under the root, its responses, and what to report."""

    ops: tuple[FileOp, ...]
    acks: tuple[Ack, ...]
    findings: tuple[Finding, ...]
    #: The index of each mutating call in the trace, by name, with its ordinal among the calls
    #: of that name made by the same thread: how ``strace -e inject=NAME:when=N`` names it.
    mutating_calls: tuple[tuple[int, str, int], ...]
    exit_status: int | None = None
    killed_by: str | None = None
    #: The files under the root it opened in a mode that reads them (``O_RDONLY`` or
    #: ``O_RDWR`` without ``O_TRUNC``, or no access mode the trace names), by their path then:
    #: what its reads could have seen (CRASH-SYS-19).
    read: frozenset[str] = frozenset()


@attrs.define
class _Open:
    path: str  # absolute
    handle: int
    offset: int = 0
    append: bool = False
    directory: bool = False
    under_root: bool = False
    #: Opened ``O_SYNC`` or ``O_DSYNC``: every write through it is durable when it returns.
    sync: bool = False


@attrs.define
class _Mapping:
    """A shared mapping of a file under the root, by address range."""

    start: int
    end: int
    path: str


def _flags(value: Any) -> set[str]:
    return set(str(value).split("|")) if isinstance(value, str) else set()


def _bits(value: Any) -> tuple[set[str], int]:
    """The flag names of a flags argument and the bits strace printed as numbers (a flag it
    could not name, or a whole argument it printed as a number): meaning, not spelling."""
    if isinstance(value, int):
        return set(), value
    names: set[str] = set()
    number = 0
    for part in _flags(value):
        if part.startswith("0x"):
            number |= int(part, 16)
        elif part.isdigit():
            number |= int(part)
        else:
            names.add(part)
    return names, number


class _Extractor:
    def __init__(self, root: str, cwd: str, first_handle: int) -> None:
        self.root = os.path.normpath(root)
        self.cwd = cwd
        self.fds: dict[int, _Open] = {}
        self.ops: list[FileOp] = []
        self.acks: list[Ack] = []
        self.findings: list[Finding] = []
        self.mutating: list[tuple[int, str, int]] = []
        self.ordinals: dict[tuple[int, str], int] = {}
        self.handle = first_handle
        self.call = -1
        self.last_mutating = -1
        self.maps: list[_Mapping] = []
        self.reported: set[tuple[str, str]] = set()
        self.read: set[str] = set()

    # -- paths -----------------------------------------------------------------------------

    def _absolute(self, path: bytes | str, base: Any = None) -> str:
        text = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
        if os.path.isabs(text):
            return os.path.normpath(text)
        if isinstance(base, Fd) and base.number != -100:
            known = self.fds.get(base.number)
            directory = known.path if known is not None else (base.path or self.cwd)
        elif isinstance(base, Fd) and base.path:
            directory = base.path
        else:
            directory = self.cwd
        return os.path.normpath(os.path.join(directory, text))

    def _relative(self, path: str) -> str | None:
        if path == self.root:
            return ""
        if path.startswith(self.root + "/"):
            return path[len(self.root) + 1 :]
        return None

    def _outside(self, path: str, what: str) -> None:
        if not path.startswith(QUIET_PREFIXES):
            self.findings.append(
                Finding(
                    "outside",
                    self.call,
                    f"{what} {path}, outside the root {self.root}",
                    at=len(self.ops),
                )
            )

    def _emit(self, op: FileOp, name: str, pid: int) -> None:
        self.ops.append(attrs.evolve(op, call=self.call, thread=pid))
        if op.mutating and self.last_mutating != self.call:  # a call is listed once
            self.last_mutating = self.call
            key = (pid, name)
            self.mutating.append((self.call, name, self.ordinals.get(key, 0)))

    def _once(self, kind: FindingKind, path: str, text: str) -> None:
        """Report a limit once per ``(kind, path)`` in the run."""
        if (kind, path) not in self.reported:
            self.reported.add((kind, path))
            self.findings.append(
                Finding(kind, self.call, text, at=len(self.ops), path=self._relative(path))
            )

    def _fd(self, value: Any) -> _Open | None:
        number = value.number if isinstance(value, Fd) else value
        return self.fds.get(number) if isinstance(number, int) else None

    def unreadable(self, record: Unreadable) -> None:
        """A line the reader could not read: a finding when it may hide a call the model
        follows (every traced call but the mapping ones it names, or no name at all)."""
        self.call = record.index
        if record.name is not None and record.pid is not None:
            # It was a call all the same: strace's ``when=N`` counts it (a fault plan's ordinal).
            key = (record.pid, record.name)
            self.ordinals[key] = self.ordinals.get(key, 0) + 1
        if record.name is not None and (
            record.name not in TRACED or record.name in ("munmap", "mprotect")
        ):
            return
        call = f"a {record.name} call" if record.name else "a call"
        self.findings.append(
            Finding(
                "unreadable",
                record.index,
                f"{call} of the trace could not be read ({record.reason}: {record.excerpt})",
                at=len(self.ops),
            )
        )

    # -- calls -----------------------------------------------------------------------------

    def feed(self, call: Syscall) -> None:
        """Follow one call.  A call that never returned (strace's ``= ?``: the process was
        killed in it, as a kill run does at the call's entry, before the kernel runs it) is
        not taken as done: a rename or an unlink the model applied but the disk never saw
        would make every later call on those paths contradict the model."""
        self.call = call.index
        key = (call.pid, call.name)
        try:
            if call.result is None and call.error is None:
                return
            if call.ok:
                getattr(self, f"_{call.name}", self._ignore)(call)
            elif call.name in ("fsync", "fdatasync") and call.error == "EIO":
                self._syncfail(call)
        finally:
            self.ordinals[key] = self.ordinals.get(key, 0) + 1

    def _ignore(self, call: Syscall) -> None:
        del call

    def _open_common(self, call: Syscall, path_arg: Any, base: Any, flags: set[str]) -> None:
        result = call.result
        number = result.number if isinstance(result, Fd) else result
        if not isinstance(number, int):
            return
        path = (
            self._absolute(result.path)
            if isinstance(result, Fd) and result.path and result.path.startswith("/")
            else self._absolute(path_arg, base)
        )
        relative = self._relative(path)
        writable = bool(flags & {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"})
        flag_names, flag_bits = _bits("|".join(flags))
        self.handle += 1
        entry = _Open(
            path,
            self.handle,
            append="O_APPEND" in flags,
            directory="O_DIRECTORY" in flags,
            under_root=relative is not None,
            sync=bool(flag_names & {"O_SYNC", "O_DSYNC", "O_RSYNC"} or flag_bits & _O_DSYNC),
        )
        self.fds[number] = entry
        if relative is None:
            if writable:
                self._outside(path, "opened for writing")
            return
        if _reads(flags):
            self.read.add(relative)
        wanted = set()
        if "O_CREAT" in flags:
            wanted.add("create")
        if "O_EXCL" in flags:
            wanted.add("excl")
        if "O_TRUNC" in flags:
            wanted.add("trunc")
        if "O_DIRECTORY" in flags:
            wanted.add("directory")
        self._emit(
            FileOp("open", relative, handle=self.handle, flags=frozenset(wanted)),
            call.name,
            call.pid,
        )

    def _open(self, call: Syscall) -> None:
        self._open_common(call, call.args[0], None, _flags(call.args[1]))

    def _openat(self, call: Syscall) -> None:
        flags = call.args[2] if len(call.args) > 2 else ""
        if isinstance(flags, dict):  # openat2's struct open_how
            flags = flags.get("flags", "")
        self._open_common(call, call.args[1], call.args[0], _flags(flags))

    _openat2 = _openat

    def _creat(self, call: Syscall) -> None:
        self._open_common(call, call.args[0], None, {"O_CREAT", "O_WRONLY", "O_TRUNC"})

    def _close(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        number = call.args[0].number if isinstance(call.args[0], Fd) else call.args[0]
        self.fds.pop(number, None)
        if entry is not None and entry.under_root and entry not in self.fds.values():
            self._emit(
                FileOp("close", self._relative(entry.path) or "", handle=entry.handle),
                call.name,
                call.pid,
            )

    def _dup_to(self, source: Any, target: Any) -> None:
        entry = self._fd(source)
        number = target.number if isinstance(target, Fd) else target
        if isinstance(number, int):
            if entry is None:
                self.fds.pop(number, None)
            else:
                self.fds[number] = entry

    def _dup(self, call: Syscall) -> None:
        self._dup_to(call.args[0], call.result)

    def _dup2(self, call: Syscall) -> None:
        self._dup_to(call.args[0], call.args[1])

    _dup3 = _dup2

    def _fcntl(self, call: Syscall) -> None:
        if len(call.args) > 1 and str(call.args[1]).startswith("F_DUPFD"):
            self._dup_to(call.args[0], call.result)

    def _chdir(self, call: Syscall) -> None:
        self.cwd = self._absolute(call.args[0])

    def _fchdir(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None:
            self.cwd = entry.path

    # -- data ------------------------------------------------------------------------------

    def _data(
        self,
        call: Syscall,
        entry: _Open,
        data: bytes,
        offset: int | None,
        *,
        durable: bool = False,
        append: bool = False,
    ) -> None:
        """A write of ``data`` (cut to what the call returned: a short write records only the
        bytes written) at ``offset``, or at the descriptor's offset when ``None``; ``durable``:
        the call itself made it durable (CRASH-SYS-10)."""
        written = call.result if isinstance(call.result, int) else len(data)
        data = data[:written]
        if entry.under_root:
            at = (
                None
                if append or (entry.append and offset is None)
                else (entry.offset if offset is None else offset)
            )
            relative = self._relative(entry.path) or ""
            self._emit(
                FileOp("write", relative, handle=entry.handle, offset=at, data=data),
                call.name,
                call.pid,
            )
            if durable or entry.sync:
                self._emit(FileOp("sync", relative, handle=entry.handle), call.name, call.pid)
        elif not entry.path.startswith("pipe:") and not entry.path.startswith("socket:"):
            self._outside(entry.path, "wrote to")
        if offset is None:
            entry.offset += written

    def _response(self, call: Syscall, data: bytes) -> None:
        for line in data.splitlines():
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if (
                isinstance(message, dict)
                and isinstance(message.get("id"), int)
                and ("ok" in message or "error" in message)
            ):
                self.acks.append(Ack(len(self.ops), message["id"], call.index))

    def _write(self, call: Syscall) -> None:
        fd, data = call.args[0], call.args[1]
        if (
            isinstance(fd, Fd)
            and fd.path
            and fd.path.startswith("pipe:")
            and isinstance(data, bytes)
        ):
            self._response(call, data)
            return
        entry = self._fd(fd)
        if entry is not None and isinstance(data, bytes):
            self._data(call, entry, data, None)

    def _iov(self, value: Any) -> bytes:
        if not isinstance(value, list):
            return b""
        return b"".join(item.get("iov_base", b"") for item in value if isinstance(item, dict))

    def _writev(self, call: Syscall) -> None:
        fd = call.args[0]
        data = self._iov(call.args[1])
        if isinstance(fd, Fd) and fd.path and fd.path.startswith("pipe:"):
            self._response(call, data)
            return
        entry = self._fd(fd)
        if entry is not None:
            self._data(call, entry, data, None)

    def _pwrite64(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None and isinstance(call.args[1], bytes):
            self._data(call, entry, call.args[1], int(call.args[3]))

    def _pwritev(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None:
            self._data(call, entry, self._iov(call.args[1]), int(call.args[3]))

    def _pwritev2(self, call: Syscall) -> None:
        """``pwritev2``: offset -1 is the descriptor's own; ``RWF_SYNC``/``RWF_DSYNC`` make
        the write durable when it returns (CRASH-SYS-10); ``RWF_APPEND`` writes at the end."""
        entry = self._fd(call.args[0])
        if entry is None:
            return
        names, number = _bits(call.args[4] if len(call.args) > 4 else 0)
        offset = int(call.args[3])
        self._data(
            call,
            entry,
            self._iov(call.args[1]),
            None if offset == -1 else offset,
            durable=bool(names & {"RWF_SYNC", "RWF_DSYNC"} or number & _RWF_SYNCS),
            append="RWF_APPEND" in names or bool(number & _RWF_APPEND),
        )

    def _read(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None and isinstance(call.result, int):
            entry.offset += call.result

    _readv = _read

    def _lseek(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None and isinstance(call.result, int):
            entry.offset = call.result

    def _ftruncate(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None and entry.under_root:
            self._emit(
                FileOp(
                    "truncate",
                    self._relative(entry.path) or "",
                    handle=entry.handle,
                    size=int(call.args[1]),
                ),
                call.name,
                call.pid,
            )
        elif entry is not None:
            self._outside(entry.path, "truncated")

    def _truncate(self, call: Syscall) -> None:
        path = self._absolute(call.args[0])
        relative = self._relative(path)
        if relative is None:
            self._outside(path, "truncated")
            return
        self.handle += 1
        handle = self.handle
        self._emit(FileOp("open", relative, handle=handle), call.name, call.pid)
        self._emit(
            FileOp("truncate", relative, handle=handle, size=int(call.args[1])), call.name, call.pid
        )
        self._emit(FileOp("close", relative, handle=handle), call.name, call.pid)

    def _fallocate(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        mode = _flags(call.args[1]) if isinstance(call.args[1], str) else set()
        if (
            entry is None
            or not entry.under_root
            or mode & {"FALLOC_FL_KEEP_SIZE", "FALLOC_FL_PUNCH_HOLE"}
        ):
            return
        offset, length = int(call.args[2]), int(call.args[3])
        self._emit(
            FileOp(
                "truncate",
                self._relative(entry.path) or "",
                handle=entry.handle,
                size=offset + length,
                flags=frozenset({"extend"}),
            ),
            call.name,
            call.pid,
        )

    def _fsync(self, call: Syscall) -> None:
        entry = self._fd(call.args[0])
        if entry is not None and entry.under_root:
            self._emit(
                FileOp("sync", self._relative(entry.path) or "", handle=entry.handle),
                call.name,
                call.pid,
            )

    _fdatasync = _fsync

    def _syncfail(self, call: Syscall) -> None:
        """fsync or fdatasync failed with EIO (the kernel's, or strace's injected one): the
        writes it was to make durable are lost to the disk (CRASH-SYS-11)."""
        entry = self._fd(call.args[0])
        if entry is not None and entry.under_root:
            self._emit(
                FileOp("syncfail", self._relative(entry.path) or "", handle=entry.handle),
                call.name,
                call.pid,
            )

    def _sync(self, call: Syscall) -> None:
        self._emit(FileOp("syncall"), call.name, call.pid)

    _syncfs = _sync

    def _sync_file_range(self, call: Syscall) -> None:
        """Not a sync: it starts or waits for writeback of a range but writes no metadata and
        flushes no disk cache, so it promises nothing after a power loss (CRASH-SYS-10)."""
        entry = self._fd(call.args[0])
        if entry is not None and entry.under_root:
            self._once(
                "no-guarantee",
                "",
                "sync_file_range gives no durability guarantee (no metadata, no disk cache "
                "flush): the crash images treat it as no sync at all",
            )

    # -- names -----------------------------------------------------------------------------

    def _names(
        self,
        call: Syscall,
        kind: str,
        path: str,
        target: str = "",
        flags: frozenset[str] = frozenset(),
    ) -> None:
        relative, moved = self._relative(path), self._relative(target) if target else ""
        if relative is None or moved is None:
            if relative is not None or moved is not None or not path.startswith(QUIET_PREFIXES):
                self._outside(target or path, f"{kind} of")
            return
        self._emit(FileOp(kind, relative, moved, flags=flags), call.name, call.pid)  # type: ignore[arg-type]

    def _rename(self, call: Syscall) -> None:
        self._names(call, "rename", self._absolute(call.args[0]), self._absolute(call.args[1]))

    def _renameat(self, call: Syscall) -> None:
        a = call.args
        flags = _flags(a[4]) if len(a) > 4 else set()
        wanted = frozenset({"noreplace"} if "RENAME_NOREPLACE" in flags else set()) | frozenset(
            {"exchange"} if "RENAME_EXCHANGE" in flags else set()
        )
        self._names(call, "rename", self._absolute(a[1], a[0]), self._absolute(a[3], a[2]), wanted)

    _renameat2 = _renameat

    def _unlink(self, call: Syscall) -> None:
        self._names(call, "unlink", self._absolute(call.args[0]))

    def _unlinkat(self, call: Syscall) -> None:
        a = call.args
        kind = "rmdir" if "AT_REMOVEDIR" in _flags(a[2] if len(a) > 2 else "") else "unlink"
        self._names(call, kind, self._absolute(a[1], a[0]))

    def _mkdir(self, call: Syscall) -> None:
        self._names(call, "mkdir", self._absolute(call.args[0]))

    def _mkdirat(self, call: Syscall) -> None:
        self._names(call, "mkdir", self._absolute(call.args[1], call.args[0]))

    def _rmdir(self, call: Syscall) -> None:
        self._names(call, "rmdir", self._absolute(call.args[0]))

    def _link(self, call: Syscall) -> None:
        self._names(call, "link", self._absolute(call.args[0]), self._absolute(call.args[1]))

    def _linkat(self, call: Syscall) -> None:
        a = call.args
        self._names(call, "link", self._absolute(a[1], a[0]), self._absolute(a[3], a[2]))

    def _symlink(self, call: Syscall) -> None:
        target = (
            call.args[0].decode("utf-8", "surrogateescape")
            if isinstance(call.args[0], bytes)
            else str(call.args[0])
        )
        path = self._absolute(call.args[1])
        relative = self._relative(path)
        if relative is None:
            self._outside(path, "symlink")
            return
        self._emit(FileOp("symlink", relative, target), call.name, call.pid)

    def _symlinkat(self, call: Syscall) -> None:
        target = (
            call.args[0].decode("utf-8", "surrogateescape")
            if isinstance(call.args[0], bytes)
            else str(call.args[0])
        )
        path = self._absolute(call.args[2], call.args[1])
        relative = self._relative(path)
        if relative is None:
            self._outside(path, "symlink")
            return
        self._emit(FileOp("symlink", relative, target), call.name, call.pid)

    # -- mappings --------------------------------------------------------------------------

    def _writable_mapping(self, path: str) -> None:
        self._once(
            "mmap",
            path,
            f"{path} is mapped shared and writable: writes through the mapping are not system "
            "calls, so the trace cannot see them",
        )

    def _overlapping(self, start: int, length: int) -> list[_Mapping]:
        end = start + -(-length // _PAGE) * _PAGE
        return [m for m in self.maps if m.start < end and start < m.end]

    def _unmap(self, start: int, length: int) -> None:
        end = start + -(-length // _PAGE) * _PAGE
        kept: list[_Mapping] = []
        for m in self.maps:
            if m.end <= start or end <= m.start:
                kept.append(m)
                continue
            if m.start < start:
                kept.append(_Mapping(m.start, start, m.path))
            if end < m.end:
                kept.append(_Mapping(end, m.end, m.path))
        self.maps = kept

    def _mmap(self, call: Syscall) -> None:
        """A shared mapping of a file under the root is tracked by address range; writable,
        it is a limit of the run (CRASH-SYS-8).  Private mappings never reach the file."""
        a = call.args
        if len(a) < 5 or not isinstance(call.result, int) or not isinstance(a[1], int):
            return
        self._unmap(call.result, a[1])  # a fixed mapping replaces what was there
        entry = self._fd(a[4])
        map_names, map_bits = _bits(a[3])
        shared = bool(map_names & {"MAP_SHARED", "MAP_SHARED_VALIDATE"}) or (
            not map_names & {"MAP_PRIVATE"} and (map_bits & _MAP_TYPE) in _MAP_SHARED_TYPES
        )
        if entry is None or not entry.under_root or not shared:
            return
        self.maps.append(_Mapping(call.result, call.result + a[1], entry.path))
        prot_names, prot_bits = _bits(a[2])
        if "PROT_WRITE" in prot_names or prot_bits & _PROT_WRITE:
            self._writable_mapping(entry.path)

    def _mprotect(self, call: Syscall) -> None:
        """A shared file mapping made writable later is the same limit (CRASH-SYS-13)."""
        a = call.args
        if len(a) < 3 or not isinstance(a[0], int) or not isinstance(a[1], int):
            return
        names, bits = _bits(a[2])
        if "PROT_WRITE" in names or bits & _PROT_WRITE:
            for mapping in self._overlapping(a[0], a[1]):
                self._writable_mapping(mapping.path)

    def _munmap(self, call: Syscall) -> None:
        if len(call.args) > 1 and isinstance(call.args[0], int) and isinstance(call.args[1], int):
            self._unmap(call.args[0], call.args[1])

    def _msync(self, call: Syscall) -> None:
        """``msync`` of a shared file mapping writes back stores the trace never saw: not a
        sync the model can follow (CRASH-SYS-13)."""
        a = call.args
        if len(a) < 2 or not isinstance(a[0], int) or not isinstance(a[1], int):
            return
        for mapping in self._overlapping(a[0], a[1]):
            self._once(
                "msync",
                mapping.path,
                f"{mapping.path} is synced with msync through a shared mapping: the model "
                "follows only system-call writes and syncs, so its crash images of that file "
                "may be wrong",
            )


def _reads(flags: set[str]) -> bool:
    """Whether an open with ``flags`` can read the file: a read or read-write mode without
    ``O_TRUNC`` (a truncated file shows nothing of what it held), or a mode the trace does
    not name (taken as reading); a directory is listed, not read."""
    if flags & {"O_DIRECTORY", "O_TRUNC", "O_PATH"}:
        return False
    return not ("O_WRONLY" in flags and "O_RDWR" not in flags)


def extract(
    records: Iterable[Syscall | Exit | Unreadable],
    root: str,
    cwd: str,
    *,
    first_handle: int = 0,
) -> Timeline:
    """The timeline of one traced process tree whose files live under ``root``."""
    extractor = _Extractor(root, cwd, first_handle)
    status: int | None = None
    killed: str | None = None
    for record in records:
        if isinstance(record, Exit):
            status, killed = record.status, record.signal
            continue
        if isinstance(record, Unreadable):
            extractor.unreadable(record)
            continue
        extractor.feed(record)
    return Timeline(
        tuple(extractor.ops),
        tuple(extractor.acks),
        tuple(extractor.findings),
        tuple(extractor.mutating),
        status,
        killed,
        frozenset(extractor.read),
    )
