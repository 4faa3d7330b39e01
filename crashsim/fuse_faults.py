"""I/O faults for a backend in another process, injected by a FUSE file system in front of its
root instead of by strace.

strace's ``-e inject=write:error=EIO:when=N`` counts ``N`` per *thread* and per system call
name, so in a backend with several threads (Go's runtime, Node's libuv pool) the fault lands
on whichever thread reaches its N-th ``write`` first -- the protocol pipe or an eventfd as
often as a data file -- and it cannot make a short write.  Here the backend's root is a
passthrough FUSE mount over a backing directory, served by a separate daemon process
(``python -m scopecheck.crashsim.fuse_faults SERVE ...``).  The daemon runs single-threaded, so
it counts every operation on every path across all of the backend's threads and processes in
the one order it receives them, and a :class:`FaultPlan` names the call by what it does:
"the 3rd ``write`` to ``data/log.jsonl``".  Only files under the mount are ever touched.

>>> plan = FaultPlan("write", "data/log.jsonl", ordinal=3, errno="ENOSPC", partial=10)
>>> with FaultMount(backing, mountpoint, plan) as mount:    # doctest: +SKIP
...     run_backend(root=mountpoint)
...     print(mount.status())

The daemon reports what fired (op, path, ordinal, bytes, the calling thread, time) as JSON
lines in a report file the parent reads: :attr:`FaultMount.fired`, :meth:`FaultMount.status`.
:func:`unavailable` says why FUSE cannot run here.  The daemon needs libfuse 3 (Debian package
``fuse3``) and the pure-Python binding ``mfusepy``; it is imported only in the daemon.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno as errno_mod
import functools
import importlib.util
import logging
import os
import posixpath
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import orjson

#: The operations a plan can fault.  ``fsync`` covers fsync and fdatasync of files and
#: directories; ``truncate`` covers truncate(2), ftruncate(2) and an open with ``O_TRUNC`` of an
#: existing file (the kernel sends that as an open); ``create`` is an open with ``O_CREAT`` that
#: makes a new file; ``rename`` is counted on its source path.
OPS = ("write", "fsync", "truncate", "create", "rename", "unlink", "mkdir", "rmdir")

_SUBTYPE = "scopecheck"
# libfuse 3's FUSE_CAP_* bits (fuse_common.h) the daemon turns off: the kernel's writeback
# cache (writes would reach the daemon late, merged and reordered) and asynchronous direct I/O
# (an O_DIRECT write could arrive as parallel requests).
_CAP_ASYNC_DIO = 1 << 15
_CAP_WRITEBACK_CACHE = 1 << 16


def _normal(path: str) -> str:
    """A path relative to the mount root as the daemon sees it: ``"/a/b"``; the root is ``"/"``."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + posixpath.normpath("/".join(parts)).lstrip("/") if parts else "/"


def _errno_number(name: str) -> int:
    number = getattr(errno_mod, name, None)
    if not isinstance(number, int) or errno_mod.errorcode.get(number) is None:
        raise ValueError(f"not an errno name: {name!r}")
    return number


def _check_op(_: object, __: object, op: str) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")


def _check_ordinal(_: object, __: object, ordinal: int) -> None:
    if ordinal < 1:
        raise ValueError("ordinal counts from 1")


def _check_errno(_: object, __: object, name: str) -> None:
    _errno_number(name)


@attrs.frozen
class FaultPlan:
    """Fail the ``ordinal``-th ``op`` on ``path`` (relative to the mount root; for ``rename``
    the source) with ``errno``, counted across all threads and processes in the order the
    daemon receives the calls.  The fault fires once; later calls pass through.

    With ``partial=k`` (``write`` only) that write stores its first ``k`` bytes and returns
    ``k`` -- a real short write -- and the rest of its bytes never fit: the *next* write to the
    path fails with ``errno``, as the kernel does when a disk fills up, and so does every
    later write that carries on with the rest (at the end of what was stored, beginning with
    the bytes that did not fit), whoever retries it -- libuv retries a short write inside
    ``fs.writeSync``, ``FileHandle.write`` and write streams and, when that retry fails,
    returns the short count and drops the error, so the application's own retry of the rest
    is what must fail for a Node backend to see it; Go's ``(*os.File).Write`` retries once and
    returns the error (CRASH-SYS-18).  The first write to the path that is not the rest
    (a cut-back file's next line, the next record appended after the stored bytes) and any
    truncate of it pass: the disk has room again.  A write of ``k`` bytes or fewer is
    shortened to one byte less than it asked for (:attr:`Fired.written` says what was
    stored); a one-byte write simply fails."""

    op: str = attrs.field(validator=_check_op)
    path: str = attrs.field(converter=_normal)
    ordinal: int = attrs.field(validator=_check_ordinal)
    errno: str = attrs.field(validator=_check_errno)
    partial: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.partial is not None and (self.op != "write" or self.partial < 1):
            raise ValueError("partial=k is for write faults, with k >= 1")

    @property
    def relative(self) -> str:
        return self.path.lstrip("/") or "."

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "path": self.path,
            "ordinal": self.ordinal,
            "errno": self.errno,
            "partial": self.partial,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FaultPlan:
        return cls(raw["op"], raw["path"], raw["ordinal"], raw["errno"], raw.get("partial"))


