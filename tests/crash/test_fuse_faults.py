"""The FUSE fault mount (crashsim/fuse_faults.py), on a real mount served by a real daemon
process: every operation a storage backend uses passes through exactly (sqlite3 in WAL mode and
shared mmap included); each fault kind fires once, on the N-th call to its path across threads;
a partial write stores exactly k bytes and the next write fails; strace sees the faults as
ordinary failed calls; and no mount outlives its block, even when the daemon is killed."""

from __future__ import annotations

import ast
import ctypes
import errno
import mmap
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from scopecheck.crashsim import strace
from scopecheck.crashsim.fuse_faults import FaultMount, FaultPlan, Fired, is_mounted, unavailable


@pytest.fixture(autouse=True)
def _fuse_is_here() -> None:
    why = unavailable()
    assert why is None, f"these tests need FUSE ({why}); .ci/run installs fuse3"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    backing, mountpoint = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    return backing, mountpoint


@pytest.fixture
def mounted(dirs: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    backing, mountpoint = dirs
    mount = FaultMount(backing, mountpoint)
    with mount:
        yield backing, mountpoint
    mount.cleanup()
    assert not is_mounted(mountpoint)


def _run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- passthrough ------------------------------------------------------------------------------


def test_files_pass_through_exactly(mounted: tuple[Path, Path]) -> None:
    backing, mnt = mounted
    # create, O_EXCL, write at offsets, O_APPEND, sizes exact at once (no attribute cache)
    fd = os.open(mnt / "a", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
    assert os.write(fd, b"hello world") == 11
    assert os.pwrite(fd, b"HELLO", 0) == 5
    assert os.stat(mnt / "a").st_size == 11
    assert os.pread(fd, 100, 6) == b"world"
    os.fsync(fd)
    os.fdatasync(fd)
    os.ftruncate(fd, 5)
    assert os.fstat(fd).st_size == 5 and os.stat(backing / "a").st_size == 5
    os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(mnt / "a", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert (os.stat(mnt / "a").st_mode & 0o777) == 0o640
    fd = os.open(mnt / "a", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"+1")
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"+2")  # O_APPEND: at the end whatever the position
    os.close(fd)
    assert (backing / "a").read_bytes() == b"HELLO+1+2"
    os.truncate(mnt / "a", 3)
    assert (mnt / "a").read_bytes() == b"HEL"
    fd = os.open(mnt / "a", os.O_WRONLY | os.O_TRUNC)
    assert os.stat(mnt / "a").st_size == 0
    os.close(fd)
    # a write the backing file system makes behind the mount's back is seen at once
    (backing / "a").write_bytes(b"behind")
    assert os.stat(mnt / "a").st_size == 6 and (mnt / "a").read_bytes() == b"behind"
    # a sparse write far out
    with open(mnt / "sparse", "wb") as f:
        f.seek(1 << 20)
        f.write(b"end")
    assert os.stat(backing / "sparse").st_size == (1 << 20) + 3


def test_names_and_metadata_pass_through(mounted: tuple[Path, Path]) -> None:
    backing, mnt = mounted
    os.mkdir(mnt / "d", 0o750)
    assert (backing / "d").is_dir() and (os.stat(backing / "d").st_mode & 0o777) == 0o750
    (mnt / "d" / "x").write_bytes(b"x1")
    (mnt / "d" / "y").write_bytes(b"y1")
    assert sorted(os.listdir(mnt / "d")) == ["x", "y"]
    os.rename(mnt / "d" / "x", mnt / "d" / "y")  # over an existing file
    assert sorted(os.listdir(backing / "d")) == ["y"] and (mnt / "d" / "y").read_bytes() == b"x1"
    # rename's flags reach the backing file system (RENAME_NOREPLACE)
    (mnt / "d" / "z").write_bytes(b"z")
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_noreplace = -100, 1
    got = libc.renameat2(
        at_fdcwd, os.fsencode(mnt / "d" / "z"), at_fdcwd, os.fsencode(mnt / "d" / "y"),
        rename_noreplace,
    )  # fmt: skip
    assert got == -1 and ctypes.get_errno() == errno.EEXIST
    os.unlink(mnt / "d" / "z")
    # directory fsync
    dfd = os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    # links
    os.link(mnt / "d" / "y", mnt / "hard")
    os.symlink("d/y", mnt / "soft")
    assert os.stat(mnt / "hard").st_nlink == 2
    assert os.stat(mnt / "hard").st_ino == os.stat(backing / "d" / "y").st_ino
    assert os.readlink(mnt / "soft") == "d/y" and (mnt / "soft").read_bytes() == b"x1"
    assert os.readlink(backing / "soft") == "d/y"
    # times and modes, exactly
    os.utime(mnt / "hard", ns=(1_000_000_001, 2_000_000_002))
    st = os.stat(backing / "hard")
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_001, 2_000_000_002)
    os.chmod(mnt / "hard", 0o600)
    assert (os.stat(backing / "hard").st_mode & 0o777) == 0o600
    # statfs is the backing file system's
    assert os.statvfs(mnt).f_blocks == os.statvfs(backing).f_blocks
    # an unlinked file stays usable while open, and leaves nothing behind (.fuse_hidden*)
    fd = os.open(mnt / "tmp", os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(mnt / "tmp")
    os.write(fd, b"still here")
    assert os.pread(fd, 100, 0) == b"still here"
    os.ftruncate(fd, 5)
    assert os.pread(fd, 100, 0) == b"still"
    os.fsync(fd)
    with pytest.raises(OSError) as stale:  # a limit: the kernel's fstat sends no handle
        os.fstat(fd)
    assert stale.value.errno == errno.ESTALE
    assert sorted(os.listdir(backing)) == ["d", "hard", "soft"]
    os.close(fd)
    os.unlink(mnt / "d" / "y")
    os.rmdir(mnt / "d")
    assert sorted(os.listdir(mnt)) == ["hard", "soft"]


def test_shared_mmap_reaches_the_backing_file(mounted: tuple[Path, Path]) -> None:
    backing, mnt = mounted
    with open(mnt / "m", "wb") as f:
        f.truncate(8192)
    with open(mnt / "m", "r+b") as f, mmap.mmap(f.fileno(), 8192) as view:
        view[0:5] = b"mmap!"
        view[4096:4100] = b"page"
        with open(mnt / "m", "rb") as other:  # the same page cache: coherent at once
            assert other.read(5) == b"mmap!"
        view.flush()
    data = (backing / "m").read_bytes()
    assert data[:5] == b"mmap!" and data[4096:4100] == b"page" and len(data) == 8192


SQLITE_CHILD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
print(db.execute("select count(*), sum(n) from t").fetchone())
db.execute("insert into t values (1000)")
db.commit()
db.close()
"""


def test_sqlite3_in_wal_mode_works_on_the_mount(mounted: tuple[Path, Path]) -> None:
    backing, mnt = mounted
    path = str(mnt / "db.sqlite")
    writer = sqlite3.connect(path, timeout=30)
    assert writer.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    writer.execute("create table t (n integer)")
    writer.commit()
    reader = sqlite3.connect(path, timeout=30)
    for n in range(50):
        writer.execute("insert into t values (?)", (n,))
        writer.commit()
        assert reader.execute("select count(*) from t").fetchone() == (n + 1,)
    assert (mnt / "db.sqlite-shm").exists() and (mnt / "db.sqlite-wal").exists()
    child = _run(SQLITE_CHILD, path)  # another process, sharing the -shm mapping
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "(50, 1225)"
    assert reader.execute("select count(*), sum(n) from t").fetchone() == (51, 2225)
    assert writer.execute("pragma wal_checkpoint(truncate)").fetchone()[0] == 0
    reader.close()
    writer.close()
    # the backing directory holds a whole database
    check = sqlite3.connect(backing / "db.sqlite")
    assert check.execute("pragma integrity_check").fetchone() == ("ok",)
    assert check.execute("select count(*) from t").fetchone() == (51,)
    check.close()


def test_one_large_write_is_one_write_call(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("write", "big", 99, "EIO"))
    with mount:
        fd = os.open(mnt / "big", os.O_WRONLY | os.O_CREAT, 0o644)
        assert os.write(fd, b"b" * (1 << 20)) == 1 << 20  # 1 MiB, page aligned
        os.close(fd)
    assert mount.seen() == 1 and mount.fired is None
    # what the kernel and the daemon agreed: no writeback cache, no async direct I/O
    ready = mount.events()[0]
    assert ready["event"] == "ready" and ready["max_write"] == 1 << 20
    assert ready["want"] & (1 << 16) == 0 and ready["want"] & (1 << 15) == 0
    assert mount.status() == "not fired: write #99 on big: the daemon saw 1 write call(s) there"
    mount.cleanup()


# -- faults -----------------------------------------------------------------------------------


def _do(op: str, mnt: Path, name: str, i: int) -> None:
    """One ``op`` on ``mnt/name`` (the i-th time), set up so that it is possible."""
    path = mnt / name
    if op == "write":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"%d;" % i)
        finally:
            os.close(fd)
    elif op == "fsync":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    elif op == "truncate":
        path.touch()
        os.truncate(path, i)
    elif op == "create":
        path.unlink(missing_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif op == "rename":
        path.write_bytes(b"%d" % i)
        os.rename(path, mnt / f"{name}.renamed")
    elif op == "unlink":
        path.write_bytes(b"")
        os.unlink(path)
    elif op in ("mkdir", "rmdir"):
        os.mkdir(path)
        os.rmdir(path)
    else:  # pragma: no cover
        raise AssertionError(op)


def _undone(op: str, backing: Path, name: str) -> bool:
    """Whether the faulted call left the backing directory as it was."""
    path = backing / name
    return {
        "write": lambda: path.read_bytes() == b"1;",  # the 2nd write did not land
        "fsync": lambda: True,
        "truncate": lambda: path.stat().st_size == 1,  # still the 1st call's length
        "create": lambda: not path.exists(),
        "rename": lambda: path.read_bytes() == b"2" and (backing / f"{name}.renamed").exists(),
        "unlink": lambda: path.exists(),
        "mkdir": lambda: not path.exists(),
        "rmdir": lambda: path.is_dir(),
    }[op]()


@pytest.mark.parametrize(
    ("op", "code"),
    [
        ("write", "EIO"),
        ("fsync", "EIO"),
        ("truncate", "ENOSPC"),
        ("create", "EACCES"),
        ("rename", "EIO"),
        ("unlink", "EROFS"),
        ("mkdir", "ENOSPC"),
        ("rmdir", "EBUSY"),
    ],
)
def test_each_fault_fires_once_on_the_intended_call(
    dirs: tuple[Path, Path], op: str, code: str
) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan(op, "sub/target", 2, code))
    os.mkdir(backing / "sub")
    with mount:
        _do(op, mnt, "sub/other", 1)  # the same op elsewhere does not count
        _do(op, mnt, "sub/target", 1)
        _do(op, mnt, "sub/other", 2)
        with pytest.raises(OSError) as failed:
            _do(op, mnt, "sub/target", 2)
        assert failed.value.errno == getattr(errno, code)
        assert mount.fired is not None
        assert _undone(op, backing, "sub/target"), sorted(os.listdir(backing / "sub"))
        if op == "rmdir":
            os.rmdir(mnt / "sub" / "target")  # the fault left it behind
        _do(op, mnt, "sub/target", 3)  # transient: the next one passes
        _do(op, mnt, "sub/target", 4)
    fired = mount.fired
    assert fired is not None
    assert (fired.op, fired.path, fired.ordinal, fired.errno) == (op, "sub/target", 2, code)
    assert fired.tid > 0 and fired.then_failed is None
    assert [e["event"] for e in mount.events()] == ["ready", "fired", "exit"]
    assert mount.seen() == 4 + (op == "rmdir")  # the rmdir by hand above counts too
    assert mount.status().startswith(f"fired: {op} #2 on sub/target failed with {code}")
    mount.cleanup()


def test_open_with_o_trunc_is_a_truncate(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    (backing / "f").write_bytes(b"keep")
    mount = FaultMount(backing, mnt, FaultPlan("truncate", "f", 1, "EIO"))
    with mount:
        with pytest.raises(OSError) as failed:
            open(mnt / "f", "wb").close()
        assert failed.value.errno == errno.EIO
        assert (backing / "f").read_bytes() == b"keep"
    mount.cleanup()


THREADED_WRITER = """
import os, sys, threading
mnt, proc, threads, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
failed = []
start = threading.Barrier(threads)

def work(t):
    target = os.open(os.path.join(mnt, "target"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    name = f"other{proc}{t}"
    other = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start.wait()
    for i in range(per):
        record = b"p%dt%d-%05d\\n" % (proc, t, i)
        os.write(other, record)
        try:
            os.write(target, record)
        except OSError as exc:
            failed.append((record.decode().strip(), exc.errno))
        os.fsync(other)
    os.close(target)
    os.close(other)

workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(repr(failed))
"""


def test_threads_in_two_processes_get_the_fault_on_the_nth_write_to_the_target(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    procs, threads, per, nth = 2, 3, 30, 71
    mount = FaultMount(backing, mnt, FaultPlan("write", "target", nth, "EIO"))
    code = textwrap.dedent(THREADED_WRITER)
    with mount:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(mnt), str(p), str(threads), str(per)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p in range(procs)
        ]
        outputs = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    failed = [f for out, _ in outputs for f in ast.literal_eval(out)]
    assert len(failed) == 1 and failed[0][1] == errno.EIO, failed
    fired = mount.fired
    assert fired is not None and (fired.op, fired.ordinal) == ("write", nth)
    # O_APPEND: the faulted write was to go where the first nth - 1 records end
    record = len(b"p0t0-00000\n")
    assert fired.offset == (nth - 1) * record and fired.requested == record
    records = (backing / "target").read_bytes().splitlines()
    assert len(records) == procs * threads * per - 1
    assert failed[0][0].encode() not in records
    # every thread of both processes wrote to the target, and to other files, around the fault
    assert {r[:4] for r in records} == {
        b"p%dt%d" % (p, t) for p in range(procs) for t in range(threads)
    }
    for p in range(procs):
        for t in range(threads):
            assert (backing / f"other{p}{t}").stat().st_size == per * record
    assert mount.seen() == procs * threads * per
    mount.cleanup()


def test_a_partial_write_stores_k_bytes_and_the_next_write_fails(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("write", "log", 2, "ENOSPC", partial=3))
    with mount:
        fd = os.open(mnt / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        assert os.write(fd, b"first\n") == 6
        assert os.write(fd, b"second\n") == 3  # a real short write
        with pytest.raises(OSError) as failed:
            os.write(fd, b"ond\n")
        assert failed.value.errno == errno.ENOSPC
        assert os.fstat(fd).st_size == 9 and (mnt / "log").read_bytes() == b"first\nsec"
        assert os.write(fd, b"!\n") == 2  # transient
        os.close(fd)
    assert (backing / "log").read_bytes() == b"first\nsec!\n"
    fired = mount.fired
    assert fired == Fired(
        op="write", path="log", ordinal=2, errno="ENOSPC", tid=fired.tid, time=fired.time,
        offset=6, requested=7, written=3, then_failed=3, rest_failed=1,
    )  # fmt: skip
    assert mount.status() == (
        "fired: write #2 on log wrote 3 of 7 bytes at offset 6; write #3 failed with ENOSPC"
    )
    mount.cleanup()


def test_python_buffered_io_sees_the_partial_write_then_the_error(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("write", "f", 1, "EIO", partial=100))
    with mount:
        with open(mnt / "f", "wb", buffering=0) as f, pytest.raises(OSError) as failed:
            f.write(b"x" * 1000)
            f.write(b"y" * 10)  # FileIO.write returns the short count; this write fails
        assert failed.value.errno == errno.EIO
    assert (backing / "f").read_bytes() == b"x" * 100
    mount.cleanup()


@pytest.mark.rule("CRASH-SYS-18")
def test_the_rest_of_a_cut_short_write_fails_however_it_is_retried(
    dirs: tuple[Path, Path],
) -> None:
    """After the partial write the next write fails whatever it is, and so does every retry of
    the rest -- whole, in pieces, or with more after it; another write passes (the disk has
    room again) and ends it, and so does a truncate."""
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("write", "log", 1, "ENOSPC", partial=3))
    with mount:
        fd = os.open(mnt / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        assert os.write(fd, b"record\n") == 3
        for retry in (b"ord\n", b"ord\n", b"or", b"ord\nnext\n"):
            with pytest.raises(OSError) as failed:
                os.write(fd, retry)
            assert failed.value.errno == errno.ENOSPC
        assert os.write(fd, b"next\n") == 5  # not the rest: it passes, and the rest may follow
        assert os.write(fd, b"ord\n") == 4
        os.close(fd)
    assert (backing / "log").read_bytes() == b"recnext\nord\n"
    fired = mount.fired
    assert fired is not None and (fired.then_failed, fired.rest_failed) == (2, 4)
    assert mount.status() == (
        "fired: write #1 on log wrote 3 of 7 bytes at offset 0; write #2 failed with ENOSPC, "
        "and 3 retry(s) of the rest after it"
    )
    mount.cleanup()
    (backing / "log").unlink()
    cut = FaultMount(backing, mnt, FaultPlan("write", "log", 1, "ENOSPC", partial=3))
    with cut:
        fd = os.open(mnt / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        assert os.write(fd, b"record\n") == 3
        os.ftruncate(fd, 0)  # cut back: room again, and the same line fits whole
        assert os.write(fd, b"record\n") == 7
        os.close(fd)
    assert (backing / "log").read_bytes() == b"record\n"
    assert cut.fired is not None and cut.fired.then_failed is None
    cut.cleanup()


#: Appends two records to a file through one Node.js API, writing the rest of a short write
#: as the examples do, and prints what each append did.
NODE_APPENDS = r"""
const fs = require("fs"), fsp = require("fs/promises");
const [api, file] = process.argv.slice(1);
async function append(fh, data) {
  if (api === "writeSync") {
    for (let done = 0; done < data.length;) done += fs.writeSync(fh.fd, data, done);
  } else if (api === "FileHandle.write") {
    for (let done = 0; done < data.length;) done += (await fh.write(data, done)).bytesWritten;
  } else {
    const stream = fs.createWriteStream(null, { fd: fh.fd, autoClose: false });
    stream.on("error", () => {});
    await new Promise((resolve, reject) => stream.write(data, (e) => (e ? reject(e) : resolve())));
  }
}
(async () => {
  const fh = await fsp.open(file, "a");
  const said = [];
  for (const record of ["first record\n", "second record\n"]) {
    try { await append(fh, Buffer.from(record)); said.push("ok"); } catch (e) { said.push(e.code); }
  }
  await fh.close();
  console.log(JSON.stringify(said));
})();
"""


@pytest.mark.rule("CRASH-SYS-18")
@pytest.mark.parametrize("api", ["writeSync", "FileHandle.write", "stream"])
def test_node_sees_a_partial_write_through_each_api(dirs: tuple[Path, Path], api: str) -> None:
    """libuv writes the rest of a short write itself and, when that fails, returns the short
    count without the error; the application's retry of the rest (the examples' loop, the
    stream's own) fails too, so the error reaches the caller with the stored bytes left."""
    node = shutil.which("node")
    assert node is not None, "this test needs node on PATH"
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("write", "log", 2, "ENOSPC", partial=5))
    with mount:
        done = subprocess.run(
            [node, "-e", NODE_APPENDS, api, str(mnt / "log")],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == ["ok", "ENOSPC"]
    assert (backing / "log").read_bytes() == b"first record\nsecon"
    fired = mount.fired
    assert fired is not None and fired.rest_failed == 2, mount.status()  # libuv's, then ours
    mount.cleanup()


def test_a_plan_that_names_a_path_never_touched_reports_not_fired(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt, FaultPlan("fsync", "never/there", 1, "EIO"))
    with mount:
        for i in range(3):
            _do("fsync", mnt, "elsewhere", i)
        assert mount.fired is None
    assert mount.fired is None and mount.seen() == 0
    seen = "the daemon saw 0 fsync call(s) there"
    assert mount.status() == f"not fired: fsync #1 on never/there: {seen}"
    mount.cleanup()


def test_the_mount_is_gone_after_exit_even_when_the_daemon_is_killed(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    mount = FaultMount(backing, mnt)
    with mount:
        (mnt / "f").write_bytes(b"x")
        held = os.open(mnt / "f", os.O_RDONLY)  # something still holds the mount
        assert mount.pid is not None
        os.kill(mount.pid, signal.SIGKILL)
        assert mount.process is not None and mount.process.wait(timeout=10) == -signal.SIGKILL
        with pytest.raises(OSError) as dead:
            os.stat(mnt / "f")
        assert dead.value.errno == errno.ENOTCONN
        assert is_mounted(mnt)
    assert not is_mounted(mnt)
    with pytest.raises(OSError) as gone:  # closed all the same; its flush had nowhere to go
        os.close(held)
    assert gone.value.errno == errno.ENOTCONN
    assert os.listdir(mnt) == [] and (backing / "f").read_bytes() == b"x"
    # and an ordinary exit with a file still open unmounts too (lazily)
    again = FaultMount(backing, mnt)
    with again:
        held = os.open(mnt / "f", os.O_RDONLY)
    assert not is_mounted(mnt)
    with pytest.raises(OSError) as gone:  # the daemon stopped once the mount was detached
        os.close(held)
    assert gone.value.errno == errno.ENOTCONN
    mount.cleanup()
    again.cleanup()


def test_a_plan_is_checked_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="op must be"):
        FaultPlan("read", "f", 1, "EIO")
    with pytest.raises(ValueError, match="errno"):
        FaultPlan("write", "f", 1, "EWHAT")
    with pytest.raises(ValueError, match="counts from 1"):
        FaultPlan("write", "f", 0, "EIO")
    with pytest.raises(ValueError, match="partial"):
        FaultPlan("fsync", "f", 1, "EIO", partial=3)
    plan = FaultPlan("write", "./a//b/", 1, "EIO", partial=2)
    assert plan.path == "/a/b" and plan.relative == "a/b"
    assert FaultPlan.from_json(orjson.loads(orjson.dumps(plan.to_json()))) == plan


# -- seen from strace -------------------------------------------------------------------------

TRACED = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
results = []
for chunk in (b"0123456789", b"abcdefghij", b"ABCDEFGHIJ", b"klmnopqrst"):
    try:
        results.append(os.write(fd, chunk))
    except OSError as exc:
        results.append(exc.errno)
os.close(fd)
print(results)
"""


def test_strace_sees_a_short_write_and_a_plain_failed_call(dirs: tuple[Path, Path]) -> None:
    why = strace.unavailable()
    assert why is None, f"this test needs strace ({why}); .ci/run installs it"
    backing, mnt = dirs
    trace = dirs[0].parent / "trace"
    mount = FaultMount(backing, mnt, FaultPlan("write", "f", 2, "ENOSPC", partial=4))
    with mount:
        done = subprocess.run(
            ["strace", "-f", "-o", str(trace), "--", sys.executable, "-c", TRACED, str(mnt / "f")],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[10, 4, {errno.ENOSPC}, 10]"
    writes = [line for line in trace.read_text().splitlines() if "write(3, " in line]
    assert len(writes) == 4, writes
    assert writes[0].endswith("= 10") and writes[1].endswith("= 4")
    assert writes[2].endswith("= -1 ENOSPC (No space left on device)")
    assert writes[3].endswith("= 10")
    assert "INJECTED" not in trace.read_text()
    assert (backing / "f").read_bytes() == b"0123456789abcdklmnopqrst"
    mount.cleanup()


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from scopecheck.crashsim import fuse_faults

    monkeypatch.setattr(fuse_faults, "_libfuse3", lambda: None)
    why = fuse_faults.unavailable.__wrapped__()
    assert why == "libfuse 3 is not installed (Debian: apt-get install fuse3)"
    monkeypatch.setattr(fuse_faults.os.path, "exists", lambda path: path != "/dev/fuse")
    assert fuse_faults.unavailable.__wrapped__().startswith("no /dev/fuse")


def test_a_parent_that_dies_without_closing_leaves_no_mount(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    code = """
    import os, sys
    from scopecheck.crashsim.fuse_faults import FaultMount
    FaultMount(sys.argv[1], sys.argv[2]).start()
    os._exit(0)  # no close, no atexit: the daemon gets SIGTERM and libfuse unmounts
    """
    done = _run(code, str(backing), str(mnt))
    assert done.returncode == 0, done.stderr
    for _ in range(500):
        if not is_mounted(mnt):
            break
        time.sleep(0.01)
    assert not is_mounted(mnt)
    # The daemon, its parent gone, removes the state folder nobody will read (INSTALL-21).
    state = Path(tempfile.gettempdir())
    for _ in range(1000):
        if not list(state.glob("scopecheck-fuse-*")):
            break
        time.sleep(0.01)
    assert not list(state.glob("scopecheck-fuse-*"))
