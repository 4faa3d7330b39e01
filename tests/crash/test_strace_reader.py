"""The strace reader on any input (CRASH-SYS-16).

Generated traces -- every call the reader knows, long hex strings, descriptors with their paths,
arrays and structs, errors, injected faults, calls split into ``<unfinished ...>`` and
``<... resumed>`` halves across threads -- are read as strace meant them; every line is read
exactly as it is read alone, whatever cut or interleaved lines surround it, and none is skipped
in silence; and the reader's work grows linearly with its input, counted, never timed: the
Python steps it takes (every line it runs, under ``sys.settrace``), with no regular expression
anywhere (its searches in C stop at what they read)."""

from __future__ import annotations

import ast
import string
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scopecheck.crashsim import strace
from scopecheck.crashsim.strace import (
    TRACED,
    Exit,
    Fd,
    Syscall,
    Unreadable,
    parse,
    read_trace,
)
from scopecheck.crashsim.syscall_ops import extract

DATA = Path(__file__).parent.parent / "data" / "traces"

# -- what strace prints, generated with what it means --------------------------------------------


def hexed(data: bytes) -> str:
    """``data`` as ``-xx`` prints it: every byte ``\\xNN``."""
    digits = data.hex()
    return "".join("\\x" + digits[i : i + 2] for i in range(0, len(digits), 2))


@attrs.frozen
class Arg:
    """An argument as strace prints it, and what the reader must make of it."""

    text: str
    value: Any


@attrs.frozen
class Call:
    """A call strace prints: its thread, name, arguments and result (text and meaning)."""

    pid: int
    name: str
    args: tuple[Arg, ...]
    result: str
    value: Any
    error: str | None = None
    injected: bool = False

    def args_text(self, args: Sequence[Arg] | None = None) -> str:
        return ", ".join(a.text for a in (self.args if args is None else args))

    def line(self, pad: int = 0) -> str:
        return f"{self.pid} {self.name}({self.args_text()})" + " " * (1 + pad) + f"= {self.result}"

    def record(self, args: Sequence[Arg] | None = None) -> Syscall:
        values = tuple(a.value for a in (self.args if args is None else args))
        return Syscall(0, self.pid, self.name, values, self.value, self.error, self.injected)


DATA_BYTES = st.one_of(
    st.binary(max_size=48),
    # long hex strings: a database page and more
    st.builds(lambda piece, times: piece * times, st.binary(min_size=1, max_size=8), st.integers(1, 2500)),  # noqa: E501
)  # fmt: skip
PATHS = st.one_of(
    st.binary(min_size=1, max_size=24),
    st.text(min_size=1, max_size=12).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.integers(0, 10**6).map(lambda n: f"pipe:[{n}]".encode()),
)
FLAGS = st.lists(
    st.sampled_from(
        ["O_RDONLY", "O_WRONLY", "O_CREAT", "O_CLOEXEC", "MAP_SHARED", "PROT_READ", "SEEK_SET",
         "F_GETFL", "AT_REMOVEDIR", "RENAME_NOREPLACE", "NULL", "MAP_SHARED_VALIDATE|0x80000",
         "S_IFREG"]
    ),
    min_size=1,
    max_size=3,
).map("|".join)  # fmt: skip


def _path(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _number(n: int, how: str) -> Arg:
    if how == "hex":
        return Arg(hex(n), n)
    if how == "octal" and n > 0:
        return Arg("0" + format(n, "o"), n)
    return Arg(str(n), n)


SCALARS = st.one_of(
    st.builds(
        lambda data, cut: Arg(f'"{hexed(data)}"' + ("..." if cut else ""), data),
        DATA_BYTES, st.booleans(),
    ),
    st.builds(
        lambda n, path, deleted: Arg(f"{n}<{hexed(path)}>" + ("(deleted)" if deleted else ""),
                                     Fd(n, _path(path))),
        st.integers(0, 2**20), PATHS, st.booleans(),
    ),
    st.builds(lambda path: Arg(f"AT_FDCWD<{hexed(path)}>", Fd(-100, _path(path))), PATHS),
    st.builds(_number, st.integers(-(2**63), 2**64), st.just("decimal")),
    st.builds(_number, st.integers(0, 2**64), st.sampled_from(["hex", "octal"])),
    FLAGS.map(lambda flags: Arg(flags, flags)),
)  # fmt: skip
KEYS = st.sampled_from(["iov_base", "iov_len", "l_type", "l_start", "st_mode", "flags", "resolve"])


def _array(items: list[Arg], comment: bool) -> Arg:
    said = f" /* {len(items)} entries */" if comment else ""
    return Arg("[" + ", ".join(a.text for a in items) + "]" + said, [a.value for a in items])


def _struct(fields: list[tuple[str, Arg]]) -> Arg:
    text = "{" + ", ".join(f"{key}={a.text}" for key, a in fields) + "}"
    return Arg(text, {key: a.value for key, a in fields} if fields else [])


ARGS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.builds(_array, st.lists(inner, max_size=3), st.booleans()),
        st.builds(_struct, st.lists(st.tuples(KEYS, inner), max_size=3, unique_by=lambda f: f[0])),
    ),
    max_leaves=5,
)
ERRNOS = st.sampled_from(
    [("EIO", "Input/output error"), ("ENOSPC", "No space left on device"),
     ("EACCES", "Permission denied"), ("ENOENT", "No such file or directory")]
)  # fmt: skip