@attrs.frozen
class Fired:
    """What the daemon did: the faulted call (``op`` on ``path``, its ``ordinal``), the errno
    the application saw (for a partial write, the errno of the write after it), the calling
    thread id the kernel gave (0 for page writeback of a shared ``mmap``), ``time`` (the
    daemon's ``time.time()``), and for writes the ``offset`` and bytes ``requested``/
    ``written``.  After a partial write, ``then_failed`` is the ordinal of the first write that
    got the error, or ``None`` if no further write to the path came, and ``rest_failed`` how
    many writes failed in all (that one and the retries of the rest after it)."""

    op: str
    path: str
    ordinal: int
    errno: str
    tid: int
    time: float
    offset: int | None = None
    requested: int | None = None
    written: int | None = None
    then_failed: int | None = None
    rest_failed: int = 0


# -- the parent's side ------------------------------------------------------------------------


def _mountinfo_points() -> set[str]:
    points: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split(" ")
            if len(fields) > 4:
                # mountinfo escapes space, tab, newline and backslash as octal
                point = fields[4]
                for code in ("\\040", "\\011", "\\012", "\\134"):
                    point = point.replace(code, chr(int(code[1:], 8)))
                points.add(point)
    return points


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """Whether anything is mounted on ``mountpoint`` (read from ``/proc/self/mountinfo``)."""
    return os.path.abspath(mountpoint) in _mountinfo_points()


def _unmount(mountpoint: str, *, lazy: bool) -> bool:
    commands = [
        ["fusermount3", "-uz" if lazy else "-u", mountpoint],
        ["fusermount", "-uz" if lazy else "-u", mountpoint],
        ["umount", "-l", mountpoint] if lazy else ["umount", mountpoint],
    ]
    for command in commands:
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, capture_output=True, check=False, timeout=30)
        if done.returncode == 0 or not is_mounted(mountpoint):
            return True
    return not is_mounted(mountpoint)


_live: dict[int, FaultMount] = {}


def _unmount_leftovers() -> None:  # pragma: no cover - the safety net at interpreter exit
    for mount in list(_live.values()):
        with contextlib.suppress(Exception):
            mount.close()


