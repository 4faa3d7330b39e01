"""The ``FileSystem`` recorder's calls as the persistence model's operations
(crashsim/fs_source.py, CRASH-SYS-1): each call becomes the system calls ``OsFileSystem`` makes
for it, a failed fsync is a ``syncfail`` (CRASH-FS-9, CRASH-SYS-11), and the same calls recorded
in process and read from a real strace trace give the same crash images -- every recorder is
judged by one model."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from scopecheck.crashsim.faults import OneFault
from scopecheck.crashsim.fs_recorder import Op, RecordingFs
from scopecheck.crashsim.fs_source import OutsideRoot, acknowledged_at, file_ops
from scopecheck.crashsim.persistence import FileOp, Image, Volume
from scopecheck.crashsim.points import Names, Strict
from scopecheck.crashsim.strace import read_trace, strace_command, unavailable
from scopecheck.crashsim.syscall_ops import extract
from scopecheck.impl.fs import OsFileSystem
from scopecheck.models.errors import StorageIOError

R = "/r"


def kinds(ops: Sequence[FileOp]) -> list[str]:
    return [f"{op.kind} {op.path}".strip() for op in ops if op.mutating or op.kind == "syncfail"]


def volume_of(ops: Sequence[FileOp], start: Image | None = None) -> Volume:
    volume = Volume(start)
    for op in ops:
        volume.apply(op)
    return volume


@pytest.mark.rule("CRASH-SYS-1")
def test_each_call_becomes_the_system_calls_the_filesystem_makes_for_it() -> None:
    ops = file_ops(
        [
            Op("create_dir", "/r/d/e", recursive=True),
            Op("write", "/r/d/e/log.tmp", b"head\n"),
            Op("fsync_file", "/r/d/e/log.tmp"),
            Op("rename", "/r/d/e/log.tmp", target="/r/d/e/log"),
            Op("fsync_dir", "/r/d/e"),
            Op("append", "/r/d/e/log", b"one\n", step=1),
            Op("truncate", "/r/d/e/log", size=5, step=1),
            Op("fsync", "/r/d/e/log", step=1),
            Op("write", "/r/x", b"", step=2),
            Op("remove", "/r/d", recursive=True, step=2),
            Op("fsync_dir", "/r", step=2),
        ],
        R,
    )
    assert kinds(ops) == [
        "mkdir d", "mkdir d/e",
        "open d/e/log.tmp", "write d/e/log.tmp", "sync d/e/log.tmp",
        "rename d/e/log.tmp", "sync d/e",
        "write d/e/log", "truncate d/e/log", "sync d/e/log",
        "open x",  # an empty write_file creates or truncates, and writes nothing
        "unlink d/e/log", "rmdir d/e", "rmdir d", "sync",
    ]  # fmt: skip
    appended = next(op for op in ops if op.kind == "write" and op.path == "d/e/log")
    assert appended.offset is None and appended.step == 1 and appended.call == 5
    assert [op.call for op in ops if op.kind == "rmdir"] == [9, 9]
    assert acknowledged_at(ops, 3) == (
        max(i for i, op in enumerate(ops) if op.step == 0) + 1,
        max(i for i, op in enumerate(ops) if op.step == 1) + 1,
        len(ops),
    )
    volume = volume_of(ops)
    assert volume.process_image().files == {"x": b""}
    # the root's fsync made the new x and the removal of d durable
    assert volume.power_image(Strict()) == Image({"x": b""}, frozenset({""}))


@pytest.mark.rule("CRASH-SYS-1")
def test_the_root_and_its_parents_exist_and_anything_else_outside_it_is_refused() -> None:
    assert file_ops([Op("create_dir", "/", recursive=True), Op("fsync_dir", "/")], R) == ()
    assert kinds(file_ops([Op("create_dir", "/r/a", recursive=True)], R)) == ["mkdir a"]
    existing = Image({}, frozenset({"", "a"}))
    assert file_ops([Op("create_dir", "/r/a", recursive=True)], R, existing) == ()
    with pytest.raises(OutsideRoot):
        file_ops([Op("write", "/elsewhere/f", b"x")], R)


@pytest.mark.rule("CRASH-FS-9", "CRASH-SYS-11")
def test_an_injected_fsync_failure_is_a_syncfail_whose_writes_a_retry_does_not_save(
    tmp_path: Path,
) -> None:
    """The recorder keeps the failed fsync (its fault hook made it fail): in the model the
    appended bytes stay visible to a process crash but are lost at power loss, though the
    retried fsync succeeded -- what a backend retrying fsync after EIO acknowledges."""
    root = tmp_path / "r"
    root.mkdir()
    recorder = RecordingFs(OsFileSystem(sync=False))
    recorder.write_file(f"{root}/log", b"")
    recorder.fsync_file(f"{root}/log")
    recorder.fsync_dir(str(root))
    handle = recorder.open_append(f"{root}/log")
    recorder.append(handle, b"commit\n")
    recorder.fault = OneFault(4, "eio")  # the fsync of that append fails once
    with pytest.raises(StorageIOError):
        recorder.fsync(handle)
    recorder.fsync(handle)  # the retry succeeds
    recorder.close(handle)
    assert [op.failed for op in recorder.ops if op.kind == "fsync"] == [True, False]
    ops = file_ops(recorder.ops, str(root))
    assert "syncfail log" in kinds(ops)
    volume = volume_of(ops)
    assert volume.process_image().files == {"log": b"commit\n"}
    assert volume.power_image(Strict()).files == {"log": b""}
    assert {image.files["log"] for _, image in volume.power_images(random.Random(0))} == {b""}


# -- the same calls, recorded in process and read from strace -----------------------------------

PROGRAM = """
from scopecheck.impl.fs import OsFileSystem

