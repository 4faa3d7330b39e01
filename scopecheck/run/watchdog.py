"""The watchdog: a phase that runs past its limit is stopped, and says what did not finish.

A phase of ``validate``, ``fuzz`` or the pytest plugin may wait on things outside scopecheck's
control -- a backend that never answers, strace, the FUSE daemon -- or on an analysis of ours
that is slower than it should be.  None of them may hold the run past the phase's budget and
its stated overrun (INSTALL-20): :func:`limit` arms a real-time alarm for the phase, and when it
rings, :class:`Overrun` is raised in the main thread wherever it is -- a blocking read, a
``sleep``, a loop of ours -- so the phase's ``finally`` blocks stop its processes and mounts,
and the phase is reported ``incomplete`` with :func:`doing`'s note of what was running.

What an alarm cannot stop is written down rather than hidden: code that holds the interpreter
in C without returning (a C extension spinning inside one call) runs the Python handler only
when it returns.  The commands therefore run their work under a supervisor
(:mod:`scopecheck.cli.supervise`) that stops such a child from outside, and prints the verdict
it had reported so far.

:class:`Overrun` is a ``BaseException``: a backend's or a library's ``except Exception`` does
not swallow it, as it does not swallow ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

#: What the current phase is doing, innermost last: the words an overrun ends with.
_doing: list[str] = []


class Overrun(BaseException):
    """A phase ran past its limit (INSTALL-20): ``what`` is the phase, ``seconds`` its limit,
    ``doing`` what was running when the alarm rang."""

    def __init__(self, what: str, seconds: float, doing: str) -> None:
        super().__init__(what, seconds, doing)
        self.what = what
        self.seconds = seconds
        self.doing = doing

    def __str__(self) -> str:
        while_ = f" while {self.doing}" if self.doing else ""
        return f"{self.what} did not finish within {self.seconds:.0f}s{while_}"


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Note ``what`` the code inside is doing, for an overrun's message (cheap: a list push)."""
    _doing.append(what)
    try:
        yield
    finally:
        _doing.pop()


def now_doing() -> str:
    """The innermost note of :func:`doing` (empty when there is none)."""
    return _doing[-1] if _doing else ""


def armable() -> bool:
    """Whether an alarm can be armed here: only the main thread receives signals."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextlib.contextmanager
def limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`Overrun` in the block once ``seconds`` of wall time have passed
    (``None`` or infinite: no limit).  Limits nest: an inner one never outlives the outer one,
    and the outer one is armed again, with what is left of it, when the inner block ends.  Off
    the main thread, or where there are no interval timers, the block runs unguarded."""
    if seconds is None or seconds == float("inf") or not armable():
        yield
        return
    end = time.monotonic() + max(0.0, seconds)
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer_end = time.monotonic() + outer_left if outer_left > 0 else None
    if outer_end is not None and outer_end <= end:
        # The outer limit rings first: it stays armed and this one adds nothing.
        yield
        return

    def ring(signum: int, frame: object) -> None:
        del signum, frame
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise Overrun(what, seconds, now_doing())

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(1e-3, end - time.monotonic()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_end is not None:  # the outer limit again, with what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer_end - time.monotonic()))
