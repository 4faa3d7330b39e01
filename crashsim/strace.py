"""Recording a process's system calls with strace, and reading the record back.

The syscall source of the crash core: any child -- a Python factory behind ``scopecheck serve``,
a Node.js or Go backend -- runs under ``strace -f`` and every call that can change a file, or
tells where a file offset is, is written to a trace file with its data in hex (``-xx``), the
path behind every descriptor (``-y``) and reads without their data (``-e raw=read``).
:func:`parse` turns that file into :class:`Syscall` records, joining the halves strace prints
for a call interrupted by another thread (``<unfinished ...>`` / ``<... resumed>``), in time
linear in its size; a line it cannot read is an :class:`Unreadable` record where it stands,
never skipped (CRASH-SYS-16).

What the trace cannot see is said, never skipped: a shared writable ``mmap`` of a data file
(writes through it are memory stores, not system calls), or one made writable by ``mprotect``
or synced by ``msync``, is found by :mod:`.syscall_ops` and reported as a limit of the run
(CRASH-SYS-8, CRASH-SYS-13).
"""

from __future__ import annotations

import os
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


# -- reading the record -------------------------------------------------------------------------
#
# Each line is read once from the left (its arguments) and once from the right (its result),
# with ``str.find``, slices and loops over stretches of the line never visited twice: no regular
# expression, so no line makes the reader backtrack, and a trace is read in time linear in its
# size (CRASH-SYS-16).  A line the reader cannot read -- cut, two lines run together, an unknown
# syntax, a call whose start or end is missing -- becomes an :class:`Unreadable` record where it
# stands, and the next line is read as if it were the first.

#: Characters of a line an :class:`Unreadable` keeps (its ``excerpt``).
EXCERPT = 100
#: Arrays and structs nest at most this deep (strace's own nest a few levels).
MAX_DEPTH = 32
#: The longest number read: strace prints 64-bit values (20 digits, or ``0x`` and 16).
MAX_NUMBER = 24
#: The longest process id, call name or errno name read.
MAX_NAME = 64

_NAME = frozenset("abcdefghijklmnopqrstuvwxyz_0123456789")
_ERRNO = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_LOWER_HEX = frozenset("0123456789abcdef")
_DIGITS = frozenset("0123456789")
_UNFINISHED = "<unfinished ...>"
#: What ends the line of a call whose thread strace lost (it died) during it.
_DETACHED = " <detached ...>"
#: Calls that change no file: one whose thread died in it is no call the model misses.
_READS = frozenset({"read", "pread64", "readv", "preadv", "preadv2"})
#: What ``-y`` prints after the path of a descriptor whose file was removed.
_DELETED = "(deleted)"
#: What ends a value (a word runs to the first of them).
_SEPARATORS = " ,]}"
#: ``str.translate`` table marking separators with NUL (and a NUL with something else).
_MARKS = str.maketrans({"\0": "\1", **dict.fromkeys(_SEPARATORS, "\0")})
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"'}

Record = Syscall | Exit | Unreadable


class _Cannot(Exception):
    """Why a line cannot be read (raised and caught inside the reader)."""


@attrs.frozen
class _Started:
    """A call printed ``<unfinished ...>``, waiting for its ``<... resumed>`` half: ``head``
    its arguments so far, ``at`` how many records came before it, ``order`` its place among
    the starts (from 1)."""

    name: str
    head: str
    at: int
    order: int
    excerpt: str


def parse(lines: Iterable[str]) -> list[Record]:
    """The calls and exits of a trace, in the order they completed, and an :class:`Unreadable`
    where a line could not be read (CRASH-SYS-16); a line may keep its newline or not."""
    reader = _Reader()
    for line in lines:
        reader.line(line)
    return reader.records()


def read_trace(path: str) -> list[Record]:
    """:func:`parse` of a trace file; a last line without the newline strace ends every line
    with was cut (strace stopped mid-line) and is unreadable, not read as it stands."""
    reader = _Reader()
    with open(path, "rb") as handle:  # lines end at b"\n" only: the record is ASCII, data hex
        for raw in handle:
            line = raw.decode("latin-1")
            if line.endswith("\n"):
                reader.line(line)
            else:
                reader.unreadable(line, "the trace ends in the middle of this line")
    return reader.records()


