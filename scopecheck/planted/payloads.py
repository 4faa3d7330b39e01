"""Planted bugs in the payload bytes a backend gives back: how numbers are spelled (WRITE-8,
JSONL-25) and what a usage row keeps (STATS-4, WRITE-9).

Each is the real Memory backend handing out a :class:`Rewritten` Session
(:func:`~scopecheck.planted.seams.memory_over`), which passes the payload bytes of every read
through one function -- the mistake of a backend that keeps decoded values and re-encodes them
on the way out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from scopecheck.backends.registry import Backend
from scopecheck.models.records import EntryRecord, ListElement, Snapshot, UsageRecord, ValueRecord
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import WrappedSession, memory_over

Reencode = Callable[[bytes], bytes]


class Rewritten(WrappedSession):
    """A Session whose reads return ``payload(bytes)`` for value, element and entry payloads
    and ``usage(bytes)`` for usage objects; everything else is the wrapped Session's."""

    def __init__(self, inner: Any, payload: Reencode, usage: Reencode) -> None:
        super().__init__(inner, {})
        self._payload = payload
        self._usage = usage

    def _value(self, record: ValueRecord) -> ValueRecord:
        return attrs.evolve(record, value_json=self._payload(record.value_json))

    def _element(self, element: ListElement) -> ListElement:
        return attrs.evolve(element, value_json=self._payload(element.value_json))

    def _entry(self, entry: EntryRecord) -> EntryRecord:
        return attrs.evolve(entry, payload_json=self._payload(entry.payload_json))

    def _usage_row(self, row: UsageRecord) -> UsageRecord:
        return attrs.evolve(row, usage_json=self._usage(row.usage_json))

    def get_value(self, address: Any) -> ValueRecord | None:
        record = self._inner.get_value(address)
        return None if record is None else self._value(record)

    def scan_values(self, *args: Any, **kwargs: Any) -> Any:
        rows = self._inner.scan_values(*args, **kwargs)
        return tuple((key, self._value(rec)) for key, rec in rows)

    def read_list(self, address: Any, **kwargs: Any) -> tuple[ListElement, ...]:
        return tuple(self._element(e) for e in self._inner.read_list(address, **kwargs))

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        entry = self._inner.get_entry(entry_id)
        return None if entry is None else self._entry(entry)

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        row = self._inner.get_usage(usage_id)
        return None if row is None else self._usage_row(row)

    def snapshot(self) -> Snapshot:
        snap: Snapshot = self._inner.snapshot()
        return attrs.evolve(
            snap,
            entries=tuple(self._entry(e) for e in snap.entries),
            usage=tuple(self._usage_row(u) for u in snap.usage),
            values=tuple((key, self._value(rec)) for key, rec in snap.values),
            lists=tuple((key, tuple(map(self._element, elements))) for key, elements in snap.lists),
        )


def _unchanged(data: bytes) -> bytes:
    return data


def _memory_backend(name: str, payload: Reencode, usage: Reencode) -> Backend:
    return memory_over(
        name, lambda session, _: Rewritten(session, payload, usage), f"Memory with {name}"
    )


def python_spelling(data: bytes) -> bytes:
    """Python's ``json`` spelling of the same value: ``1e-07`` and ``1.23e-06`` where
    JavaScript writes ``1e-7`` and ``0.00000123`` (non-ASCII kept, so only numbers differ)."""
    return json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":")).encode()


def cost_dropped(data: bytes) -> bytes:
    """The usage object without its ``cost``: a schema keeping token counts only."""
    usage = orjson.loads(data)
    usage.pop("cost", None)
    return orjson.dumps(usage)


register(
    Mutant(
        "memory-python-number-spelling",
        "memory",
        "payloads read back re-encoded by Python's json: 1e-7 as 1e-07, not as JavaScript "
        "writes it (WRITE-8, JSONL-25)",
        lambda: _memory_backend("python-number-spelling", python_spelling, _unchanged),
    )
)
register(
    Mutant(
        "memory-usage-cost-dropped",
        "memory",
        "usage rows read back without their cost object, which upstream's reader needs (STATS-4)",
        lambda: _memory_backend("usage-cost-dropped", _unchanged, cost_dropped),
    )
)
