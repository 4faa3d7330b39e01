"""The good example with one classic mistake: retirement forgets the scope's lists.

scopecheck validate examples/broken_backend.py:make_backend   # fails, with a reproducer
"""

from __future__ import annotations

from typing import Any

from scopecheck import RetireScope
from scopecheck.examples.good_backend import DictRepository, DictStorage


class LeakyStorage(DictStorage):
    def _apply(self, data: dict[str, Any], x: Any, seq: int, now: int) -> None:
        if isinstance(x, RetireScope):  # deletes the scope's values but leaves its lists behind
            for key in [k for k in data["values"] if k[0] == x.retired.id]:
                del data["values"][key]
            return
        super()._apply(data, x, seq, now)


class LeakyRepository(DictRepository):
    storage_class = LeakyStorage


def make_backend(clock: Any) -> LeakyRepository:
    return LeakyRepository(clock)
