"""Third-party factories whose repositories have ``fork()``, for ``scopecheck validate``.

``make_backend`` is the bundled Memory backend seen as a user's backend; ``make_leaky_fork``
plants a fork bug from outside, through the public API only: after a correct fork it writes
operation state into the destination, which a fork must never carry (FORK-7).
"""

from __future__ import annotations

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
