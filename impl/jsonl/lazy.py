"""Resident maps that build their records on first use (open speed, JSONL-7).

Replay stores each record's replay operation (which points at its line, see
:func:`impl.jsonl.codec.index_transaction`) or a decoded record dict, and turns it into an
``EntryRecord``, ``UsageRecord`` or ``ValueRecord`` only when something reads it.  A value
overwritten a thousand times in the log is built once, and opening a long Session does not
pay for records nobody reads.  Every way the Memory code reads these maps (``get``, ``[]``,
``values``, ``items``, ``pop``) returns built records, so callers never see the raw form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import orjson

from impl.jsonl.codec import entry_payload_json, op_record
from models.records import EntryRecord, UsageRecord, ValueRecord

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_dumps = orjson.dumps


class LazyRecords(dict[K, V]):
    """A dict whose values may be held raw until first read: a record dict, or a replay
    operation tuple (:func:`~impl.jsonl.codec.op_record` finds its record).  Replay stores
    operations with plain item assignment and then calls :meth:`count_raw`."""

    __slots__ = ("_build", "_raw")

    def __init__(self, build: Callable[[dict[str, Any]], V]) -> None:
        super().__init__()
        self._build = build
        self._raw = 0  # how many values are still raw; 0 means plain-dict speed

    def put_raw(self, key: K, record: dict[str, Any]) -> None:
        """Store ``record`` to be built on first read (replay only)."""
        self._raw += 1
        _set(self, key, record)

    def count_raw(self) -> None:
        """Note that values were stored raw by plain item assignment (replay)."""
        self._raw = len(self)

    def pop_raw(self, key: K) -> None:
        """Drop ``key`` without building its record (replay of a delete)."""
        dict.pop(self, key, None)

    def _ready(self, key: K, stored: Any) -> V:
        kind = type(stored)
        if kind is tuple or kind is dict:
            built = self._build(_as_raw(stored))
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
            decoded: dict[int, Any] = {}  # each line decoded once for all its records
            stored: Any
            for key, stored in list(dict.items(self)):
                if type(stored) is tuple:
                    _set(self, key, self._build(op_record(stored, decoded)))
                elif type(stored) is dict:
                    _set(self, key, self._build(stored))
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
        if type(stored) is tuple or type(stored) is dict:
            built: V = self._build(_as_raw(stored))
            return built
        result: V = stored
        return result


_MISSING: Any = object()
_set: Any = dict.__setitem__


def _as_raw(stored: Any) -> dict[str, Any]:
    """The record dict of a raw value (a replay operation is decoded from its line)."""
    if type(stored) is tuple:
        return op_record(stored)
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