class FaultMount:
    """A FUSE mount of ``backing`` on ``mountpoint`` (both existing directories), served by a
    daemon process, with an optional :class:`FaultPlan`.  ``with FaultMount(...) as mount``
    returns once the mount is live; leaving the block unmounts it (lazily if the daemon died
    or something still holds it open) and never leaves a stale mount behind.

    The daemon's report and log live in a state folder of their own while it runs; closing
    reads them into memory and removes the folder, so what the run did stays readable
    (:meth:`events`, :meth:`log`) and nothing is left in the temporary directory
    (INSTALL-21)."""

    def __init__(
        self,
        backing: str | os.PathLike[str],
        mountpoint: str | os.PathLike[str],
        plan: FaultPlan | None = None,
        *,
        timeout: float = 20.0,
    ) -> None:
        self.backing = os.path.abspath(backing)
        self.mountpoint = os.path.abspath(mountpoint)
        self.plan = plan
        self.timeout = timeout
        self._state = ""
        self.report_path = ""
        self.log_path = ""
        self.process: subprocess.Popen[bytes] | None = None
        #: The report and the log as the daemon left them, read when the mount closed.
        self._kept: tuple[bytes, str] | None = None

    # lifecycle

    def __enter__(self) -> FaultMount:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this FaultMount was started already")
        for path in (self.backing, self.mountpoint):
            if not os.path.isdir(path):
                raise FileNotFoundError(f"not a directory: {path}")
        if is_mounted(self.mountpoint):
            raise RuntimeError(f"something is mounted on {self.mountpoint} already")
        self._state = tempfile.mkdtemp(prefix="scopecheck-fuse-")
        self.report_path = os.path.join(self._state, "report.jsonl")
        self.log_path = os.path.join(self._state, "daemon.log")
        command = [sys.executable, "-m", "scopecheck.crashsim.fuse_faults", "SERVE"]
        command += [self.backing, self.mountpoint, self.report_path]
        if self.plan is not None:
            command.append(orjson.dumps(self.plan.to_json()).decode())
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    cwd="/",
                    start_new_session=True,
                )
        except BaseException:
            self._keep()
            raise
        _live[id(self)] = self
        try:
            self._wait_live()
        except BaseException:
            self.close()
            raise

    def _wait_live(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if any(e.get("event") == "ready" for e in self.events()) and is_mounted(
                self.mountpoint
            ):
                os.stat(self.mountpoint)  # answered by the daemon
                return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the FUSE daemon exited with {self.process.returncode} before the mount "
                    f"was live: {self.log()[-2000:]}"
                )
            time.sleep(0.01)
        raise TimeoutError(f"the FUSE mount was not live after {self.timeout} s: {self.log()}")

    def close(self) -> None:
        """Unmount and reap the daemon; idempotent.  Raises if the mount could not be removed."""
        process = self.process
        if process is None:
            return
        try:
            lazy = False
            if is_mounted(self.mountpoint):
                daemon_alive = process.poll() is None
                if not (daemon_alive and _unmount(self.mountpoint, lazy=False)):
                    lazy = _unmount(self.mountpoint, lazy=True)
            if lazy and process.poll() is None:
                # Detached but still held open by someone: the daemon would serve the holders
                # until they close.  It stops now; their calls fail with ENOTCONN.
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if is_mounted(self.mountpoint):
                _unmount(self.mountpoint, lazy=True)
            if is_mounted(self.mountpoint):
                raise RuntimeError(f"could not unmount {self.mountpoint}")
        finally:
            _live.pop(id(self), None)
            if process.poll() is not None:
                self._keep()

    def _keep(self) -> None:
        """Read the report and the log into memory and remove the state folder."""
        if self._kept is not None or not self._state:
            return
        self._kept = (self._report_bytes(), self.log())
        shutil.rmtree(self._state, ignore_errors=True)

    def cleanup(self) -> None:
        """Remove the state folder now (closing removes it too: kept for callers that ask)."""
        if self.process is None or self.process.poll() is not None:
            self._keep()

    # what happened

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def log(self) -> str:
        if self._kept is not None:
            return self._kept[1]
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def _report_bytes(self) -> bytes:
        if self._kept is not None:
            return self._kept[0]
        try:
            return Path(self.report_path).read_bytes()
        except OSError:
            return b""

    def events(self) -> list[dict[str, Any]]:
        """The daemon's report so far: ``ready``, ``fired``, ``then_failed``, ``exit`` events."""
        raw = self._report_bytes()
        events = []
        for line in raw.splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                events.append(orjson.loads(line))
        return events

    @property
    def fired(self) -> Fired | None:
        """What the plan did, or ``None`` if it has not fired (yet)."""
        fired: dict[str, Any] | None = None
        for event in self.events():
            if event.get("event") == "fired":
                fired = {k: v for k, v in event.items() if k != "event"}
            elif event.get("event") == "then_failed" and fired is not None:
                fired.setdefault("then_failed", event["ordinal"])
                fired["rest_failed"] = fired.get("rest_failed", 0) + 1
                fired["errno"] = event["errno"]
        return None if fired is None else Fired(**fired)

    def seen(self) -> int | None:
        """How many of the plan's op the daemon received on the plan's path (once it exited)."""
        for event in self.events():
            if event.get("event") == "exit":
                return int(event["seen"])
        return None

    def status(self) -> str:
        """One line: what fired, or that the plan never fired and how many calls there were."""
        plan = self.plan
        if plan is None:
            return "no fault plan"
        fired = self.fired
        name = f"{plan.op} #{plan.ordinal} on {plan.relative}"
        if fired is None:
            seen = self.seen()
            counted = "" if seen is None else f": the daemon saw {seen} {plan.op} call(s) there"
            return f"not fired: {name}{counted}"
        if fired.written is not None and plan.partial is not None:
            after = (
                f"write #{fired.then_failed} failed with {fired.errno}"
                if fired.then_failed is not None
                else "no write came after it"
            )
            if fired.rest_failed > 1:
                after += f", and {fired.rest_failed - 1} retry(s) of the rest after it"
            return (
                f"fired: {name} wrote {fired.written} of {fired.requested} bytes at offset "
                f"{fired.offset}; {after}"
            )
        return f"fired: {name} failed with {fired.errno} (thread {fired.tid})"