fs = OsFileSystem()
fs.create_dir(R + "/d/e")
fs.write_file(R + "/d/e/log.tmp", b"head\\n")
fs.fsync_file(R + "/d/e/log.tmp")
fs.rename(R + "/d/e/log.tmp", R + "/d/e/log")
fs.fsync_dir(R + "/d/e")
handle = fs.open_append(R + "/d/e/log")
fs.append(handle, b"one\\n")
fs.append(handle, b"two two\\n")
fs.truncate(handle, 12)
fs.fsync(handle)
fs.append(handle, b"three\\n")
fs.close(handle)
fs.write_file(R + "/x", b"")
fs.write_file(R + "/y", b"why")
fs.unlink(R + "/x")
fs.remove(R + "/d/e", recursive=True)
fs.fsync_dir(R + "/d")
"""


def _run(fs: object, root: str) -> None:
    exec(textwrap.dedent(PROGRAM).replace("OsFileSystem()", "FS"), {"R": root, "FS": fs})


def images(ops: Sequence[FileOp]) -> list[object]:
    """Every crash image, process and power loss, before each mutating operation."""
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


@pytest.mark.rule("CRASH-SYS-1")
def test_recorded_calls_and_a_real_strace_trace_of_them_give_the_same_images(
    tmp_path: Path,
) -> None:
    why = unavailable()
    if why is not None:  # never a silent pass (CRASH-SYS-5)
        pytest.fail(f"this test needs strace with ptrace permitted ({why})")
    traced_root = tmp_path / "traced"
    traced_root.mkdir()
    script = tmp_path / "program.py"
    script.write_text(f"R = {str(traced_root)!r}\n{textwrap.dedent(PROGRAM)}")
    trace = tmp_path / "trace"
    command = strace_command(str(trace), [sys.executable, str(script)])
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    timeline = extract(read_trace(str(trace)), str(traced_root), str(tmp_path))

    recorded_root = tmp_path / "recorded"
    recorded_root.mkdir()
    recorder = RecordingFs(OsFileSystem())
    _run(recorder, str(recorded_root))
    converted = file_ops(recorder.ops, str(recorded_root))

    assert kinds(converted) == kinds(timeline.ops)
    assert images(converted) == images(timeline.ops)
    final = volume_of(converted)
    assert final.process_image().files == {"y": b"why"}
    assert final.process_image().dirs == {"", "d"}
