"""Resident maps that build their records on first use (open speed, JSONL-7).

Replay stores each decoded record dict as it is and turns it into an ``EntryRecord``,
``UsageRecord`` or ``ValueRecord`` only when something reads it.  A value overwritten a
thousand times in the log is built once, and opening a long Session does not pay for records
nobody reads.  Every way the Memory code reads these maps (``get``, ``[]``, ``values``,
``items``, ``pop``) returns built records, so callers never see the raw form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import orjson

from impl.jsonl.codec import entry_payload_json
from models.records import EntryRecord, UsageRecord, ValueRecord

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_dumps = orjson.dumps


class LazyRecords(dict[K, V]):
    """A dict whose values may be held as raw record dicts until first read."""

    __slots__ = ("_build", "_raw")

    def __init__(self, build: Callable[[dict[str, Any]], V]) -> None:
        super().__init__()
        self._build = build
        self._raw = 0  # how many values are still raw; 0 means plain-dict speed

    def put_raw(self, key: K, record: dict[str, Any]) -> None:
        """Store ``record`` to be built on first read (replay only)."""
        self._raw += 1
        _set(self, key, record)

    def pop_raw(self, key: K) -> None:
        """Drop ``key`` without building its record (replay of a delete)."""
        dict.pop(self, key, None)

    def _ready(self, key: K, stored: Any) -> V:
        if type(stored) is dict:
            built = self._build(stored)
            dict.__setitem__(self, key, built)
            return built
        result: V = stored
        return result

    def __getitem__(self, key: K) -> V:
        return self._ready(key, dict.__getitem__(self, key))

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D) -> V | D: ...
    def get(self, key: K, default: Any = None) -> Any:
        stored = dict.get(self, key, _MISSING)
        if stored is _MISSING:
            return default
        return self._ready(key, stored)

    def _build_all(self) -> None:
        if self._raw:
            for key, stored in list(dict.items(self)):
                if type(stored) is dict:
                    _set(self, key, self._build(_as_raw(stored)))
            self._raw = 0

    def values(self) -> Any:
        self._build_all()
        return dict.values(self)

    def items(self) -> Any:
        self._build_all()
        return dict.items(self)

    def pop(self, key: K, default: Any = None) -> Any:
        stored = dict.pop(self, key, _MISSING)
        if stored is _MISSING:
            return default
        return self._ready_detached(stored)

    def _ready_detached(self, stored: Any) -> V:
        if type(stored) is dict:
            built: V = self._build(stored)
            return built
        result: V = stored
        return result


_MISSING: Any = object()
_set: Any = dict.__setitem__


def _as_raw(stored: Any) -> dict[str, Any]:
    raw: dict[str, Any] = stored
    return raw


def build_entry(rec: dict[str, Any]) -> EntryRecord:
    return EntryRecord(
        rec["id"],
        rec["parentId"],
        rec["type"],
        entry_payload_json(rec),
        rec["seq"],
        rec["timestamp"],
    )


def build_usage(rec: dict[str, Any]) -> UsageRecord:
    return UsageRecord(
        rec["id"],
        _dumps(rec["usage"]),
        rec.get("entryId"),
        rec["adjustment"],
        _dumps(rec["details"]) if "details" in rec else None,
        rec["seq"],
        rec["timestamp"],
    )


def build_value(rec: dict[str, Any]) -> ValueRecord:
    return ValueRecord(rec["seq"], _dumps(rec["value"]))
