"""What storage hands back: committed writes and read results.  Frozen value classes.

Payloads stay canonical JSON bytes so two backends agree byte for byte (``true`` is never ``1``)
and every ``.value`` decodes a fresh object the caller may mutate freely.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from scopecheck.models.payload import JsonValue, decode_json
from scopecheck.models.writes import AnyWrite

Order: TypeAlias = Literal["asc", "desc"]

#: List read page size when no limit is given, and the largest page one read returns (LIST-3).
DEFAULT_LIST_LIMIT = 1000
MAX_LIST_LIMIT = 10_000


@attrs.frozen
class Committed:
    """One committed write with the global sequence number it was given (SEQ-1)."""

    seq: int
    timestamp: int
    write: AnyWrite


@attrs.frozen
class ValueRecord:
    """A current scalar value and the seq of the write that set it."""

    seq: int
    value_json: bytes

    @property
    def value(self) -> JsonValue:
        return decode_json(self.value_json)


@attrs.frozen
class ListElement:
    """One surviving list element: its seq, its value and its optional tag (LIST-6)."""

    seq: int
    value_json: bytes
    tag: str | None = None

    @property
    def value(self) -> JsonValue:
        return decode_json(self.value_json)


@attrs.frozen
class EntryRecord:
    """An immutable entry as stored."""

    id: str
    parent_id: str | None
    type: str
    payload_json: bytes
    seq: int
    timestamp: int

    @property
    def payload(self) -> dict[str, Any]:
        result: dict[str, Any] = decode_json(self.payload_json)
        return result


@attrs.frozen
class UsageRecord:
    """One usage ledger row as stored: upstream's shape, with no timestamp of its own (a usage
    row's time is its entry's, or its commit's in the log; WRITE-9)."""

    id: str
    usage_json: bytes
    entry_id: str | None
    adjustment: bool
    details_json: bytes | None
    seq: int

    @property
    def usage(self) -> dict[str, Any]:
        result: dict[str, Any] = decode_json(self.usage_json)
        return result


@attrs.frozen
class UsageTotals:
    """Sums over the usage ledger, accumulated in seq order (STATS-1)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost_input: float = 0.0
    cost_output: float = 0.0
    cost_cache_read: float = 0.0
    cost_cache_write: float = 0.0
    cost_total: float = 0.0


@attrs.frozen
class Stats:
    """Message count (entries of type ``message``) and usage totals (STATS-1, STATS-2)."""

    message_count: int = 0
    usage: UsageTotals = UsageTotals()


ValueKey: TypeAlias = tuple[str | None, str, str]
"""Physical identity of a value or list: ``(scope_id or None, namespace, key)`` (ADDR-1)."""


@attrs.frozen
class Snapshot:
    """The complete logical state of one Session, for checking (not a fork source).

    ``values`` and ``lists`` are sorted by physical identity with ``None`` (session scope) first;
    ``entries`` and ``usage`` are in seq order.  Two backends agree iff their snapshots are equal.
    """

    entries: tuple[EntryRecord, ...]
    usage: tuple[UsageRecord, ...]
    values: tuple[tuple[ValueKey, ValueRecord], ...]
    lists: tuple[tuple[ValueKey, tuple[ListElement, ...]], ...]
    stats: Stats

    @staticmethod
    def sort_key(key: ValueKey) -> tuple[int, str, str, str]:
        scope_id, namespace, name = key
        return (0 if scope_id is None else 1, scope_id or "", namespace, name)