def _libfuse3() -> str | None:
    return ctypes.util.find_library("fuse3")


@functools.cache
def unavailable() -> str | None:
    """Why a FUSE mount cannot be served here, or ``None``: no ``/dev/fuse``, no permission to
    open it or to mount, no libfuse 3, no ``mfusepy``, or a trial mount that fails."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the fuse kernel module is not loaded or not in this container)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        return f"/dev/fuse cannot be opened: {exc}"
    if _libfuse3() is None:
        return "libfuse 3 is not installed (Debian: apt-get install fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "the Python package mfusepy is not installed"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 (Debian: apt-get install fuse3)"
    with tempfile.TemporaryDirectory(prefix="scopecheck-fuse-probe-") as tmp:
        backing, mountpoint = os.path.join(tmp, "b"), os.path.join(tmp, "m")
        os.mkdir(backing)
        os.mkdir(mountpoint)
        probe = FaultMount(backing, mountpoint, timeout=30)
        try:
            with probe:
                Path(mountpoint, "probe").write_bytes(b"ok")
                if Path(backing, "probe").read_bytes() != b"ok":
                    return "a trial FUSE mount did not pass a write through"
        except (OSError, RuntimeError, TimeoutError) as exc:
            return f"a trial FUSE mount failed: {exc}"
        finally:
            probe.cleanup()
    return None


# -- the daemon ---------------------------------------------------------------------------------


@attrs.frozen
class _Rest:
    """The bytes a partial write could not store (``data``), where they would have gone
    (``offset``: the end of what was stored), and how many writes have ``failed`` since."""

    offset: int
    data: bytes
    failed: int = 0

    def refuses(self, data: bytes, offset: int) -> bool:
        """Whether a write of ``data`` at ``offset`` fails: the first write after the partial
        one does, whatever it is (the disk is full), and so does any write carrying on with
        the rest -- at ``offset``, its bytes and the rest's agreeing as far as both go (the rest
        retried whole, in pieces, or with more after it)."""
        if self.failed == 0:
            return True
        size = min(len(data), len(self.data))
        return offset == self.offset and size > 0 and data[:size] == self.data[:size]


class _Passthrough:
    """The daemon's operations (mfusepy calls them by name, with ``raw_fi``): every call goes to
    the same path under the backing directory, unless the plan says to fail it."""

    use_ns = True

    def __init__(self, backing: str, plan: FaultPlan | None, report: str) -> None:
        self.backing = backing
        self.plan = plan
        self.report_fd = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.seen = 0
        self.fired = False
        self.rest: _Rest | None = None  # after a partial write: the bytes that did not fit
        self.fh_paths: dict[int, str] = {}
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.context: Any = None  # mfusepy.fuse_get_context, set by serve()

    # bookkeeping

    def _emit(self, event: str, **fields: Any) -> None:
        line = orjson.dumps({"event": event, **fields}) + b"\n"
        os.write(self.report_fd, line)

    def _tid(self) -> int:
        return int(self.context()[2]) if self.context is not None else 0

    def _real(self, path: str) -> str:
        return self.backing + path if path != "/" else self.backing

    def _path(self, path: str | None, fh: int | None) -> str:
        if path is not None:
            return path
        return self.fh_paths.get(fh, "") if fh is not None else ""

    def _fault(self, op: str, path: str) -> None:
        """Count ``op`` on ``path``; raise the plan's error if this is the call it names."""
        plan = self.plan
        if plan is None or op != plan.op or path != plan.path:
            return
        self.seen += 1
        if self.fired or self.seen != plan.ordinal:
            return
        self.fired = True
        self._emit(
            "fired", op=op, path=plan.relative, ordinal=self.seen, errno=plan.errno,
            tid=self._tid(), time=time.time(),
        )  # fmt: skip
        raise OSError(_errno_number(plan.errno), os.strerror(_errno_number(plan.errno)))

    def _room(self, path: str) -> None:
        """A truncate of the partial write's path frees room: the rest may be written again."""
        if self.plan is not None and path == self.plan.path:
            self.rest = None

    # attributes and directories

    def getattr(self, path: str | None, fh: Any = None) -> dict[str, Any]:
        if fh is not None:
            st = os.fstat(fh.fh if hasattr(fh, "fh") else fh)
        elif path is not None:
            st = os.lstat(self._real(path))
        else:
            raise OSError(errno_mod.EBADF, "no path and no handle")
        return {
            "st_mode": st.st_mode,
            "st_ino": st.st_ino,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_rdev": st.st_rdev,
            "st_blocks": st.st_blocks,
            "st_blksize": st.st_blksize,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def opendir(self, path: str) -> int:
        return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str | None, fh: int) -> list[Any]:
        entries: list[Any] = [".", ".."]
        with os.scandir(self._real(path) if path is not None else fh) as it:
            for entry in it:
                mode = entry.stat(follow_symlinks=False).st_mode
                entries.append((entry.name, {"st_mode": mode, "st_ino": entry.inode()}, 0))
        return entries

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._fault("fsync", self._path(path, None))
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._fault("mkdir", path)
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._fault("rmdir", path)
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        self._fault("unlink", path)
        os.unlink(self._real(path))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._real(target))  # mfusepy: the new link is `target`
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self._real(source), self._real(target), follow_symlinks=False)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        self._fault("rename", old)
        if flags == 0:
            os.rename(self._real(old), self._real(new))
            return 0
        at_fdcwd = -100
        done = self.libc.renameat2(
            at_fdcwd, os.fsencode(self._real(old)), at_fdcwd, os.fsencode(self._real(new)), flags
        )
        if done != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return 0

    def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
        if fh is not None:
            os.fchmod(fh, mode)
        else:
            os.chmod(self._real(self._path(path, fh)), mode, follow_symlinks=False)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._real(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str | None, times: Any, fh: int | None) -> int:
        # The raw timespec pair goes to utimensat, so UTIME_NOW and UTIME_OMIT pass through.
        pointer = ctypes.cast(times, ctypes.c_void_p) if times else None
        if fh is not None:
            done = self.libc.futimens(fh, pointer)
        else:
            at_fdcwd, at_symlink_nofollow = -100, 0x100
            real = os.fsencode(self._real(self._path(path, fh)))
            done = self.libc.utimensat(at_fdcwd, real, pointer, at_symlink_nofollow)
        if done != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
        return {name: getattr(st, name) for name in (*names, "f_favail", "f_namemax")}

    # files

    def _backing_flags(self, flags: int) -> int:
        # The kernel gives every write its offset (it keeps O_APPEND's end of file), and O_DIRECT
        # would ask the backing file system for aligned buffers.
        return flags & ~(os.O_APPEND | getattr(os, "O_DIRECT", 0))

    def _set_fi(self, fi: Any, fd: int, path: str) -> None:
        fi.fh = fd
        fi.direct_io = 0
        fi.keep_cache = 0
        self.fh_paths[fd] = path

    def open(self, path: str, fi: Any) -> int:
        if fi.flags & os.O_TRUNC:
            self._fault("truncate", path)
            self._room(path)
        self._set_fi(fi, os.open(self._real(path), self._backing_flags(fi.flags)), path)
        return 0

    def create(self, path: str, mode: int, fi: Any) -> int:
        self._fault("create", path)
        flags = self._backing_flags(fi.flags) | os.O_CREAT
        self._set_fi(fi, os.open(self._real(path), flags, mode), path)
        return 0

    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        return os.pread(fi.fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        path = self._path(path, fi.fh)
        plan = self.plan
        if plan is None or plan.op != "write" or path != plan.path:
            return os.pwrite(fi.fh, data, offset)
        self.seen += 1
        if self.rest is not None:
            if self.rest.refuses(data, offset):
                self.rest = attrs.evolve(self.rest, failed=self.rest.failed + 1)
                self._emit("then_failed", ordinal=self.seen, errno=plan.errno, tid=self._tid())
                code = _errno_number(plan.errno)
                raise OSError(code, os.strerror(code))
            self.rest = None
        if self.fired or self.seen != plan.ordinal:
            return os.pwrite(fi.fh, data, offset)
        self.fired = True
        written = 0
        if plan.partial is not None:
            written = min(plan.partial, len(data) - 1)
            if written > 0:
                written = os.pwrite(fi.fh, data[:written], offset)
        self._emit(
            "fired", op="write", path=plan.relative, ordinal=self.seen, errno=plan.errno,
            tid=self._tid(), time=time.time(), offset=offset, requested=len(data), written=written,
        )  # fmt: skip
        if written > 0:
            self.rest = _Rest(offset + written, data[written:])
            return written
        code = _errno_number(plan.errno)
        raise OSError(code, os.strerror(code))

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        self._fault("truncate", self._path(path, fh))
        self._room(self._path(path, fh))
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(self._path(path, fh)), length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fi: Any) -> int:
        done = self.libc.fallocate(
            fi.fh, ctypes.c_int(mode), ctypes.c_long(offset), ctypes.c_long(size)
        )
        if done != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return 0

    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        self._fault("fsync", self._path(path, fi.fh))
        if datasync:
            os.fdatasync(fi.fh)
        else:
            os.fsync(fi.fh)
        return 0

    def flush(self, path: str | None, fi: Any) -> int:
        return 0

    def release(self, path: str | None, fi: Any) -> int:
        self.fh_paths.pop(fi.fh, None)
        os.close(fi.fh)
        return 0

    # the session

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            conn.want &= ~(_CAP_WRITEBACK_CACHE | _CAP_ASYNC_DIO)
        if config is not None:
            config.entry_timeout = 0.0
            config.negative_timeout = 0.0
            config.attr_timeout = 0.0
            config.ac_attr_timeout_set = 1
            config.ac_attr_timeout = 0.0
            # An unlinked open file is unlinked in the backing directory too, not renamed to
            # .fuse_hidden*; its calls with a handle get path None and use the handle.
            config.hard_remove = 1
            config.use_ino = 1
            # Calls on an open file get its current name (after renames), which is what the
            # plan counts by; None only once it is unlinked.
            config.nullpath_ok = 0
            config.direct_io = 0
            config.kernel_cache = 0
            config.auto_cache = 0
        self._emit(
            "ready", pid=os.getpid(), time=time.time(),
            want=None if conn is None else int(conn.want),
            max_write=None if conn is None else int(conn.max_write),
        )  # fmt: skip

    def finish(self) -> None:
        self._emit("exit", seen=self.seen, fired=self.fired, time=time.time())
        os.close(self.report_fd)


