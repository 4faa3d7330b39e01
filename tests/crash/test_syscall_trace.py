"""Reading strace's record and turning it into file operations (CRASH-SYS-2..CRASH-SYS-4,
CRASH-SYS-8), on hand-written trace lines in strace 6's ``-f -xx -y`` format."""

from __future__ import annotations

import pytest

from scopecheck.crashsim.strace import Exit, Fd, Syscall, parse, strace_command
from scopecheck.crashsim.syscall_ops import extract


def hexed(text: str) -> str:
    return "".join(f"\\x{b:02x}" for b in text.encode())


ROOT = "/r"


def fd(number: int, path: str) -> str:
    return f"{number}<{hexed(path)}>"


LINES = [
    f'7 openat(AT_FDCWD<{hexed("/w")}>, "{hexed("/r/log")}", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0644) = {fd(3, "/r/log")}',  # noqa: E501
    f'7 write({fd(3, "/r/log")}, "{hexed("one")}", 3 <unfinished ...>',
    f'8 write(1<pipe:[99]>, "{hexed(chr(123) + chr(34) + "id" + chr(34) + ":1," + chr(34) + "ok" + chr(34) + ":null}")}\\x0a", 18) = 18',  # noqa: E501
    "7 <... write resumed>) = 3",
    f"7 fsync({fd(3, '/r/log')}) = -1 EIO (Input/output error) (INJECTED)",
    f"7 fsync({fd(3, '/r/log')}) = 0",
    f"7 dup({fd(3, '/r/log')}) = {fd(4, '/r/log')}",
    f'7 writev({fd(4, "/r/log")}, [{{iov_base="{hexed("ab")}", iov_len=2}}, {{iov_base="{hexed("c")}", iov_len=1}}], 2) = 3',  # noqa: E501
    f'7 openat(AT_FDCWD<{hexed("/r")}>, "{hexed("db")}", O_RDWR|O_CREAT|O_CLOEXEC, 0644) = {fd(5, "/r/db")}',  # noqa: E501
    "7 read(0x5, 0x7ffd, 0x10) = 0x4",
    f'7 write({fd(5, "/r/db")}, "{hexed("XY")}", 2) = 2',
    f"7 lseek({fd(5, '/r/db')}, 0, SEEK_SET) = 0",
    f'7 pwrite64({fd(5, "/r/db")}, "{hexed("Q")}", 1, 9) = 1',
    f"7 mmap(NULL, 32768, PROT_READ|PROT_WRITE, MAP_SHARED, {fd(5, '/r/db')}, 0) = 0x7f00",
    f'7 renameat2(AT_FDCWD<{hexed("/r")}>, "{hexed("db")}", AT_FDCWD<{hexed("/r")}>, "{hexed("db2")}", RENAME_NOREPLACE) = 0',  # noqa: E501
    f'7 unlinkat(AT_FDCWD<{hexed("/r")}>, "{hexed("sub")}", AT_REMOVEDIR) = 0',
    f'7 openat(AT_FDCWD<{hexed("/r")}>, "{hexed("/tmp/elsewhere")}", O_WRONLY|O_CREAT, 0644) = {fd(6, "/tmp/elsewhere")}',  # noqa: E501
    "7 +++ killed by SIGKILL +++",
]


@pytest.mark.rule("CRASH-SYS-2")
def test_the_parser_joins_interrupted_calls_and_reads_results_and_exits() -> None:
    records = parse(line + "\n" for line in LINES)
    calls = [r for r in records if isinstance(r, Syscall)]
    first_write = next(c for c in calls if c.name == "write" and c.pid == 7)
    assert first_write.args == (Fd(3, "/r/log"), b"one", 3) and first_write.result == 3
    failed = next(c for c in calls if c.name == "fsync" and not c.ok)
    assert failed.error == "EIO" and failed.injected
    assert calls[0].result == Fd(3, "/r/log")
    assert next(c for c in calls if c.name == "read").result == 4
    assert isinstance(records[-1], Exit) and records[-1].signal == "SIGKILL"


@pytest.mark.rule("CRASH-SYS-2", "CRASH-SYS-4", "CRASH-SYS-8")
def test_the_extractor_follows_offsets_descriptors_and_acknowledgements() -> None:
    timeline = extract(parse(LINES), ROOT, "/w")
    described = [op.describe() for op in timeline.ops]
    assert described == [
        "open log (create)",
        "write 3 bytes at end of log",
        "sync log",  # the injected EIO changed nothing: only the second fsync counts
        "write 3 bytes at end of log",  # writev through a dup of an O_APPEND descriptor
        "open db (create)",
        "write 2 bytes at offset 4 of db",  # after a 4-byte read
        "write 1 bytes at offset 9 of db",  # pwrite64 at its own offset
        "rename db -> db2",
        "rmdir sub",
    ]
    (ack,) = timeline.acks
    assert (
        ack.request_id == 1 and ack.ops == 1
    )  # after the first write was issued, before it returned
    kinds = sorted(f.kind for f in timeline.findings)
    assert kinds == ["mmap", "outside"]
    assert timeline.killed_by == "SIGKILL"
    names = [(name, ordinal) for _, name, ordinal in timeline.mutating_calls]
    assert ("fsync", 1) in names and ("fsync", 0) not in names  # strace's when= counts both


def test_the_strace_command_traces_what_the_core_reads() -> None:
    command = strace_command("/t/trace", ["node", "b.js"], inject=["fsync:error=EIO:when=2"])
    assert command[:2] == ["strace", "-f"] and command[-3:] == ["--", "node", "b.js"]
    assert "inject=fsync:error=EIO:when=2" in command and "-xx" in command and "-y" in command