class _Reader:
    """The records read so far, and the calls each thread has started and not finished.  A
    call whose end never comes, or whose two halves do not read, is reported where it started:
    ``late`` holds those, each with its start's ``order`` and how many records came before it
    (``at``, which grows with ``order``), merged in when the trace ends."""

    def __init__(self) -> None:
        self.found: list[Record] = []
        self.pending: dict[int, _Started] = {}
        self.late: list[tuple[int, int, Unreadable]] = []
        self.starts = 0

    def records(self) -> list[Record]:
        for pid in list(self.pending):
            self._lost(pid, "the trace ends before the call does")
        if not self.late:
            return self.found
        by_order: list[tuple[int, Unreadable] | None] = [None] * (self.starts + 1)
        for order, at, record in self.late:  # in start order, so by ``at`` too: no sort
            by_order[order] = (at, record)
        queue = [late for late in by_order if late is not None]
        merged: list[Record] = []
        q = 0
        for at in range(len(self.found) + 1):
            while q < len(queue) and queue[q][0] == at:
                merged.append(attrs.evolve(queue[q][1], index=len(merged)))
                q += 1
            if at < len(self.found):
                merged.append(attrs.evolve(self.found[at], index=len(merged)))
        return merged

    def unreadable(self, line: str, reason: str) -> None:
        pid, name = _who(line)
        self.found.append(Unreadable(len(self.found), pid, name, reason, _excerpt(line)))

    def _lost(self, pid: int, reason: str, started: _Started | None = None) -> None:
        """The call ``pid`` started will not be finished: unreadable where it started."""
        if started is None:
            started = self.pending.pop(pid)
        record = Unreadable(-1, pid, started.name, reason, started.excerpt)
        self.late.append((started.order, started.at, record))

    def line(self, raw: str) -> None:
        text = raw.rstrip()
        if not text:
            return
        pid, i = _pid(text)
        if pid is None:
            self.unreadable(text, "no process id: a piece of a line cut in two")
            return
        if text.startswith("+++ ", i):
            self._exit(pid, text, i)
        elif text.startswith("--- ", i):  # a signal: not a call
            if not text.endswith(" ---"):
                self.unreadable(text, "a signal line cut short")
        elif text.startswith("<... ", i):
            self._resumed(pid, text, i + 5)
        elif text.endswith(_DETACHED):  # strace lost the thread in a call: it died there
            if pid in self.pending:
                self._lost(pid, "the thread made another call before this one's end")
            # ``???``: strace could not read which call a thread entered, its registers gone
            # as it died (killed at the call's entry, which it never ran): no call to read.
            # A read changes no file, and strace detaches only from a thread that is gone as
            # its process ends (Go's idle threads die in ``read`` with arguments of another
            # call): nothing after it uses the offset it may have moved.
            j = _span(text, i, _NAME)
            if not text.startswith("???(", i) and text[i:j] not in _READS:
                self.unreadable(text, "strace lost the thread during the call")
        else:
            j = _span(text, i, _NAME)
            if j == i or j - i > MAX_NAME or not text.startswith("(", j):
                self.unreadable(text, "not a call strace prints")
            elif text.endswith(_UNFINISHED):
                if pid in self.pending:
                    self._lost(pid, "the thread made another call before this one's end")
                head = text[j + 1 : -len(_UNFINISHED)]
                self.starts += 1
                self.pending[pid] = _Started(
                    text[i:j], head, len(self.found), self.starts, _excerpt(text)
                )
            else:
                if pid in self.pending:
                    self._lost(pid, "the thread made another call before this one's end")
                self._call(pid, text[i:j], text, j + 1, None)

    def _exit(self, pid: int, text: str, i: int) -> None:
        if not text.endswith(" +++") or len(text) < i + 8:
            self.unreadable(text, "an exit line cut short")
            return
        said = text[i + 4 : -4]
        status: int | None = None
        signal: str | None = None
        if said.startswith("exited with "):
            status = _decimal(said[len("exited with ") :])
            if status is None:
                self.unreadable(text, "an exit status that is not a number")
                return
        elif said.startswith("killed by "):
            signal = said[len("killed by ") :].split(" ", 1)[0]
        if pid in self.pending:
            self._lost(pid, "the process ended before the call did")
        self.found.append(Exit(len(self.found), pid, status, signal))

    def _resumed(self, pid: int, text: str, i: int) -> None:
        j = _span(text, i, _NAME)
        if j == i or j - i > MAX_NAME or not text.startswith(" resumed>", j):
            self.unreadable(text, "a resumed call cut short")
            return
        name = text[i:j]
        started = self.pending.get(pid)
        if started is None or started.name != name:
            if started is not None:
                self._lost(pid, f"the thread's next line resumes {name}, not this call")
            self.unreadable(text, "a resumed call whose start is not in the trace")
            return
        del self.pending[pid]
        body = text[j + len(" resumed>") :]
        if body.startswith(" " + _UNFINISHED):  # the thread ended during the call (strace 6)
            body = body[len(_UNFINISHED) + 1 :]
        self._call(pid, name, started.head + body, 0, started)

    def _call(self, pid: int, name: str, text: str, start: int, started: _Started | None) -> None:
        """The call whose arguments start at ``text[start]``; ``started`` is its first half."""
        try:
            end, result, error, injected = _result(text, start)
            args = tuple(_Args(text, start, end).items())
        except _Cannot as why:
            if started is None:
                self.unreadable(text, str(why))
            else:  # reported where the call started
                self._lost(pid, str(why), started)
            return
        self.found.append(Syscall(len(self.found), pid, name, args, result, error, injected))


