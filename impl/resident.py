"""Resident state: what an open Memory or JSONL Session holds in memory, and how a committed
write changes it.

Both backends keep the same projection -- maps keyed by physical identity ``(scope, namespace,
key)``, one global ``next_seq`` (000 §7) -- and apply an acknowledged transaction to it the same
way; JSONL only adds the durable log in front (``scopecheck.impl.jsonl.journal``).  The one
policy in applying is retirement (000 §2: the only lifetime authority), so it is an explicit
collaborator, :class:`Retirement`, with the contract's rule as :data:`RETIRE_EXACT_SCOPE`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from scopecheck.impl.stats import MESSAGE_TYPE, add_usage
from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Stats,
    UsageRecord,
    ValueKey,
    ValueRecord,
)
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)


@attrs.define(eq=False)
class ResidentState:
    """Everything one resident Session holds; it outlives its open handles (REPO-2)."""

    next_seq: int = 1
    entries: dict[str, EntryRecord] = attrs.field(factory=dict)
    usage: dict[str, UsageRecord] = attrs.field(factory=dict)
    values: dict[ValueKey, ValueRecord] = attrs.field(factory=dict)
    lists: dict[ValueKey, list[ListElement]] = attrs.field(factory=dict)
    stats: Stats = attrs.field(factory=Stats)
    #: The source of a fork destination (001 §1.1 ``parentSessionId``), else ``None``.
    parent_session_id: str | None = None
    #: How many transactions were applied to this state: a read derived from all of it (the
    #: snapshot) stays valid while this does not change.
    version: int = 0


class Retirement(Protocol):
    def retire(self, state: ResidentState, scope_id: str) -> None:
        """End the lifetime of ephemeral scope ``scope_id`` in ``state``, as part of the
        transaction that retires it (RETIRE-1)."""
        ...


class ExactScopeRetirement:
    """Delete every value and list of exactly this scope, nothing else: not another scope
    whose id it prefixes or resembles, not the session scope (RETIRE-2, SCOPE-4).  A later
    write under the same id starts a new, empty lifetime (RETIRE-3)."""

    def retire(self, state: ResidentState, scope_id: str) -> None:
        for mapping in (state.values, state.lists):
            for key in [k for k in mapping if k[0] == scope_id]:
                del mapping[key]

    def __repr__(self) -> str:
        return "RETIRE_EXACT_SCOPE"


#: The contract's retirement (RETIRE-2); every resident repository's default ``retirement``.
RETIRE_EXACT_SCOPE: Retirement = ExactScopeRetirement()


def key_of(address: ValueAddress[Any, Any] | ListAddress[Any, Any]) -> ValueKey:
    """The resident key of an address: its physical identity (ADDR-1)."""
    return (address.scope_id, address.namespace, address.key)


def apply_committed(
    state: ResidentState, committed: Iterable[Committed], next_seq: int, retirement: Retirement
) -> None:
    """Apply an acknowledged transaction, write by write in seq order, then move the counter
    to ``next_seq`` (TX-1, SEQ-1).  Called only once the transaction is validated and, for a
    durable backend, durable: nothing here can fail half-way on a valid transaction."""
    values, lists = state.values, state.lists
    for item in committed:
        write, seq = item.write, item.seq
        if isinstance(write, SetValue):
            values[key_of(write.address)] = ValueRecord(seq, write.value_json)
        elif isinstance(write, DeleteValue):
            values.pop(key_of(write.address), None)
        elif isinstance(write, AppendList):
            element = ListElement(seq, write.element_json, write.tag)
            lists.setdefault(key_of(write.address), []).append(element)
        elif isinstance(write, DeleteList):
            lists.pop(key_of(write.address), None)
        elif isinstance(write, InsertEntry):
            state.entries[write.id] = EntryRecord(
                write.id, write.parent_id, write.type, write.payload_json, seq, item.timestamp
            )
            if write.type == MESSAGE_TYPE:
                state.stats = attrs.evolve(state.stats, message_count=state.stats.message_count + 1)
        elif isinstance(write, InsertUsage):
            state.usage[write.id] = UsageRecord(
                write.id,
                write.usage_json,
                write.entry_id,
                write.adjustment,
                write.details_json,
                seq,
            )
            state.stats = attrs.evolve(state.stats, usage=add_usage(state.stats.usage, write.usage))
        elif isinstance(write, RetireScope):
            retirement.retire(state, write.retired.id)
        else:  # pragma: no cover - check_shape admits only the write types above
            raise AssertionError(write)
    state.next_seq = next_seq
    state.version += 1