def _result(
    kind: str, n: int, path: bytes, errno: tuple[str, str], injected: bool
) -> dict[str, Any]:
    """A result as strace prints it (``result``) and what it means."""
    tail = " (INJECTED)" if injected else ""
    if kind == "error":
        return {"result": f"-1 {errno[0]} ({errno[1]}){tail}", "value": -1, "error": errno[0],
                "injected": injected}  # fmt: skip
    if kind == "fd":
        return {"result": f"{n}<{hexed(path)}>{tail}", "value": Fd(n, _path(path)),
                "injected": injected}  # fmt: skip
    if kind == "hex":
        return {"result": f"{hex(n)}{tail}", "value": n, "injected": injected}
    if kind == "flags":
        return {"result": f"{hex(n)} (flags O_RDWR|O_LARGEFILE){tail}", "value": n,
                "injected": injected}  # fmt: skip
    if kind == "unknown":
        return {"result": "?", "value": None}
    return {"result": f"{n}{tail}", "value": n, "injected": injected}


RESULTS = st.builds(
    _result,
    st.sampled_from(["number", "error", "fd", "hex", "flags", "unknown"]),
    st.integers(0, 2**48), PATHS, ERRNOS, st.booleans(),
)  # fmt: skip


@st.composite
def calls(draw: st.DrawFn, pids: Sequence[int] = (7, 8, 9)) -> Call:
    """A call strace prints, with what it means (every name the reader knows)."""
    return Call(
        draw(st.sampled_from(pids)),
        draw(st.sampled_from(TRACED)),
        tuple(draw(st.lists(ARGS, max_size=5))),
        **draw(RESULTS),
    )


def shape(record: Syscall | Exit | Unreadable) -> Any:
    """A record without its place (and an unreadable one without the wording of its reason)."""
    if isinstance(record, Unreadable):
        return ("unreadable", record.pid, record.name)
    return attrs.evolve(record, index=0)


# -- the reader reads what strace prints ---------------------------------------------------------


@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls(), st.integers(0, 40))
def test_every_call_strace_prints_is_read_as_it_means(call: Call, pad: int) -> None:
    """Strings (long ones too), descriptors and their paths, numbers, flags, arrays, structs and
    comments; numbers, descriptors, errors, notes and injected faults after ``=``."""
    assert [shape(r) for r in parse([call.line(pad) + "\n"])] == [call.record()]