def _span(text: str, i: int, chars: frozenset[str]) -> int:
    """The end of the run of ``chars`` starting at ``text[i]``."""
    n = len(text)
    while i < n and text[i] in chars:
        i += 1
    return i


def _decimal(text: str) -> int | None:
    """``text`` as a decimal number (``-`` allowed), or ``None``."""
    digits = text[1:] if text.startswith("-") else text
    if 0 < len(digits) <= MAX_NUMBER and digits.isascii() and digits.isdigit():
        return int(text)
    return None


def _pid(text: str) -> tuple[int | None, int]:
    """The process id a line starts with and where what follows it starts."""
    space = text.find(" ", 0, MAX_NAME)
    if space <= 0 or not (text[:space].isascii() and text[:space].isdigit()):
        return None, 0
    i = space
    while text.startswith(" ", i):
        i += 1
    return int(text[:space]), i


def _who(text: str) -> tuple[int | None, str | None]:
    """The process id and call name a line shows, as far as it shows them."""
    pid, i = _pid(text)
    if pid is None:
        return None, None
    resumed = text.startswith("<... ", i)
    if resumed:
        i += 5
    j = _span(text, i, _NAME)
    if j == i or j - i > MAX_NAME or not text.startswith(" resumed>" if resumed else "(", j):
        return pid, None
    return pid, text[i:j]


def _excerpt(text: str) -> str:
    """The start of a line, printable."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:EXCERPT].rstrip("\n"))


def _result(text: str, start: int) -> tuple[int, Any, str | None, bool]:
    """Where the arguments of the call at ``text[start:]`` end, and its result, error name and
    whether strace injected it: ``) = VALUE[<path>][ ERRNO (text)][ (note)]...`` read from the
    line's end (the last `` = `` of a line is its result's: strings and paths are hex)."""
    equals = text.rfind(" = ", start)
    if equals < 0:
        raise _Cannot("no result: the line ends before the call does")
    close = equals
    while close > start and text[close - 1] == " ":  # strace pads short lines to a column
        close -= 1
    if close <= start or text[close - 1] != ")":
        raise _Cannot("no closing parenthesis before the result")
    n = len(text)
    i = equals + 3
    result: Any
    if text.startswith("?", i):
        result, i = None, i + 1
    else:
        if text.startswith("0x", i):
            k, base = _span(text, i + 2, _LOWER_HEX), 16
            empty = k == i + 2
        else:
            j = i + 1 if text.startswith("-", i) else i
            k, base = _span(text, j, _DIGITS), 10
            empty = k == j
        if empty or k - i > MAX_NUMBER:
            raise _Cannot("a result that is not a number")
        result, i = int(text[i:k], base), k
        if text.startswith("<", i):
            greater = text.find(">", i + 1)
            if greater < 0:
                raise _Cannot("a descriptor's path cut short")
            result = Fd(result, _path(text[i + 1 : greater]))
            i = greater + 1
            if text.startswith(_DELETED, i):
                i += len(_DELETED)
    error: str | None = None
    if text.startswith(" E", i):
        k = _span(text, i + 1, _ERRNO)
        if k - i > MAX_NAME:
            raise _Cannot("an error name longer than any")
        error, i = text[i + 1 : k], k
    notes: list[str] = []
    while i < n:
        if not text.startswith(" (", i):
            raise _Cannot("unexpected text after the result")
        end = text.find(")", i + 2)
        if end < 0 or text.find("(", i + 2, end) >= 0:
            raise _Cannot("a note after the result cut short")
        notes.append(text[i + 2 : end])
        i = end + 1
    if error is not None and not notes:
        raise _Cannot("an error without its description")
    return close - 1, result, error, bool(notes) and notes[-1] == "INJECTED"


def _path(text: str) -> str:
    """A descriptor's path as ``-y`` shows it, as the file system names it."""
    return _unhex(text).decode("utf-8", "surrogateescape")


