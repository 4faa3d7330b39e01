"""Small helpers shared by the conformance test modules."""

from __future__ import annotations

from typing import Any


class Clock:
    """A deterministic clock: each call returns the current ``now``; tests advance it."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def values_of(snapshot: Any) -> dict[Any, Any]:
    """Snapshot values as ``{(scope_id, namespace, key): decoded value}``."""
    return {key: record.value for key, record in snapshot.values}


def lists_of(snapshot: Any) -> dict[Any, Any]:
    """Snapshot lists as ``{(scope_id, namespace, key): [decoded elements]}``."""
    return {key: [e.value for e in elements] for key, elements in snapshot.lists}