@st.composite
def interleaved(draw: st.DrawFn) -> tuple[list[str], list[Syscall]]:
    """Several threads' calls as strace prints them: a call another thread's line interrupts is
    split after any of its arguments into ``<unfinished ...>`` and ``<... resumed>`` (or, for a
    thread that died during the call, ``<... resumed> <unfinished ...>) = ?``); the records it
    must give, in the order the calls completed."""
    pids = draw(st.lists(st.integers(100, 140), min_size=1, max_size=4, unique=True))
    lines: list[str] = []
    done: list[Syscall] = []
    open_calls: dict[int, tuple[str, Syscall]] = {}
    for call in draw(st.lists(calls(pids), max_size=10)):
        if call.pid in open_calls:  # a thread's next call comes after its last one's end
            line, record = open_calls.pop(call.pid)
            lines.append(line)
            done.append(record)
        split = draw(st.none() | st.integers(0, len(call.args)))
        if split is None:
            lines.append(call.line())
            done.append(call.record())
        else:
            head = call.args[:split]
            comma = ", " if 0 < split < len(call.args) else ""
            lines.append(f"{call.pid} {call.name}({call.args_text(head)}{comma} <unfinished ...>")
            if draw(st.booleans()) and split < len(call.args):  # the thread died in the call
                resumed = f"{call.pid} <... {call.name} resumed> <unfinished ...>) = ?"
                record = attrs.evolve(call.record(head), result=None, error=None, injected=False)
            else:
                rest = call.args_text(call.args[split:])
                resumed = f"{call.pid} <... {call.name} resumed>{rest}) = {call.result}"
                record = call.record()
            open_calls[call.pid] = (resumed, record)
        for pid in draw(st.lists(st.sampled_from(sorted(open_calls)), unique=True)
                        if open_calls else st.just([])):  # fmt: skip
            line, record = open_calls.pop(pid)
            lines.append(line)
            done.append(record)
    for line, record in open_calls.values():
        lines.append(line)
        done.append(record)
    return lines, done


@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved())
def test_calls_split_across_threads_are_read_as_if_never_interrupted(
    trace: tuple[list[str], list[Syscall]],
) -> None:
    lines, expected = trace
    assert [shape(r) for r in parse(lines)] == expected


@pytest.mark.long
@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(interleaved())
def test_calls_split_across_threads_are_read_as_if_never_interrupted_at_length(
    trace: tuple[list[str], list[Syscall]],
) -> None:
    lines, expected = trace
    assert [shape(r) for r in parse(lines)] == expected


# -- cut and interleaved lines: each line read as it is read alone -------------------------------

#: Characters a damaged line is made of: strace's own syntax, digits, hex, NULs of a file hole.
JUNK = st.text(alphabet=string.printable.replace("\n", "") + "\x00", max_size=120)


@st.composite
def damaged(draw: st.DrawFn, whole: list[str]) -> str:
    """A line of a trace two writers made, or strace stopped in: a line cut short, the rest of
    one, a piece of one run together with another line, a string with no end, a resumed call
    whose start is elsewhere, an unfinished call that never ends, a file hole, noise."""
    line = draw(st.sampled_from(whole))
    other = draw(st.sampled_from(whole))
    cut = draw(st.integers(0, len(line)))
    pid = draw(st.integers(90000, 90100))  # a resumed call's thread: no start anywhere
    name = draw(st.sampled_from(TRACED))
    return draw(
        st.sampled_from(
            [
                line[:cut],
                line[cut:],
                line[:cut] + other,
                line[:cut] + " <unfinished ...>",
                f'{pid} {name}(3, "' + hexed(draw(DATA_BYTES)),
                f"{pid} <... {name} resumed>" + line[cut:],
                "\x00" * cut + ")   = 0",
                draw(JUNK),
            ]
        )
    )


@st.composite
def damaged_traces(draw: st.DrawFn) -> list[str]:
    """Whole lines (calls, exits, signals) with damaged ones among them, in any order."""
    whole = [c.line() for c in draw(st.lists(calls(), min_size=1, max_size=6))]
    whole += draw(
        st.lists(
            st.sampled_from(
                ["7 +++ exited with 0 +++", "8 +++ killed by SIGKILL +++",
                 "7 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---"]
            ),
            max_size=2,
        )
    )  # fmt: skip
    bad = draw(st.lists(damaged(whole), min_size=1, max_size=6))
    trace: list[str] = []
    while whole or bad:
        source = whole if not bad or (whole and draw(st.booleans())) else bad
        trace.append(source.pop(0))
    return trace


def read_alone(lines: list[str]) -> None:
    """A trace with cut, run-together and unterminated lines reads as its lines do one by one
    (only a call's two halves are read together); every line but a signal's gives a record,
    a call or an unreadable line: nothing that may name a call is dropped in silence."""
    alone = [parse([line]) for line in lines]
    assert [shape(r) for r in parse(lines)] == [shape(r) for found in alone for r in found]
    for line, found in zip(lines, alone, strict=True):
        signal = line.split(" ", 1)[-1].startswith("--- ") and line.endswith(" ---")
        assert len(found) == (0 if signal or not line.strip() else 1), line[:200]


@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_traces())
def test_every_line_is_read_as_it_is_read_alone_and_none_is_skipped(lines: list[str]) -> None:
    read_alone(lines)