def _unhex(text: str) -> bytes:
    """The bytes of a string body: every byte ``\\xNN`` under ``-xx`` (read in C: a large
    write's data is long), else a few escapes and plain characters."""
    n, odd = divmod(len(text), 4)
    if not odd and text[0::4] == "\\" * n and text[1::4] == "x" * n:
        try:
            data = bytes.fromhex(text.replace("\\x", ""))
        except ValueError:
            data = b""
        if len(data) == n:
            return data
    out = bytearray()
    i = 0
    try:
        while i < len(text):
            if text.startswith("\\x", i):
                digits = text[i + 2 : i + 4]
                if len(digits) != 2 or not (digits[0] in _HEX and digits[1] in _HEX):
                    raise _Cannot("a bad \\x escape")
                out.append(int(digits, 16))
                i += 4
            elif text.startswith("\\", i) and i + 1 < len(text):
                out += _ESCAPES.get(text[i + 1], text[i + 1].encode())
                i += 2
            else:
                out += text[i].encode("latin-1")
                i += 1
    except UnicodeEncodeError:
        raise _Cannot("a character strace never prints") from None
    return bytes(out)


class _Args:
    """A reader of strace's argument syntax over ``text[start:end]``: strings, descriptors
    with their paths, numbers, words (flags), arrays and structs, ``/* comments */``.

    Every search stops at what is read next -- a word's end, a string's closing quote, a
    path's ``>``, a comment's end -- or fails and ends the line: no stretch of the line is
    searched twice, so reading is linear in its length however the line is made.  A word ends
    at the first separator, found in one search of ``marks``, the line with every separator
    made a NUL (and every NUL something else)."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text = text
        self.marks = text.translate(_MARKS)
        self.i = start
        self.end = end
        self.parens = 0

    def _until(self, what: str, start: int) -> int:
        """Where the next ``what`` at or after ``start`` is, before the end (``-1``: none)."""
        return self.text.find(what, start, self.end)

    def items(self) -> list[Any]:
        found: list[Any] = []
        self._space()
        while self.i < self.end:
            found.append(self._value(0))
            self._space()
            if self.text.startswith(",", self.i, self.end):
                self.i += 1
                self._space()
        if self.parens:
            raise _Cannot("unbalanced parentheses: pieces of two lines?")
        return found

    def _space(self) -> None:
        text = self.text
        while self.i < self.end:
            if text[self.i] == " ":
                self.i += 1
            elif text.startswith("/*", self.i, self.end):
                close = self._until("*/", self.i + 2)
                if close < 0:
                    raise _Cannot("a comment cut short")
                self.i = close + 2
            else:
                return

    def _separated(self) -> None:
        """What follows a value is a separator, or the end."""
        if self.i < self.end and self.text[self.i] not in _SEPARATORS:
            raise _Cannot("text right after a value: pieces of two lines?")

    def _value(self, depth: int) -> Any:
        c = self.text[self.i]
        if c == '"':
            return self._string()
        if c in "[{":
            return self._container(c, depth)
        if c in "]})<>":
            raise _Cannot(f"an unexpected {c!r}")
        return self._word()

    def _string(self) -> bytes:
        text = self.text
        start = self.i + 1
        quote = self._until('"', start)
        while True:
            if quote < 0:
                raise _Cannot("a string cut short (no closing quote)")
            before = quote
            while before > start and text[before - 1] == "\\":
                before -= 1
            if (quote - before) % 2 == 0:  # not an escaped quote
                break
            quote = self._until('"', quote + 1)
        self.i = quote + 1
        if text.startswith("...", self.i, self.end):  # longer than -s: not the case here
            self.i += 3
        self._separated()
        return _unhex(text[start:quote])

    def _container(self, opening: str, depth: int) -> Any:
        if depth >= MAX_DEPTH:
            raise _Cannot("arrays or structs nested deeper than strace prints")
        closing = "]" if opening == "[" else "}"
        text = self.text
        self.i += 1
        items: list[Any] = []
        named: dict[str, Any] = {}
        while True:
            self._space()
            if self.i >= self.end:
                raise _Cannot(f"a {opening!r} never closed: the line was cut")
            c = text[self.i]
            if c == closing:
                self.i += 1
                break
            key = self._key()
            if self.i >= self.end:
                raise _Cannot(f"a {opening!r} never closed: the line was cut")
            if key is None:
                items.append(self._value(depth + 1))
            else:
                named[key] = self._value(depth + 1)
            self._space()
            if text.startswith(",", self.i, self.end):
                self.i += 1
        self._separated()
        return named if closing == "}" and named else items

    def _key(self) -> str | None:
        """A struct field's ``name=`` at the position (consumed), or ``None``."""
        text, i = self.text, self.i
        if i >= self.end or not ("a" <= text[i] <= "z" or text[i] == "_"):
            return None
        j = _span(text, i, _NAME)
        if j >= self.end or text[j] != "=":
            return None
        self.i = j + 1
        return text[i:j]

    def _word(self) -> Any:
        """A number, a flag word, or a descriptor ``N<path>`` (``AT_FDCWD<path>``)."""
        text, i = self.text, self.i
        end = self.marks.find("\0", i, self.end)
        if end < 0:
            end = self.end
        less = text.find("<", i, end)
        if less >= 0:
            number = text[i:less]
            fd = -100 if number == "AT_FDCWD" else _decimal(number)
            if fd is None:
                raise _Cannot("a '<' outside a descriptor: pieces of two lines?")
            greater = self._until(">", less + 1)
            if greater < 0:
                raise _Cannot("a descriptor's path cut short")
            if text.find("<", less + 1, greater) >= 0 or text.find('"', less + 1, greater) >= 0:
                raise _Cannot("a descriptor's path run into another line")
            self.i = greater + 1
            if text.startswith(_DELETED, self.i, self.end):
                self.i += len(_DELETED)
            self._separated()
            return Fd(fd, _path(text[less + 1 : greater]))
        if end == i:
            raise _Cannot("an empty value")
        word = text[i:end]
        if '"' in word or ">" in word:
            raise _Cannot("a quote or '>' inside a word: pieces of two lines?")
        self.parens += word.count("(") - word.count(")")
        if self.parens < 0:
            raise _Cannot("unbalanced parentheses: pieces of two lines?")
        self.i = end
        return _number(word)


def _number(word: str) -> Any:
    """A word as strace means it: decimal, octal (a leading 0) or hex, else the word."""
    digits = word[1:] if word.startswith("-") else word
    if digits and digits.isascii() and digits.isdigit():
        if len(word) > MAX_NUMBER:
            raise _Cannot("a number longer than strace prints")
        if len(word) > 1 and word.startswith("0"):
            try:
                return int(word, 8)
            except ValueError:
                raise _Cannot(f"a bad octal number {word!r}") from None
        return int(word)
    if word.startswith("0x") and len(word) > 2 and not word[2:].strip("0123456789abcdef"):
        if len(word) > MAX_NUMBER:
            raise _Cannot("a number longer than strace prints")
        return int(word, 16)
    return word
