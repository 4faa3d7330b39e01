"""From a process's system calls to the file operations under its root, with the moments its
responses left it.

:func:`extract` follows what the kernel would: descriptors (``open``, ``dup``, ``fcntl
F_DUPFD``, ``close``) bound to the file they were opened on, each descriptor's offset (moved by
``read``, ``write``, ``lseek``; ``O_APPEND`` writes at the end), the working directory
(``chdir``) for relative paths and ``*at`` directories, and turns every call that changes a
file or a directory under the root into a :class:`~.persistence.FileOp`.  Failed calls change
nothing and are left out.

A response of the process protocol is a line ``{"id": N, "ok"|"error": ...}`` written to a pipe;
each one becomes an :class:`Ack` at its place among the operations (CRASH-SYS-2).  What the run
cannot see or should not do becomes a :class:`Finding`: a shared writable ``mmap`` of a file
under the root (CRASH-SYS-8), a file changed outside the root (CRASH-SYS-4).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Literal

import attrs
import orjson

from scopecheck.crashsim.persistence import FileOp
from scopecheck.crashsim.strace import Exit, Fd, Syscall

#: Paths outside the root that a backend may touch without it being reported.
QUIET_PREFIXES = ("/dev/", "/proc/", "/sys/")


@attrs.frozen
class Ack:
    """The response to request ``request_id`` was written after the first ``ops`` operations."""

    ops: int
    request_id: int
    call: int


@attrs.frozen
class Finding:
    kind: Literal["mmap", "outside"]
    call: int
    text: str


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


@attrs.define
class _Open:
    path: str  # absolute
    handle: int
    offset: int = 0
    append: bool = False
    directory: bool = False
    under_root: bool = False


def _flags(value: Any) -> set[str]:
    return set(str(value).split("|")) if isinstance(value, str) else set()


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
                Finding("outside", self.call, f"{what} {path}, outside the root {self.root}")
            )

    def _emit(self, op: FileOp, name: str, pid: int) -> None:
        self.ops.append(attrs.evolve(op, call=self.call))
        if op.mutating:
            key = (pid, name)
            self.mutating.append((self.call, name, self.ordinals.get(key, 0)))

    def _fd(self, value: Any) -> _Open | None:
        number = value.number if isinstance(value, Fd) else value
        return self.fds.get(number) if isinstance(number, int) else None

    # -- calls -----------------------------------------------------------------------------

    def feed(self, call: Syscall) -> None:
        self.call = call.index
        key = (call.pid, call.name)
        try:
            if call.ok:
                getattr(self, f"_{call.name}", self._ignore)(call)
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
        self.handle += 1
        entry = _Open(
            path,
            self.handle,
            append="O_APPEND" in flags,
            directory="O_DIRECTORY" in flags,
            under_root=relative is not None,
        )
        self.fds[number] = entry
        if relative is None:
            if writable:
                self._outside(path, "opened for writing")
            return
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

    def _data(self, call: Syscall, entry: _Open, data: bytes, offset: int | None) -> None:
        written = call.result if isinstance(call.result, int) else len(data)
        data = data[:written]
        if entry.under_root:
            at = (
                None
                if entry.append and offset is None
                else (entry.offset if offset is None else offset)
            )
            self._emit(
                FileOp(
                    "write",
                    self._relative(entry.path) or "",
                    handle=entry.handle,
                    offset=at,
                    data=data,
                ),
                call.name,
                call.pid,
            )
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

    _pwritev2 = _pwritev

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

    def _sync(self, call: Syscall) -> None:
        self._emit(FileOp("syncall"), call.name, call.pid)

    _syncfs = _sync

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

    def _mmap(self, call: Syscall) -> None:
        a = call.args
        if len(a) < 5:
            return
        entry = self._fd(a[4])
        if (
            entry is not None
            and entry.under_root
            and "PROT_WRITE" in _flags(a[2])
            and "MAP_SHARED" in _flags(a[3])
        ):
            self.findings.append(
                Finding(
                    "mmap",
                    call.index,
                    f"{entry.path} is mapped shared and writable: writes through the mapping "
                    "are not system calls, so the trace cannot see them",
                )
            )


def extract(
    records: Iterable[Syscall | Exit], root: str, cwd: str, *, first_handle: int = 0
) -> Timeline:
    """The timeline of one traced process tree whose files live under ``root``."""
    extractor = _Extractor(root, cwd, first_handle)
    status: int | None = None
    killed: str | None = None
    for record in records:
        if isinstance(record, Exit):
            status, killed = record.status, record.signal
            continue
        extractor.feed(record)
    return Timeline(
        tuple(extractor.ops),
        tuple(extractor.acks),
        tuple(extractor.findings),
        tuple(extractor.mutating),
        status,
        killed,
    )