def _die_with_parent() -> None:
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def serve(backing: str, mountpoint: str, report: str, plan: FaultPlan | None) -> int:
    """The daemon: mount ``backing`` on ``mountpoint`` and serve until unmounted (libfuse's
    own handlers unmount on SIGTERM, SIGINT and SIGHUP; the daemon gets SIGTERM if its parent
    dies, and then removes the state folder its parent would have read: INSTALL-21)."""
    parent = os.getppid()
    _die_with_parent()
    os.umask(0)  # the kernel already applied the caller's umask to modes
    library = _libfuse3()
    if library is None:
        print("libfuse 3 is not installed", file=sys.stderr)
        return 2
    os.environ.setdefault("FUSE_LIBRARY_PATH", library)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import mfusepy  # type: ignore[import-untyped]

    class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
        # mfusepy drops rename's flags and the file handle of a few calls, and turns the
        # timestamps into numbers (losing UTIME_NOW/UTIME_OMIT): these hand them over.

        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            ops: _Passthrough = self.operations
            return ops.rename(os.fsdecode(old), os.fsdecode(new), flags)

        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            ops: _Passthrough = self.operations
            fh = fip.contents.fh if fip else None
            return ops.truncate(None if path is None else os.fsdecode(path), length, fh)

        def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
            ops: _Passthrough = self.operations
            fh = fip.contents.fh if fip else None
            return ops.chmod(None if path is None else os.fsdecode(path), mode, fh)

        def utimens_fuse_3(self, path: bytes | None, times: Any, fip: Any) -> int:
            ops: _Passthrough = self.operations
            fh = fip.contents.fh if fip else None
            return ops.utimens(None if path is None else os.fsdecode(path), times, fh)

    if mfusepy.fuse_version_major != 3:
        print(f"need libfuse 3, loaded {mfusepy.fuse_version_major}", file=sys.stderr)
        return 2
    ops = _Passthrough(os.path.abspath(backing), plan, report)
    ops.context = mfusepy.fuse_get_context
    try:
        _Fuse(
            ops,
            mountpoint,
            raw_fi=True,
            foreground=True,
            nothreads=True,  # one thread: one order of receipt for every call
            fsname=f"{_SUBTYPE}:{backing}",
            subtype=_SUBTYPE,
            default_permissions=True,
        )
    finally:
        ops.finish()
        state = os.path.dirname(os.path.abspath(report))
        if os.getppid() != parent and os.path.basename(state).startswith("scopecheck-fuse-"):
            shutil.rmtree(state, ignore_errors=True)  # nobody is left to read it
    return 0


