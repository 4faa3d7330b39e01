"""Resident maps that build their records on first use (open speed, JSONL-7).

Replay stores each record's replay operation (which points at its line, see
:func:`scopecheck.impl.jsonl.codec.index_transaction`), the main-log line that holds it (the fast
path,
:func:`scopecheck.impl.jsonl.replay.fold_main_log`) or a decoded record dict, and turns it into an
``EntryRecord``, ``UsageRecord`` or ``ValueRecord`` only when something reads it.  A value
overwritten a thousand times in the log is built once, and opening a long Session does not
pay for records nobody reads.  Every way the Memory code reads these maps (``get``, ``[]``,
``values``, ``items``, ``pop``) returns built records, so callers never see the raw form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import orjson

from scopecheck.impl.jsonl.codec import entry_payload_json, op_record
from scopecheck.models.payload import canonical_bytes
from scopecheck.models.records import EntryRecord, UsageRecord, ValueRecord

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class LazyRecords(dict[K, V]):
    """A dict whose values may be held raw until first read: a record dict, a replay
    operation tuple (:func:`~scopecheck.impl.jsonl.codec.op_record` finds its record), or the bytes
    of the line holding the record (``find(decoded line, key)`` finds it).  Replay stores raw
    values with plain item assignment and then calls :meth:`count_raw`."""

    __slots__ = ("_build", "_find", "_raw")

    def __init__(
        self,
        build: Callable[[dict[str, Any]], V],
        find: Callable[[Any, K], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        self._build = build
        self._find = find
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
        if kind is tuple or kind is dict or kind is bytes:
            built = self._build(self._as_raw(key, stored))
            dict.__setitem__(self, key, built)
            return built
        result: V = stored
        return result

    def _as_raw(self, key: K, stored: Any, decoded: dict[int, Any] | None = None) -> Any:
        """The record dict of a raw value; ``decoded`` as in
        :func:`~scopecheck.impl.jsonl.codec.op_record`."""
        kind = type(stored)
        if kind is tuple:
            return op_record(stored, decoded)
        if kind is bytes:
            assert self._find is not None, "a line is stored only where a finder is set"
            if decoded is None:
                return self._find(orjson.loads(stored), key)
            obj = decoded.get(id(stored))
            if obj is None:
                obj = decoded[id(stored)] = orjson.loads(stored)
            return self._find(obj, key)
        return stored

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
                kind = type(stored)
                if kind is tuple or kind is dict or kind is bytes:
                    _set(self, key, self._build(self._as_raw(key, stored, decoded)))
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
        kind = type(stored)
        if kind is tuple or kind is dict or kind is bytes:
            return self._build(self._as_raw(key, stored))
        return stored


_MISSING: Any = object()
_set: Any = dict.__setitem__


def _last_match(obj: Any, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The last record of a decoded transaction line that ``match`` accepts (a later record of
    the same key in one transaction is the one replay kept)."""
    if type(obj) is dict:
        return obj
    for rec in reversed(obj):
        if match(rec):
            found: dict[str, Any] = rec
            return found
    raise LookupError("the stored line holds no such record")  # pragma: no cover


def find_entry(obj: Any, key: str) -> dict[str, Any]:
    return _last_match(obj, lambda rec: rec["kind"] == "entry" and rec["id"] == key)


def find_usage(obj: Any, key: str) -> dict[str, Any]:
    return _last_match(obj, lambda rec: rec["kind"] == "usage" and rec["id"] == key)


def find_value(obj: Any, key: tuple[str | None, str, str]) -> dict[str, Any]:
    """Only unscoped values are stored as lines (the main log's)."""
    return _last_match(
        obj,
        lambda rec: (
            rec["kind"] == "value"
            and rec["op"] == "set"
            and rec["namespace"] == key[1]
            and rec["key"] == key[2]
        ),
    )


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
        canonical_bytes(rec["usage"]),
        rec.get("entryId"),
        rec["adjustment"],
        canonical_bytes(rec["details"]) if "details" in rec else None,
        rec["seq"],
    )


def build_value(rec: dict[str, Any]) -> ValueRecord:
    return ValueRecord(rec["seq"], canonical_bytes(rec["value"]))
