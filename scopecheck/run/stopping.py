"""Stopping a run from outside: signals, and the supervisor that leaves nothing behind.

A CI job is cancelled with SIGTERM (or SIGINT, or SIGHUP when its terminal goes); a run may
also hang where no alarm reaches it (code holding the interpreter in C).  Either way the user
must get the verdict so far, within a few seconds, and find no temp folder, mount or process
of ours afterwards (INSTALL-21).  Two pieces do it:

* :func:`signals_stop_the_run`: in the process doing the work, SIGTERM and SIGHUP raise
  :class:`Signalled` -- a ``KeyboardInterrupt``, as SIGINT's is -- so every ``finally`` block
  stops its backend processes, strace and FUSE daemons, and the command prints the verdict so
  far.  A second signal while it stops is noted, not raised, so the stopping is not cut short.
* :func:`supervise`: the command's process forks; the child does the work in a scratch folder
  of its own (its ``TMPDIR``), and the parent -- which runs nothing of the backend's -- waits.
  It passes a signal on to the child, and kills the child after :data:`STOP_GRACE` seconds if
  it has not stopped by then, or when the run outlives its hard end (a hang).  Being the
  subreaper of everything the child starts (``PR_SET_CHILD_SUBREAPER``), it then kills every
  process left, unmounts every mount left in the scratch folder, removes the folder, and when
  the child could not print its verdict, prints the one it last saved
  (``$SCOPECHECK_VERDICT_SO_FAR``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

#: ``$SCOPECHECK_VERDICT_SO_FAR``: a file the run rewrites with its verdict so far after every
#: phase update, for the supervisor that must report it if the run is killed.
SO_FAR_ENV = "SCOPECHECK_VERDICT_SO_FAR"
#: Seconds a stopped child has to print its verdict so far and exit before it is killed.
STOP_GRACE = 10.0
#: The signal the supervisor sends its child when the run outlived its hard end (a hang).
HANG_SIGNAL = signal.SIGUSR1
_PR_SET_CHILD_SUBREAPER = 36

#: The signals that stop a run, by the name a verdict says.
STOPPING = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class Signalled(KeyboardInterrupt):
    """A signal stopped the run: ``signal`` is its name (``"SIGTERM"``), or ``"hang"`` when
    the supervisor stopped a run that outlived its hard end."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.signal = name
        #: The signal's number, to give it back when it could not be raised.
        self.signum: int = int(signal.SIGTERM)


@contextlib.contextmanager
def signals_stop_the_run() -> Iterator[None]:
    """Inside the block, SIGINT, SIGTERM, SIGHUP and the supervisor's hang signal raise
    :class:`Signalled` in the main thread, once: later ones while the run stops are ignored.
    The previous handlers come back at the end.  Off the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = _raise_on_signals()
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _raise_on_signals() -> dict[int, Any]:
    """Make the stopping signals raise :class:`Signalled`, once; the handlers before.

    Once -- unless Python could not raise it: a signal that lands in a garbage-collection
    callback or a ``__del__`` has its exception printed as "ignored" and the run goes on.  The
    unraisable hook then gives the signal back to the process, so it is raised again at the
    next place that can raise."""
    raised = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        del frame
        if raised:
            return
        raised = True
        error = Signalled(STOPPING.get(signal.Signals(signum), "hang"))
        error.signum = signum
        raise error

    before_hook = sys.unraisablehook
    given_back = 0

    def unraisable(info: Any) -> None:
        nonlocal raised, given_back
        error = getattr(info, "exc_value", None)
        if isinstance(error, Signalled) and raised and given_back < 100:
            # Sent again from another thread a moment later: raised here, in the hook, it
            # would be ignored once more.
            raised, given_back = False, given_back + 1
            number = getattr(error, "signum", signal.SIGTERM)
            again = threading.Timer(0.05, os.kill, (os.getpid(), number))
            again.daemon = True
            again.start()
            return
        before_hook(info)

    sys.unraisablehook = unraisable
    wanted = [*STOPPING, HANG_SIGNAL]
    before: dict[int, Any] = {sig: signal.getsignal(sig) for sig in wanted}
    for sig in wanted:
        signal.signal(sig, stop)
    return before


# -- the supervisor ------------------------------------------------------------------------------


def _children_of() -> dict[int, list[int]]:
    """Every process's children, by parent pid, read from ``/proc`` (one pass, linear)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 1 and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """The live processes under ``pid`` (children first), from ``/proc``."""
    tree = _children_of()
    found: list[int] = []
    todo = list(tree.get(pid, ()))
    while todo and len(found) < 100_000:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child, ()))
    return found


