"""The good dict example with two independent bugs, so one machine run finds two distinct
failures (INSTALL-17): retirement leaves the scope's lists behind (the model's state differs),
and reading a value that is not there raises ``LookupError`` instead of returning ``None``.
"""

from __future__ import annotations

from typing import Any

from scopecheck import RetireScope, ValueRecord
from scopecheck.examples.good_backend import DictRepository, DictStorage


class TwoBugsStorage(DictStorage):
    def _apply(self, data: dict[str, Any], x: Any, seq: int, now: int) -> None:
        if isinstance(x, RetireScope):  # deletes the scope's values, keeps its lists
            for key in [k for k in data["values"] if k[0] == x.retired.id]:
                del data["values"][key]
            return
        super()._apply(data, x, seq, now)

    def get_value(self, address: Any) -> ValueRecord | None:
        found = super().get_value(address)
        if found is None:
            raise LookupError(f"no value at {address!r}")
        return found


class TwoBugsRepository(DictRepository):
    storage_class = TwoBugsStorage


def make_backend(clock: Any) -> TwoBugsRepository:
    return TwoBugsRepository(clock)
