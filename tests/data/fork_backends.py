"""Third-party factories whose repositories have ``fork()``, for ``scopecheck validate``.

``make_backend`` is the bundled Memory backend seen as a user's backend; ``make_leaky_fork``
plants a fork bug from outside, through the public API only: after a correct fork it writes
operation state into the destination, which a fork must never carry (FORK-7).  The ``rooted``
ones take a root and keep their Sessions there when the repository closes, so that
``scopecheck serve`` can stand for them: a restart, a new process, reads them back (PROC-3).
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from scopecheck import ForkOptions, set_value, value
from scopecheck.impl.memory import MemoryRepository


def make_backend(clock: Any) -> MemoryRepository:
    return MemoryRepository(clock)


class LeakyForkRepository(MemoryRepository):
    def fork(self, source_id: str, options: ForkOptions) -> str:
        dest = super().fork(source_id, options)
        handle = self.open(dest)
        try:
            handle.commit([set_value(value("pi.op.state", "leaked"), {"carried": True})])
        finally:
            handle.close()
        return dest


def make_leaky_fork(clock: Any) -> LeakyForkRepository:
    return LeakyForkRepository(clock)


class KeptRepository(MemoryRepository):
    """Memory's Sessions, kept under the root when the repository closes."""

    def __init__(self, clock: Any, root: str) -> None:
        self.kept = os.path.join(root, "sessions.pickle")
        sessions = {}
        if os.path.exists(self.kept):
            with open(self.kept, "rb") as saved:
                sessions = pickle.load(saved)
        super().__init__(clock, sessions)
        self.sessions = sessions

    def close(self) -> None:
        super().close()
        with open(self.kept, "wb") as saved:
            pickle.dump(self.sessions, saved)


class RootedLeakyFork(LeakyForkRepository, KeptRepository):
    """The leak of :class:`LeakyForkRepository`, kept under the root."""


def make_rooted_backend(clock: Any, *, root: str) -> KeptRepository:
    return KeptRepository(clock, root)


def make_rooted_leaky_fork(clock: Any, *, root: str) -> RootedLeakyFork:
    return RootedLeakyFork(clock, root)