def kill_descendants(pid: int) -> list[int]:
    """SIGKILL every process under ``pid`` and reap the ones that are its children (a
    subreaper's orphans included); the pids killed."""
    killed: list[int] = []
    for _ in range(5):  # a process may fork while we look: look again until none is left
        found = descendants(pid)
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
                killed.append(child)
        _reap(pid)
        time.sleep(0.05)
    _reap(pid)
    return killed


def _reap(pid: int) -> None:
    if pid != os.getpid():
        return
    with contextlib.suppress(ChildProcessError):
        while True:
            done, _ = os.waitpid(-1, os.WNOHANG)
            if done == 0:
                break


def mounts_under(folder: str) -> list[str]:
    """The mount points inside ``folder`` (``/proc/self/mountinfo``), deepest first."""
    top = os.path.realpath(folder)
    points: list[str] = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            fields = line.split(" ")
            if len(fields) <= 4:
                continue
            point = fields[4]
            for code in ("\\040", "\\011", "\\012", "\\134"):
                point = point.replace(code, chr(int(code[1:], 8)))
            if point == top or point.startswith(top + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_all(folder: str) -> list[str]:
    """Lazily unmount everything mounted inside ``folder``; the points unmounted."""
    done: list[str] = []
    for point in mounts_under(folder):
        for command in (["fusermount3", "-uz", point], ["umount", "-l", point]):
            if shutil.which(command[0]) is None:
                continue
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(command, capture_output=True, check=False, timeout=30)
            if point not in mounts_under(folder):
                done.append(point)
                break
    return done


def _subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def supervise(
    *,
    hard_end: float | None = None,
    report_killed: Callable[[str, str], int] | None = None,
) -> None:
    """Fork the run (see the module docstring).  In the child this returns at once, with
    ``$TMPDIR`` a fresh scratch folder, ``$SCOPECHECK_VERDICT_SO_FAR`` a file in it and
    :func:`signals_stop_the_run` to be used by the caller.  In the parent it never returns:
    it exits with the child's exit code -- or, for a child killed after a signal or a hang,
    with what ``report_killed(so_far_file, why)`` returns after printing the verdict so far
    (128 + the signal's number when it prints nothing).  ``hard_end`` is a
    ``time.monotonic()`` reading past which the child is stopped as hung."""
    _subreaper()
    scratch = tempfile.mkdtemp(prefix="scopecheck-run-")
    so_far = os.path.join(scratch, "verdict-so-far.json")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _raise_on_signals()  # from the first moment: a signal never kills it silently
        os.environ["TMPDIR"] = scratch
        os.environ[SO_FAR_ENV] = so_far
        tempfile.tempdir = scratch
        return
    code = _watch(pid, hard_end, so_far, report_killed)
    kill_descendants(os.getpid())
    unmount_all(scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _watch(
    pid: int,
    hard_end: float | None,
    so_far: str,
    report_killed: Callable[[str, str], int] | None,
) -> int:
    """Wait for the child; pass signals on, kill it when it does not stop; its exit code."""
    received: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        del frame
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in STOPPING:
        signal.signal(sig, note)
    stop_at: float | None = None
    why = ""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 1
        if done == pid:
            break
        now = time.monotonic()
        if received and stop_at is None:
            why = STOPPING.get(signal.Signals(received[0]), "a signal")
            stop_at = now + STOP_GRACE
        if hard_end is not None and now > hard_end and stop_at is None:
            why = "hang"
            stop_at = now + STOP_GRACE
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, HANG_SIGNAL)
        if stop_at is not None and now > stop_at:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            kill_descendants(os.getpid())
            if report_killed is not None:
                return report_killed(so_far, why)
            return 128 + int(received[0]) if received else 1
        time.sleep(0.05)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 128 + os.WTERMSIG(status)