@pytest.mark.long
@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(damaged_traces())
def test_every_line_is_read_as_it_is_read_alone_at_length(lines: list[str]) -> None:
    read_alone(lines)


@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=80) | JUNK.map(lambda junk: "7 " + junk), max_size=8))
def test_any_text_reads_without_an_error(lines: list[str]) -> None:
    """Whatever a line holds -- any character, strace's syntax in any order -- the reader gives
    records, never an exception (the regex reader raised ValueError on a short cut string)."""
    for record in parse(lines):
        assert isinstance(record, Syscall | Exit | Unreadable)


@pytest.mark.rule("CRASH-SYS-16")
def test_a_trace_two_straces_wrote_at_once_reads_with_its_cut_lines_unreadable() -> None:
    """A real trace file (trimmed: long runs of hex escapes shortened): a backend process whose
    hello failed was left running under its strace while the next one's strace wrote the same
    file, and the first's last bytes landed inside a ``writev`` of ``data.mdb`` -- its string
    has no closing quote and the rest of it is a line of its own.  The regex reader spun for
    ever on that line; this one reads the lines around it and says which call it could not."""
    records = read_trace(str(DATA / "two-writers.txt"))
    assert [(type(r).__name__, r.name) for r in records] == [
        ("Syscall", "lseek"),
        ("Unreadable", "writev"),
        ("Unreadable", None),
        ("Syscall", "fdatasync"),
        ("Syscall", "pwrite64"),
    ]
    cut = records[1]
    assert isinstance(cut, Unreadable) and cut.pid == 6943 and "cut short" in cut.reason
    root = "/tmp/repro/exp2/good"
    findings = extract(records, root, "/").findings
    assert [(f.kind, f.call) for f in findings] == [("unreadable", 1), ("unreadable", 2)]
    assert "a writev call of the trace could not be read" in findings[0].text


def test_a_trace_that_ends_mid_line_has_that_line_unreadable(tmp_path: Path) -> None:
    """strace ends every line with a newline: a last line without one was cut (strace stopped
    mid-line), even when what is there would read as a call (``= 1`` of ``= 10``)."""
    trace = tmp_path / "trace"
    trace.write_text('7 close(3) = 0\n7 write(3, "\\x61", 10) = 1')
    records = read_trace(str(trace))
    assert [shape(r) for r in records] == [
        Syscall(0, 7, "close", (3,), 0),
        ("unreadable", 7, "write"),
    ]


@pytest.mark.rule("CRASH-SYS-16")
def test_a_call_whose_start_or_end_is_missing_is_unreadable_where_it_stands() -> None:
    lines = [
        "7 write(3 <unfinished ...>",  # its end never comes
        "8 <... fsync resumed>) = 0",  # its start is not in the trace
        '9 pwrite64(4, "\\x61", 1, 0 <unfinished ...>',
        "9 close(4) = 0",  # the thread's next call: the pwrite64 will not end
        '10 rename("\\x61", "\\x62" <unfinished ...>',
        "10 <... unlink resumed>) = 0",  # another call's end
        '11 pwrite64(4, "\\x61", 1, 0 <detached ...>',  # strace lost the thread in the call
        "12 ???( <detached ...>",  # a dying thread whose call strace could not read: no call
        "13 read(0xc00004bf00, 0, 0 <detached ...>",  # a Go thread dying in a read: no file changed
    ]
    assert [shape(r) for r in parse(lines)] == [
        ("unreadable", 7, "write"),
        ("unreadable", 8, "fsync"),
        ("unreadable", 9, "pwrite64"),
        Syscall(0, 9, "close", (4,), 0),
        ("unreadable", 10, "rename"),
        ("unreadable", 10, "unlink"),
        ("unreadable", 11, "pwrite64"),
    ]


# -- work linear in the input --------------------------------------------------------------------


def work(read: Callable[[], object]) -> int:
    """The Python steps the reader takes for ``read()``: calls, lines and returns run in
    ``crashsim/strace.py`` (what a backtracking or quadratic loop there would multiply)."""
    count = 0
    filename = strace.__file__

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if frame.f_code.co_filename != filename:
            return None
        count += 1
        return local

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        read()
    finally:
        sys.settrace(before)
    return count


