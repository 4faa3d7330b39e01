"""Recording a process's system calls with strace, and reading the record back.

The syscall source of the crash core: any child -- a Python factory behind ``scopecheck serve``,
a Node.js or Go backend -- runs under ``strace -f`` and every call that can change a file, or
tells where a file offset is, is written to a trace file with its data in hex (``-xx``), the
path behind every descriptor (``-y``) and reads without their data (``-e raw=read``).
:func:`parse` turns that file into :class:`Syscall` records, joining the halves strace prints
for a call interrupted by another thread (``<unfinished ...>`` / ``<... resumed>``).

What the trace cannot see is said, never skipped: a shared writable ``mmap`` of a data file
(writes through it are memory stores, not system calls), or one made writable by ``mprotect``
or synced by ``msync``, is found by :mod:`.syscall_ops` and reported as a limit of the run
(CRASH-SYS-8, CRASH-SYS-13).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

#: Every call the crash core reads: file-mutating calls, the calls that move a file offset or
#: name a descriptor, and ``mmap``, ``mprotect``, ``munmap``, ``msync`` (shared file mappings
#: are followed by address to report them as a limit, CRASH-SYS-8, CRASH-SYS-13).
TRACED = (
    "open", "openat", "openat2", "creat", "close", "dup", "dup2", "dup3", "fcntl",
    "write", "pwrite64", "writev", "pwritev", "pwritev2", "read", "pread64", "readv", "preadv",
    "lseek", "ftruncate", "truncate", "fallocate",
    "fsync", "fdatasync", "sync_file_range", "sync", "syncfs",
    "rename", "renameat", "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "chdir", "fchdir", "mmap", "mprotect", "munmap",
    "msync",
)  # fmt: skip
#: Calls whose data argument is not wanted (reads): printed raw, so a large read costs nothing.
RAW = ("read", "pread64", "readv", "preadv")
#: Largest string strace prints whole (a write's data): 64 MiB.
MAX_STRING = 1 << 26


def strace_command(
    trace_file: str, command: Sequence[str], *, inject: Sequence[str] = ()
) -> list[str]:
    """The command that runs ``command`` under strace, writing the record to ``trace_file``;
    ``inject`` are ``-e inject=...`` expressions (a fault or a kill at one call)."""
    extra = [part for spec in inject for part in ("-e", f"inject={spec}")]
    return [
        "strace", "-f", "-qq", "--seccomp-bpf", "-o", trace_file, "-s", str(MAX_STRING), "-xx",
        "-y", "-e", f"raw={','.join(RAW)}", "-e", f"trace={','.join(TRACED)}", *extra, "--",
        *command,
    ]  # fmt: skip


def unavailable() -> str | None:
    """Why strace cannot run here (not installed, or ptrace not permitted), or ``None``."""
    if shutil.which("strace") is None:
        return "strace is not installed (Debian: apt-get install strace)"
    try:
        done = subprocess.run(
            ["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=write", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"strace cannot run: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"strace cannot trace a process here (ptrace not permitted?): {why}"
    return None


# -- the record -------------------------------------------------------------------------------


@attrs.frozen
class Fd:
    """A descriptor argument or result: its number and the path strace showed for it."""

    number: int
    path: str | None


@attrs.frozen
class Syscall:
    """One completed call: ``args`` parsed (strings as ``bytes``, descriptors as :class:`Fd`,
    numbers as ``int``, flags as ``str``, arrays and structs as lists and dicts)."""

    index: int
    pid: int
    name: str
    args: tuple[Any, ...]
    result: Any
    error: str | None = None
    injected: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@attrs.frozen
class Exit:
    """A traced process ended: ``status`` for an exit, ``signal`` for a kill."""

    index: int
    pid: int
    status: int | None
    signal: str | None


@attrs.frozen
class Unreadable:
    """A line of the trace the reader could not read (cut, interleaved, an unknown syntax):
    ``name`` is the call it names when the line shows one, ``reason`` why it could not be read,
    ``excerpt`` its start, for the limit a run reports (CRASH-SYS-16)."""

    index: int
    pid: int | None
    name: str | None
    reason: str
    excerpt: str


_LINE = re.compile(r"^(?P<pid>\d+) +(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>[a-z_0-9]+)\((?P<body>.*)$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>[a-z_0-9]+) resumed>(?P<body>.*)$")
_RESULT = re.compile(
    r"\)\s+= (?P<result>-?\d+|0x[0-9a-f]+|\?)(?:<(?P<path>[^>]*)>)?"
    r"(?: (?P<errno>E[A-Z0-9]+) \([^)]*\))?(?P<injected> \(INJECTED\))?\s*$"
)


def parse(lines: Iterable[str]) -> list[Syscall | Exit | Unreadable]:
    """The calls and exits of a trace, in the order they completed."""
    found: list[Syscall | Exit | Unreadable] = []
    pending: dict[int, tuple[str, str]] = {}
    for raw in lines:
        match = _LINE.match(raw.rstrip("\n"))
        if match is None:
            continue
        pid, rest = int(match["pid"]), match["rest"]
        if rest.startswith("+++"):
            killed = re.match(r"\+\+\+ killed by (\S+)", rest)
            exited = re.match(r"\+\+\+ exited with (\d+)", rest)
            found.append(
                Exit(
                    len(found),
                    pid,
                    int(exited[1]) if exited else None,
                    killed[1] if killed else None,
                )
            )
            continue
        if rest.startswith("---"):
            continue
        resumed = _RESUMED.match(rest)
        if resumed is not None:
            name, head = pending.pop(pid, (resumed["name"], ""))
            rest = f"{name}({head}{resumed['body']}"
        elif rest.endswith("<unfinished ...>"):
            call = _CALL.match(rest)
            if call is not None:
                pending[pid] = (call["name"], call["body"].removesuffix("<unfinished ...>"))
            continue
        call = _CALL.match(rest)
        if call is None:
            continue
        done = _RESULT.search(call["body"])
        if done is None:
            continue
        body = call["body"][: done.start()]
        result: Any = done["result"]
        if result == "?":
            result = None
        else:
            result = int(result, 16) if result.startswith("0x") else int(result)
            if done["path"] is not None:
                result = Fd(result, _unhex(done["path"]).decode("utf-8", "surrogateescape"))
        found.append(
            Syscall(
                len(found),
                pid,
                call["name"],
                tuple(_Args(body).items()),
                result,
                done["errno"],
                bool(done["injected"]),
            )
        )
    return found


def read_trace(path: str) -> list[Syscall | Exit | Unreadable]:
    with open(path, encoding="latin-1") as handle:  # the record is ASCII: data is hex
        return parse(handle)


# -- arguments ----------------------------------------------------------------------------------


#: A ``-xx`` string body that is hex escapes only (what strace prints for every byte).
_ALL_HEX = re.compile(r"(?:\\x[0-9a-fA-F]{2})*")
#: A quoted string argument, escapes included.
_QUOTED = re.compile(r'"((?:[^"\\]+|\\.)*)"')
_KEY = re.compile(r"([a-z_][a-z_0-9]*)=")
_FD = re.compile(r"(-?\d+|AT_FDCWD)<([^>]*)>")
_WORD = re.compile(r"[^,\]} ]+")


def _unhex(text: str) -> bytes:
    """The bytes of a ``-xx`` string body (every byte ``\\xNN``; a few escapes otherwise)."""
    if _ALL_HEX.fullmatch(text):  # the common case, in C: a large write's data is long
        return bytes.fromhex(text.replace("\\x", ""))
    out = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\x", i):
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        elif text.startswith("\\", i) and i + 1 < len(text):
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"'}.get(
                text[i + 1], text[i + 1].encode()
            )
            i += 2
        else:
            out += text[i].encode("latin-1")
            i += 1
    return bytes(out)


class _Args:
    """A small reader of strace's argument syntax."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def items(self) -> list[Any]:
        found: list[Any] = []
        while True:
            self._space()
            if self.i >= len(self.text):
                return found
            found.append(self._value())
            self._space()
            if self.text.startswith(",", self.i):
                self.i += 1

    def _space(self) -> None:
        while self.i < len(self.text):
            if self.text[self.i] == " ":
                self.i += 1
            elif self.text.startswith("/*", self.i):
                end = self.text.find("*/", self.i)
                self.i = len(self.text) if end < 0 else end + 2
            else:
                return

    def _value(self) -> Any:
        text, i = self.text, self.i
        if text.startswith('"', i):
            quoted = _QUOTED.match(text, i)
            if quoted is None:
                raise ValueError(f"an unterminated string in {text!r}")
            self.i = quoted.end()
            if text.startswith("...", self.i):
                self.i += 3
            return _unhex(quoted[1])
        if text.startswith("[", i) or text.startswith("{", i):
            close = "]" if text[i] == "[" else "}"
            self.i += 1
            items: list[Any] = []
            named: dict[str, Any] = {}
            while True:
                self._space()
                if text.startswith(close, self.i):
                    self.i += 1
                    break
                key = _KEY.match(text, self.i)
                if key:
                    self.i += len(key[0])
                    named[key[1]] = self._value()
                else:
                    items.append(self._value())
                self._space()
                if text.startswith(",", self.i):
                    self.i += 1
            return named if close == "}" and named else items
        fd = _FD.match(text, i)
        if fd:  # a descriptor and what it names (a hex path, or ``pipe:[N]``)
            self.i += len(fd[0])
            number = -100 if fd[1] == "AT_FDCWD" else int(fd[1])
            return Fd(number, _unhex(fd[2]).decode("utf-8", "surrogateescape"))
        match = _WORD.match(text, i)
        token = match[0] if match else text[i]
        self.i += len(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token, 8) if len(token) > 1 and token.startswith("0") else int(token)
        if re.fullmatch(r"0x[0-9a-f]+", token):
            return int(token, 16)
        return token
