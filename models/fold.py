"""The fold of a Session's log: the transactions the model keeps, and what they add up to.

The reference model (:mod:`scopecheck.models.reference`) keeps every committed transaction
and computes each observation from their fold; the fork and legacy models build logs of the
same transactions and fold them too, so the fold is its own module, below all three.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from scopecheck.models.errors import usage
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Snapshot,
    Stats,
    UsageRecord,
    UsageTotals,
    ValueKey,
    ValueRecord,
)
from scopecheck.models.scope import EphemeralScope, Scope, SessionScope
from scopecheck.models.writes import (
    AnyWrite,
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)

#: The writes that address a value, a list, or anything (the model's own lists, not impl's).
VALUE_WRITES = (SetValue, DeleteValue)
LIST_WRITES = (AppendList, DeleteList)
ALL_WRITES = (*VALUE_WRITES, *LIST_WRITES, InsertEntry, InsertUsage, RetireScope)


@attrs.frozen
class Transaction:
    """One committed transaction: its first seq, its timestamp and its writes in order."""

    first_seq: int
    timestamp: int
    writes: tuple[AnyWrite, ...]

    @property
    def seqs(self) -> range:
        return range(self.first_seq, self.first_seq + len(self.writes))

    def committed(self) -> tuple[Committed, ...]:
        return tuple(
            Committed(self.first_seq + i, self.timestamp, w) for i, w in enumerate(self.writes)
        )


@attrs.define
class Fold:
    """The accumulator of the fold.  Histories only grow (see module docstring)."""

    next_seq: int = 1
    history: dict[ValueKey, list[tuple[int, AnyWrite]]] = attrs.field(factory=dict)
    retired_at: dict[str, int] = attrs.field(factory=dict)
    entries: list[EntryRecord] = attrs.field(factory=list)
    usage_rows: list[UsageRecord] = attrs.field(factory=list)

    def step(self, tx: Transaction) -> None:
        for seq, write in zip(tx.seqs, tx.writes, strict=True):
            if isinstance(write, (*VALUE_WRITES, *LIST_WRITES)):
                a = write.address
                kind = "v" if isinstance(write, VALUE_WRITES) else "l"
                self.history.setdefault((a.scope_id, kind + a.namespace, a.key), []).append(
                    (seq, write)
                )
            elif isinstance(write, RetireScope):
                self.retired_at[write.retired.id] = seq
            elif isinstance(write, InsertEntry):
                self.entries.append(
                    EntryRecord(
                        write.id, write.parent_id, write.type, write.payload_json, seq, tx.timestamp
                    )
                )
            elif isinstance(write, InsertUsage):
                self.usage_rows.append(
                    UsageRecord(
                        write.id,
                        write.usage_json,
                        write.entry_id,
                        write.adjustment,
                        write.details_json,
                        seq,
                    )
                )
        self.next_seq = tx.first_seq + len(tx.writes)

    # -- queries over the accumulated history ---------------------------------------------

    def boundary(self, scope_id: str | None) -> int:
        """Latest retirement seq of a scope; 0 for the session scope or a never-retired one."""
        return 0 if scope_id is None else self.retired_at.get(scope_id, 0)

    def current_value(self, scope_id: str | None, namespace: str, key: str) -> ValueRecord | None:
        events = self.history.get((scope_id, "v" + namespace, key), [])
        floor = self.boundary(scope_id)
        live = [(seq, w) for seq, w in events if seq > floor]
        if not live:
            return None
        seq, last = live[-1]
        return ValueRecord(seq, last.value_json) if isinstance(last, SetValue) else None

    def surviving(self, scope_id: str | None, namespace: str, key: str) -> list[ListElement]:
        events = self.history.get((scope_id, "l" + namespace, key), [])
        floor = self.boundary(scope_id)
        for seq, write in events:
            if isinstance(write, DeleteList) and seq > floor:
                floor = seq
        return [
            ListElement(seq, w.element_json, w.tag)
            for seq, w in events
            if isinstance(w, AppendList) and seq > floor
        ]


def fold(log: Iterable[Transaction]) -> Fold:
    """Left fold of the transaction log into the accumulator."""
    acc = Fold()
    for tx in log:
        acc.step(tx)
    return acc


def scope_id_of(scope: Scope | None) -> str | None:
    if scope is None or isinstance(scope, SessionScope):
        return None
    if isinstance(scope, EphemeralScope):
        return scope.id
    raise usage("invalid_scope", f"not a scope: {scope!r}")


class Folded:
    """The fold of one log, caught up lazily with what was appended since, and the snapshot of
    its current length.  Both follow from the log alone, and a log only ever grows (a commit
    appends; a fork or a re-created Session gets a new list), so every handle over one log can
    share them: reopening a Session, or restarting, does not refold it."""

    def __init__(self, log: list[Transaction]) -> None:
        self.log = log
        self._acc = Fold()
        self._folded = 0
        self._snapshot: tuple[int, Snapshot] | None = None

    def state(self) -> Fold:
        if self._folded != len(self.log):
            for tx in self.log[self._folded :]:
                self._acc.step(tx)
            self._folded = len(self.log)
        return self._acc

    def snapshot(self) -> Snapshot:
        state = self.state()
        if self._snapshot is None or self._snapshot[0] != len(self.log):
            self._snapshot = (len(self.log), snapshot_of(state))
        return self._snapshot[1]


def stats_of(state: Fold) -> Stats:
    """STATS-1/STATS-2: a second fold, over entries and usage rows only, in seq order."""
    messages = sum(1 for e in state.entries if e.type == "message")
    tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    costs = {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0}
    for row in state.usage_rows:
        data = row.usage
        for name in tokens:
            tokens[name] += data.get(name, 0)
        cost = data.get("cost") or {}
        for name in costs:
            costs[name] += cost.get(name, 0)
    return Stats(
        messages,
        UsageTotals(
            input=tokens["input"],
            output=tokens["output"],
            cache_read=tokens["cacheRead"],
            cache_write=tokens["cacheWrite"],
            total_tokens=tokens["totalTokens"],
            cost_input=costs["input"],
            cost_output=costs["output"],
            cost_cache_read=costs["cacheRead"],
            cost_cache_write=costs["cacheWrite"],
            cost_total=costs["total"],
        ),
    )


def snapshot_of(state: Fold) -> Snapshot:
    """The Snapshot a folded log reads as (what a handle and a fork of that prefix read)."""
    values: list[tuple[ValueKey, ValueRecord]] = []
    lists: list[tuple[ValueKey, tuple[ListElement, ...]]] = []
    for sid, tagged_ns, key in state.history:
        namespace = tagged_ns[1:]
        if tagged_ns[0] == "v":
            record = state.current_value(sid, namespace, key)
            if record is not None:
                values.append(((sid, namespace, key), record))
        else:
            survivors = state.surviving(sid, namespace, key)
            if survivors:
                lists.append(((sid, namespace, key), tuple(survivors)))
    values.sort(key=lambda kv: Snapshot.sort_key(kv[0]))
    lists.sort(key=lambda kv: Snapshot.sort_key(kv[0]))
    return Snapshot(
        entries=tuple(state.entries),
        usage=tuple(state.usage_rows),
        values=tuple(values),
        lists=tuple(lists),
        stats=stats_of(state),
    )
