"""Sequence allocation: which seqs a transaction's writes get, and what the Session's
``next_seq`` becomes.

This is a policy point of the contract, not an implementation detail: 002 allocated sequences
per scope, and 000 §3 replaced that with one global sequence space per Session (SEQ-1).  Every
backend takes its allocator as an explicit collaborator (``sequence=`` of each repository) so
the rule lives in one place: :data:`GLOBAL_SEQUENCE`.  A different allocator is a different
contract, visibly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs


@attrs.frozen
class Allocation:
    """Write *i* of the transaction gets seq ``first + i``; afterwards the Session's counter
    stands at ``next_seq``."""

    first: int
    next_seq: int


class SequencePolicy(Protocol):
    def allocate(
        self, session_id: str, next_seq: int, scope_id: str | None, writes: Sequence[Any]
    ) -> Allocation:
        """The seqs of a non-empty, already validated transaction of ``scope_id`` (``None``
        for the session scope) in Session ``session_id`` whose counter stands at
        ``next_seq``."""
        ...


class GlobalSequence:
    """One counter per Session for every scope: each write draws the next number, retirements
    included (SEQ-1, SEQ-2, SQLITE-5).  An empty transaction never reaches the allocator, so it
    draws none (SEQ-4)."""

    def allocate(
        self, session_id: str, next_seq: int, scope_id: str | None, writes: Sequence[Any]
    ) -> Allocation:
        return Allocation(next_seq, next_seq + len(writes))

    def __repr__(self) -> str:
        return "GLOBAL_SEQUENCE"


#: The contract's allocator (SEQ-1); every repository's default ``sequence``.
GLOBAL_SEQUENCE: SequencePolicy = GlobalSequence()
