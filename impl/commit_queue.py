"""The commit queue of one open Session: admission, sealing and the FIFO lock (LIFE-1).

000 §6.5 and 001 §5 describe a per-Session commit queue: ``close()`` seals admission at once,
commits admitted before the seal still run to completion and ``close()`` waits for them, and a
fork takes its snapshot between two commits by holding the queue.  This is that queue, the
Python spelling of the seeds' ``commitQueue`` (spec/python-mapping.md), shared by every backend
that keeps its Session resident.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from scopecheck.models.errors import ClosedError


class CommitQueue:
    """Admission bookkeeping plus the lock every commit and every fork snapshot runs under."""

    def __init__(self) -> None:
        #: Held by a running commit, and by a fork reading the Session between commits
        #: (FORK-12): whoever holds it sees a commit boundary.
        self.lock = threading.Lock()
        self._admission = threading.Condition()
        self._in_flight = 0
        self._sealed = False
        self._drained = False

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Admit one commit, or refuse it with ``closed`` once sealed (LIFE-1, LIFE-2); the
        admitted commit counts as in flight until the block ends, whatever it raised."""
        with self._admission:
            if self._sealed:
                raise ClosedError()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._admission:
                self._in_flight -= 1
                self._admission.notify_all()

    def seal_and_drain(self) -> bool:
        """Refuse new commits from now on, then wait until every admitted one has finished.
        True for the first call only, so the caller releases its resources exactly once."""
        with self._admission:
            self._sealed = True
            self._admission.wait_for(lambda: self._in_flight == 0)
            first = not self._drained
            self._drained = True
            return first

    def check_open(self) -> None:
        """Reads after ``close()`` fail ``closed`` (LIFE-2)."""
        if self._sealed:
            raise ClosedError()

    @property
    def sealed(self) -> bool:
        return self._sealed
