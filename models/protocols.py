"""The public storage and repository interfaces every backend implements.

Python spelling of 000 §2–§3 and REFERENCE §3 (the mapping is in ``spec/python-mapping.md``).
A third-party backend implements these two protocols and runs through the same machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.fork import ForkOptions
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Order,
    Snapshot,
    Stats,
    UsageRecord,
    ValueRecord,
)
from scopecheck.models.scope import Scope
from scopecheck.models.writes import Write

Sc = TypeVar("Sc", bound=Scope)

Clock = Callable[[], int]
"""Returns the commit timestamp in Unix milliseconds; injected so runs are reproducible."""


class Storage(Protocol):
    """One open Session.  Commits are serialised in admission order (SEQ-2)."""

    @property
    def session_id(self) -> str: ...

    def commit(self, writes: Sequence[Write[Sc]]) -> tuple[Committed, ...]:
        """Validate every write, then apply all or nothing; returns the writes with their seqs.

        An empty commit writes nothing and consumes no sequence (SEQ-4).
        """
        ...

    def get_value(self, address: ValueAddress[Any, Scope]) -> ValueRecord | None: ...

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        """Current values of ``namespace`` in ``scope`` whose key starts with ``prefix``, in
        code-point order of key (LIST-9)."""
        ...

    def read_list(
        self,
        address: ListAddress[Any, Scope],
        *,
        cursor: int | None = None,
        order: Order = "asc",
        limit: int | None = None,
        stop_at_tag: str | None = None,
    ) -> tuple[ListElement, ...]: ...

    def get_entry(self, entry_id: str) -> EntryRecord | None: ...

    def get_usage(self, usage_id: str) -> UsageRecord | None: ...

    def stats(self) -> Stats: ...

    def snapshot(self) -> Snapshot:
        """The complete logical state, for checking against the model."""
        ...

    def close(self) -> None:
        """Seal admission at once, drain admitted commits; idempotent (LIFE-1)."""
        ...


class Repository(Protocol):
    """Sessions by id: create, open, list, delete (REPO-*)."""

    def create(self, session_id: str) -> Storage: ...

    def open(self, session_id: str) -> Storage: ...

    def list(self) -> list[str]: ...

    def delete(self, session_id: str) -> None: ...

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """Fork ``source_id`` per 001 §1.1; returns the destination id (FORK-*).

        A rejection leaves no destination artefact and no reserved id.
        """
        ...

    def close(self) -> None: ...