#: Lines built to make a reader backtrack or rescan, by size: an unterminated string of ``n``
#: escapes (what hung the regex reader), escaped quotes, backslashes, many strings, words,
#: descriptors, results, notes, comments, parentheses, struct fields, nesting, padding.
ADVERSARIAL: dict[str, Callable[[int], list[str]]] = {
    "unterminated string": lambda n: ['7 pwrite64(3, "' + "\\x00" * n + ", 4096, 0) = 4096"],
    "string cut in two": lambda n: ['7 pwrite64(3, "' + "\\x00" * n, "\\x00" * n + '", 9, 0) = 9'],
    "escaped quotes": lambda n: ['7 write(3, "' + '\\"' * n + '") = 1'],
    "backslashes": lambda n: ['7 write(3, "' + "\\\\" * n + '") = 1'],
    "many strings": lambda n: ["7 write(" + '"", ' * n + ") = 1"],
    "many words": lambda n: ["7 write(" + "a, " * n + ") = 1"],
    "many descriptors": lambda n: ["7 write(" + "1<>, " * n + ") = 1"],
    "unclosed paths": lambda n: ["7 write(" + "1<" * n + ") = 1"],
    "many results": lambda n: ["7 write(3) = " * n],
    "many notes": lambda n: ["7 write(3) = 1" + " (x)" * n],
    "comments": lambda n: ["7 write(" + "/* */ " * n + ") = 1"],
    "unclosed comment": lambda n: ["7 write(/*" + "*" * n + ") = 1"],
    "parentheses": lambda n: ["7 write(" + "(" * n + ") = 1"],
    "struct fields": lambda n: ["7 write({" + "a=" * n + "}) = 1"],
    "nesting": lambda n: ["7 write(" + "[" * n + "]" * n + ") = 1"],
    "padding": lambda n: ["7 write(3)" + " " * n + "= 1"],
    "plain string": lambda n: ['7 write(3, "' + "a" * n + '") = 1'],
    "long name": lambda n: ["7 " + "a" * n + "(3) = 1"],
    "unfinished threads": lambda n: [f"{i} write(3 <unfinished ...>" for i in range(n)],
    "resumed threads": lambda n: (
        [f"{i} write(3 <unfinished ...>" for i in range(n)]
        + [f"{i} <... write resumed>) = 1" for i in range(n)]
    ),
}


@pytest.mark.rule("CRASH-SYS-16")
@pytest.mark.parametrize("family", sorted(ADVERSARIAL))
def test_the_reader_works_linearly_on_lines_built_to_make_it_backtrack(family: str) -> None:
    """Doubling the size of such a line at most doubles the reader's steps (a backtracking
    pattern or a rescan would multiply them: the regex reader's doubled with each escape)."""
    make = ADVERSARIAL[family]
    steps = [work(lambda n=n: parse(make(n))) for n in (500, 1000, 2000)]
    assert steps[1] <= 2.1 * steps[0] and steps[2] <= 2.1 * steps[1], steps


@pytest.mark.rule("CRASH-SYS-16")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_traces())
def test_the_reader_works_linearly_on_any_trace(lines: list[str]) -> None:
    """Generated and damaged traces: the steps are bounded by a constant per line and per
    character (what runs in C -- ``str.find``, ``bytes.fromhex`` -- stops at what it reads)."""
    size = sum(len(line) for line in lines)
    assert work(lambda: parse(lines)) <= 1000 * len(lines) + 40 * size


def test_the_reader_has_no_regular_expression() -> None:
    """No pattern on the trace path: the module that reads the record imports no ``re``."""
    tree = ast.parse(Path(strace.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"re", "regex"}, imported


def test_the_benchmark_reports_the_reader_before_and_after() -> None:
    """``scopecheck bench trace-reader`` at its smallest: this reader's figures, and the regex
    reader's from git, which gives up on the cut line only when its timeout ends it."""
    from scopecheck.bench import BENCHMARKS
    from scopecheck.bench.trace_reader import bench_trace_reader

    assert "trace-reader" in BENCHMARKS
    result = bench_trace_reader(1, size=50_000, escapes=400, growth=(4, 6), timeout=1.0)
    after = result["after"]
    assert after["trace"]["records"] > 0 and after["trace"]["unreadable"] == 0
    assert after["cut_line"]["unreadable"] == 2
    before = result["before"]
    assert "skipped" in before or (
        before["cut_line"]["said"] == "did not finish in 1 s"
        and before["trace"]["records"] <= after["trace"]["records"]
        and set(before["growth"]) == {"4", "6"}
    )