# -- measuring ----------------------------------------------------------------------------------


def _round_trips(directory: str, rounds: int, size: int, *, sync: bool) -> list[float]:
    path = os.path.join(directory, "bench")
    data = b"x" * size
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            os.write(fd, data)
            if sync:
                os.fsync(fd)
            times.append(time.perf_counter() - start)
        return times
    finally:
        os.close(fd)
        os.unlink(path)


def _ops(directory: str, rounds: int) -> list[float]:
    times = []
    for i in range(rounds):
        start = time.perf_counter()
        path = os.path.join(directory, f"f{i}")
        with open(path, "wb") as f:
            f.write(b"y" * 100)
        os.rename(path, path + ".r")
        os.stat(path + ".r")
        os.unlink(path + ".r")
        times.append(time.perf_counter() - start)
    return times


def bench(rounds: int = 300, size: int = 4096) -> dict[str, float]:
    """Median µs of a ``size``-byte write plus fsync, of the write alone, and of
    create-write-close-rename-stat-unlink, directly on a directory and through a mount of it
    (the same backing file system); and the seconds to mount and unmount."""
    with tempfile.TemporaryDirectory(prefix="scopecheck-fuse-bench-") as tmp:
        backing, mountpoint = os.path.join(tmp, "b"), os.path.join(tmp, "m")
        os.mkdir(backing)
        os.mkdir(mountpoint)
        plain = _round_trips(backing, rounds, size, sync=True)
        plain_writes = _round_trips(backing, rounds, size, sync=False)
        plain_ops = _ops(backing, rounds)
        mount = FaultMount(backing, mountpoint)
        with mount:
            start = time.perf_counter()
            fused = _round_trips(mountpoint, rounds, size, sync=True)
            fused_writes = _round_trips(mountpoint, rounds, size, sync=False)
            fused_ops = _ops(mountpoint, rounds)
            elapsed = time.perf_counter() - start
        mount.cleanup()
        t0 = time.perf_counter()
        with FaultMount(backing, mountpoint) as again:
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        again.cleanup()
    us = 1e6
    return {
        "write_fsync_plain_us": statistics.median(plain) * us,
        "write_fsync_mount_us": statistics.median(fused) * us,
        "write_plain_us": statistics.median(plain_writes) * us,
        "write_mount_us": statistics.median(fused_writes) * us,
        "file_ops_plain_us": statistics.median(plain_ops) * us,
        "file_ops_mount_us": statistics.median(fused_ops) * us,
        "mount_s": t1 - t0,
        "unmount_s": t2 - t1,
        "through_mount_total_s": elapsed,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["SERVE"] and len(argv) in (4, 5):
        plan = FaultPlan.from_json(orjson.loads(argv[4])) if len(argv) == 5 else None
        return serve(argv[1], argv[2], argv[3], plan)
    if argv[:1] == ["BENCH"]:
        print(orjson.dumps(bench(), option=orjson.OPT_INDENT_2).decode())
        return 0
    print(
        "usage: python -m scopecheck.crashsim.fuse_faults SERVE BACKING MOUNTPOINT REPORT "
        "[PLAN_JSON] | BENCH",
        file=sys.stderr,
    )
    return 2


# Leave no mount behind when the interpreter exits with one still up.
atexit.register(_unmount_leftovers)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
