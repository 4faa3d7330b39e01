"""Reading strace's record and turning it into file operations (CRASH-SYS-2..CRASH-SYS-4,
CRASH-SYS-8, CRASH-SYS-10, CRASH-SYS-11, CRASH-SYS-13): on hand-written trace lines in strace
6's ``-f -xx -y`` format, and on real traces of small Python programs where what strace prints
matters."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from scopecheck.crashsim.persistence import FileOp, Volume
from scopecheck.crashsim.points import Names, Strict
from scopecheck.crashsim.strace import (
    Exit,
    Fd,
    Syscall,
    parse,
    read_trace,
    strace_command,
    unavailable,
)
from scopecheck.crashsim.syscall_ops import Timeline, extract


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
    f'9 unlinkat(AT_FDCWD<{hexed("/r")}>, "{hexed("sub")}", AT_REMOVEDIR) = 0',
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


@pytest.mark.rule("CRASH-SYS-2", "CRASH-SYS-4", "CRASH-SYS-8", "CRASH-SYS-11")
def test_the_extractor_follows_offsets_descriptors_and_acknowledgements() -> None:
    timeline = extract(parse(LINES), ROOT, "/w")
    described = [op.describe() for op in timeline.ops]
    assert described == [
        "open log (create)",
        "write 3 bytes at end of log",
        "syncfail log",  # the injected EIO lost the write to the disk (CRASH-SYS-11)
        "sync log",
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
    # who made each call, as strace says (a thread's call is the trace's like any other)
    assert [op.thread for op in timeline.ops] == [7] * 9 + [9]
    names = [(name, ordinal) for _, name, ordinal in timeline.mutating_calls]
    assert names[2:4] == [("fsync", 0), ("fsync", 1)]  # strace's when= counts both


def test_the_strace_command_traces_what_the_core_reads() -> None:
    command = strace_command("/t/trace", ["node", "b.js"], inject=["fsync:error=EIO:when=2"])
    assert command[:2] == ["strace", "-f"] and command[-3:] == ["--", "node", "b.js"]
    assert "inject=fsync:error=EIO:when=2" in command and "-xx" in command and "-y" in command


# -- real traces of small Python programs ---------------------------------------------------------


def traced(tmp_path: Path, program: str, *, inject: Sequence[str] = ()) -> Timeline:
    """Run ``program`` (``R`` is its root, ``os`` imported) under the crash core's strace
    command and extract its timeline under ``R``."""
    why = unavailable()
    if why is not None:  # never a silent pass (CRASH-SYS-5)
        pytest.fail(f"these tests need strace with ptrace permitted ({why})")
    root = tmp_path / "r"
    root.mkdir()
    script = tmp_path / "program.py"
    script.write_text(f"import os\nR = {str(root)!r}\n{textwrap.dedent(program)}")
    trace = tmp_path / "trace"
    command = strace_command(str(trace), [sys.executable, "-I", "-S", str(script)], inject=inject)
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    return extract(read_trace(str(trace)), str(root), str(tmp_path))


def described(timeline: Timeline) -> list[str]:
    return [op.describe() for op in timeline.ops if op.kind != "close"]


def volume_of(ops: Sequence[FileOp]) -> Volume:
    volume = Volume()
    for op in ops:
        volume.apply(op)
    return volume


@pytest.mark.rule("CRASH-SYS-10")
def test_writes_through_sync_descriptors_and_rwf_sync_flags_are_durable_when_they_return(
    tmp_path: Path,
) -> None:
    timeline = traced(
        tmp_path,
        """
        a = os.open(R + "/a", os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o644)
        os.write(a, b"aa")
        os.ftruncate(a, 1)  # not a write: O_SYNC does not cover it
        b = os.open(R + "/b", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
        os.pwrite(b, b"bb", 5)
        c = os.open(R + "/c", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(c, b"plain")
        os.pwritev(c, [b"d", b"s"], 1, os.RWF_DSYNC)
        os.pwritev(c, [b"!"], -1, os.RWF_SYNC | os.RWF_APPEND)
        os.pwritev(c, [b"?"], -1)
        """,
    )
    assert described(timeline) == [
        "open a (create)",
        "write 2 bytes at offset 0 of a",
        "sync a",
        "truncate a to 1",
        "open b (create)",
        "write 2 bytes at offset 5 of b",
        "sync b",
        "open c (create)",
        "write 5 bytes at offset 0 of c",
        "write 2 bytes at offset 1 of c",
        "sync c",
        "write 1 bytes at end of c",
        "sync c",
        "write 1 bytes at offset 6 of c",  # offset -1: the descriptor's, past the append
    ]
    calls = [call for call, _, _ in timeline.mutating_calls]
    assert len(calls) == len(set(calls))  # a write and its sync are one call to fault


@pytest.mark.rule("CRASH-SYS-10")
def test_sync_file_range_is_no_sync_and_is_reported_once(tmp_path: Path) -> None:
    timeline = traced(
        tmp_path,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sync_file_range.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint
        ]
        a = os.open(R + "/a", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(a, b"data")
        for _ in range(2):
            assert libc.sync_file_range(a, 0, 0, 2 | 4) == 0
        """,
    )
    assert "sync" not in {op.kind for op in timeline.ops}
    assert [f.kind for f in timeline.findings] == ["no-guarantee"]


FSYNC_TWICE = """
d = os.open(R, os.O_RDONLY | os.O_DIRECTORY)
a = os.open(R + "/a", os.O_WRONLY | os.O_CREAT, 0o644)
os.fsync(d)
os.write(a, b"AAAA")
try:
    os.fsync(a)
except OSError:
    pass
{rewrite}
os.fsync(a)
"""


@pytest.mark.rule("CRASH-SYS-11")
@pytest.mark.parametrize(("rewrite", "durable"), [("", b""), ('os.pwrite(a, b"AAAA", 0)', b"AAAA")])
def test_a_real_failed_fsync_loses_the_write_unless_it_is_written_again(
    tmp_path: Path, rewrite: str, durable: bytes
) -> None:
    timeline = traced(
        tmp_path,
        FSYNC_TWICE.format(rewrite=rewrite),
        inject=["fsync:error=EIO:when=2"],  # the first fsync of a (the directory's is first)
    )
    assert "syncfail a" in described(timeline)
    volume = volume_of(timeline.ops)
    assert volume.process_image().files == {"a": b"AAAA"}
    assert {image.files["a"] for _, image in volume.power_images(random.Random(0))} == {durable}


@pytest.mark.rule("CRASH-SYS-11")
def test_a_short_write_records_its_bytes_and_a_failed_write_nothing(tmp_path: Path) -> None:
    timeline = traced(
        tmp_path,
        """
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (37, 37))
        a = os.open(R + "/a", os.O_WRONLY | os.O_CREAT, 0o644)
        assert os.write(a, b"x" * 100) == 37
        try:
            os.write(a, b"y" * 10)
        except OSError:
            pass
        """,
    )
    assert described(timeline) == ["open a (create)", "write 37 bytes at offset 0 of a"]


@pytest.mark.rule("CRASH-SYS-8", "CRASH-SYS-13")
def test_shared_mappings_are_limits_by_meaning_and_once_per_path(tmp_path: Path) -> None:
    timeline = traced(
        tmp_path,
        """
        import ctypes, mmap
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mprotect.argtypes = libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                        ctypes.c_int]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        fds = {}
        for name in ("ro", "priv", "valid"):
            fds[name] = os.open(R + "/" + name, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fds[name], 4096)
        RW = mmap.PROT_READ | mmap.PROT_WRITE
        # shared, read-only: no limit until mprotect makes it writable
        ro = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fds["ro"], 0)
        assert libc.msync(ro, 4096, 4) == 0  # MS_SYNC
        assert libc.mprotect(ro, 4096, RW) == 0
        assert libc.mprotect(ro, 4096, RW) == 0
        # private and writable: never reaches the file
        priv = libc.mmap(None, 4096, RW, mmap.MAP_PRIVATE, fds["priv"], 0)
        assert libc.mprotect(priv, 4096, RW) == 0
        # MAP_SHARED_VALIDATE, twice
        for _ in range(2):
            valid = libc.mmap(None, 4096, RW, 0x03, fds["valid"], 0)
            assert libc.munmap(valid, 4096) == 0
        assert libc.munmap(ro, 4096) == 0
        """,
    )
    found = sorted((f.kind, f.text.split(" ", 1)[0].rsplit("/", 1)[1]) for f in timeline.findings)
    assert found == [("mmap", "ro"), ("mmap", "valid"), ("msync", "ro")]


HAND_BUILT = (
    FileOp("open", "data.tmp", handle=1, flags=frozenset({"create", "trunc"})),
    FileOp("write", "data.tmp", handle=1, offset=0, data=b"new contents"),
    FileOp("sync", "data.tmp", handle=1),
    FileOp("rename", "data.tmp", "data"),
    FileOp("open", "", handle=2, flags=frozenset({"directory"})),
    FileOp("sync", "", handle=2),
)


@pytest.mark.rule("CRASH-SYS-1")
def test_hand_built_operations_and_a_real_trace_of_them_give_the_same_images(
    tmp_path: Path,
) -> None:
    timeline = traced(
        tmp_path,
        """
        f = os.open(R + "/data.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(f, b"new contents")
        os.fsync(f)
        os.close(f)
        os.rename(R + "/data.tmp", R + "/data")
        d = os.open(R, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(d)
        os.close(d)
        """,
    )

    def images(ops: Sequence[FileOp]) -> list[object]:
        volume, rng, found = Volume(), random.Random(0), []
        for op in [*ops, None]:
            if op is None or op.mutating:
                found.append(("process", volume.process_image()))
                found.extend(
                    (v.keep if isinstance(v, Names) else v, image)  # op indices differ
                    for v, image in volume.power_images(rng)
                )
            if op is not None:
                volume.apply(op)
        return found

    assert [op.kind for op in timeline.ops if op.mutating] == [
        op.kind for op in HAND_BUILT if op.mutating
    ]
    assert images(timeline.ops) == images(HAND_BUILT)
    assert volume_of(timeline.ops).power_image(Strict()).files == {"data": b"new contents"}


@pytest.mark.rule("CRASH-SYS-13")
def test_mapping_flags_strace_prints_as_numbers_are_read_by_meaning() -> None:
    lines = [
        f'7 openat(AT_FDCWD<{hexed("/r")}>, "{hexed("m")}", O_RDWR, 0) = {fd(3, "/r/m")}',
        f"7 mmap(NULL, 4096, 0x3, 0x1, {fd(3, '/r/m')}, 0) = 0x7f0000",  # shared, read+write
        f"7 mmap(NULL, 4096, PROT_READ|PROT_WRITE, 0x2, {fd(3, '/r/m')}, 0) = 0x7f1000",
        f"7 mmap(NULL, 4096, PROT_READ, MAP_SHARED_VALIDATE|0x80000, {fd(3, '/r/m')}, 0) = 0x7f2000",  # noqa: E501
        "7 munmap(0x7f2000, 4096) = 0",
        "7 mprotect(0x7f2000, 4096, PROT_READ|PROT_WRITE) = 0",  # no longer a file mapping
        "7 msync(0x7f1000, 4096, MS_SYNC) = 0",  # a private mapping: nothing to say
    ]
    timeline = extract(parse(lines), ROOT, "/w")
    assert [(f.kind, f.call) for f in timeline.findings] == [("mmap", 1)]
