"""The good example with one classic mistake: retirement forgets the scope's lists.

scopecheck validate examples/broken_backend.py:make_backend   # fails, with a reproducer
"""

from __future__ import annotations

from typing import Any

from good_backend import DictRepository, DictStorage  # type: ignore[import-not-found]
from models.writes import RetireScope


class LeakyStorage(DictStorage):  # type: ignore[misc]
    def _apply(self, data: dict[str, Any], x: Any, seq: int, now: int) -> None:
        if isinstance(x, RetireScope):  # deletes the scope's values but leaves its lists behind
            for key in [k for k in data["values"] if k[0] == x.retired.id]:
                del data["values"][key]
            return
        super()._apply(data, x, seq, now)


class LeakyRepository(DictRepository):  # type: ignore[misc]
    storage_class = LeakyStorage


def make_backend(clock: Any) -> LeakyRepository:
    return LeakyRepository(clock)
