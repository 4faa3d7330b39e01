"""Planted bugs in the Memory backend: the mistakes 000 §2–§3 and §7 warn about.

Each is the real Memory backend changed at a public seam (:mod:`scopecheck.planted.seams`):
given another policy -- the superseded per-scope sequence allocation of 002, a retirement
that forgets lists -- or handing out a Session that changes one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import orjson

from scopecheck.impl.resident import ResidentState
from scopecheck.impl.sequence import Allocation
from scopecheck.impl.validation import check_list_query, select_page
from scopecheck.models.addresses import ListAddress, ValueAddress, value
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.records import Committed, ListElement, Order, Snapshot, Stats
from scopecheck.models.scope import SESSION, scope_id_of
from scopecheck.models.writes import (
    AppendList,
    DeleteValue,
    RetireScope,
    SetValue,
    delete_value,
    set_value,
)
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import WrappedSession, memory_over, memory_with


def _register(name: str, description: str, make: Any) -> None:
    register(Mutant(name, "memory", description, make))


# -- policies --------------------------------------------------------------------------------


class PerScopeSequence:
    """002's allocation, superseded by 000 §3: each ephemeral scope counts from 1 on a
    counter of its own and leaves the Session's counter alone (SEQ-1)."""

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], int] = {}

    def allocate(
        self, session_id: str, next_seq: int, scope_id: str | None, writes: Sequence[Any]
    ) -> Allocation:
        if scope_id is None:
            return Allocation(next_seq, next_seq + len(writes))
        first = self._counters.get((session_id, scope_id), 1)
        self._counters[(session_id, scope_id)] = first + len(writes)
        return Allocation(first, next_seq)


class ValuesOnlyRetirement:
    """Retirement deletes the scope's values and forgets its lists (RETIRE-2)."""

    def retire(self, state: ResidentState, scope_id: str) -> None:
        for key in [k for k in state.values if k[0] == scope_id]:
            del state.values[key]


_register(
    "memory-per-scope-seq",
    "ephemeral commits draw seqs from a per-scope counter (SEQ-1)",
    lambda: memory_with(
        "per-scope-seq", "Memory, per-scope seqs", lambda: {"sequence": PerScopeSequence()}
    ),
)
_register(
    "memory-retire-leaves-lists",
    "retirement deletes the scope's values but not its lists",
    lambda: memory_with(
        "retire-leaves-lists",
        "Memory, retirement keeps lists",
        lambda: {"retirement": ValuesOnlyRetirement()},
    ),
)


# -- Sessions changing one call ----------------------------------------------------------------


def _wrapped(name: str, description: str, wrap: Any) -> None:
    _register(name, description, lambda: memory_over(name.removeprefix("memory-"), wrap, name))


class StopAtTagPastLimit(WrappedSession):
    """``stop_at_tag`` is searched for past the page limit (LIST-5)."""

    def read_list(
        self,
        address: Any,
        *,
        cursor: Any = None,
        order: Order = "asc",
        limit: Any = None,
        stop_at_tag: Any = None,
    ) -> tuple[ListElement, ...]:
        query = check_list_query(cursor, order, limit, stop_at_tag)
        whole: tuple[ListElement, ...] = self._inner.read_list(
            address, cursor=cursor, order=order, limit=10_000
        )
        if query.stop_at_tag is not None:
            for index, element in enumerate(whole):
                if element.tag == query.stop_at_tag:
                    return whole[: index + 1]
        return whole[: query.limit]


class MixedMutatesFirst(WrappedSession):
    """A rejected transaction's session-scope value writes are applied anyway (TX-4)."""

    def commit(self, writes: Sequence[Any]) -> Any:
        try:
            return self._inner.commit(writes)
        except ScopecheckError:
            scopes = {w.address.scope_id for w in writes if isinstance(w, (SetValue, AppendList))}
            early = [w for w in writes if isinstance(w, SetValue) and w.address.scope_id is None]
            if len(scopes) > 1 and early and not self._inner.closed:
                self._inner.commit(early)
            raise


class ReuseResurrects(WrappedSession):
    """The first write under a retired scope id brings the values of the retired lifetime
    back (RETIRE-4): retirement only hid them."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        #: scope id -> {address: value} of its current lifetime, and of its retired one.
        self._live: dict[str, dict[Any, Any]] = shared.setdefault(f"live:{inner.session_id}", {})
        self._graves: dict[str, dict[Any, Any]] = shared.setdefault(
            f"graves:{inner.session_id}", {}
        )

    def commit(self, writes: Sequence[Any]) -> Any:
        done: tuple[Committed, ...] = self._inner.commit(writes)
        reused: list[str] = []
        for item in done:
            write = item.write
            if isinstance(write, RetireScope):
                self._graves[write.retired.id] = self._live.pop(write.retired.id, {})
            elif isinstance(write, (SetValue, AppendList, DeleteValue)):
                scope_id = write.address.scope_id
                if scope_id is None:
                    continue
                if self._graves.get(scope_id):
                    reused.append(scope_id)
                lifetime = self._live.setdefault(scope_id, {})
                if isinstance(write, SetValue):
                    lifetime[write.address] = orjson.loads(write.value_json)
                elif isinstance(write, DeleteValue):
                    lifetime.pop(write.address, None)
        for scope_id in dict.fromkeys(reused):
            grave = self._graves.pop(scope_id)
            back = [set_value(address, old) for address, old in grave.items()]
            if back:
                self.commit(back)
        return done


class StatsCountScoped(WrappedSession):
    """Stats count ephemeral value writes as messages (STATS-3)."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        self._key = f"scoped sets:{inner.session_id}"

    def commit(self, writes: Sequence[Any]) -> Any:
        done = self._inner.commit(writes)
        scoped = sum(isinstance(w, SetValue) and w.address.scope_id is not None for w in writes)
        self._shared[self._key] = self._shared.get(self._key, 0) + scoped
        return done

    def _counted(self, stats: Stats) -> Stats:
        return attrs.evolve(
            stats, message_count=stats.message_count + self._shared.get(self._key, 0)
        )

    def stats(self) -> Stats:
        return self._counted(self._inner.stats())

    def snapshot(self) -> Snapshot:
        snap: Snapshot = self._inner.snapshot()
        return attrs.evolve(snap, stats=self._counted(snap.stats))


#: A value nothing reads: deleting it changes no state but draws a seq.
_VOID = value("scopecheck.void", "empty-commit")


class EmptyCommitConsumesSeq(WrappedSession):
    """An empty commit draws a sequence number (SEQ-4)."""

    def commit(self, writes: Sequence[Any]) -> Any:
        if not list(writes) and not self.closed:
            self._inner.commit([delete_value(_VOID)])
        return self._inner.commit(writes)


class InclusiveCursor(WrappedSession):
    """The list cursor is inclusive instead of exclusive (LIST-2)."""

    def read_list(
        self, address: Any, *, cursor: Any = None, order: Order = "asc", **kw: Any
    ) -> Any:
        if isinstance(cursor, int) and not isinstance(cursor, bool) and cursor >= 0:
            cursor = max(cursor - 1 if order == "asc" else cursor + 1, 0)
        return self._inner.read_list(address, cursor=cursor, order=order, **kw)


class CloseDoesNotSeal(WrappedSession):
    """Reads keep answering after ``close()``, from what the Session held when it closed
    (LIFE-2)."""

    _last: Snapshot | None = None

    def close(self) -> None:
        if self._last is None and not self._inner.closed:
            self._last = self._inner.snapshot()
        self._inner.close()

    def _after_close(self) -> Snapshot | None:
        return self._last if self._inner.closed else None

    def get_value(self, address: ValueAddress[Any, Any]) -> Any:
        last = self._after_close()
        if last is None:
            return self._inner.get_value(address)
        key = (address.scope_id, address.namespace, address.key)
        return dict(last.values).get(key)

    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        last = self._after_close()
        if last is None:
            return self._inner.scan_values(namespace, prefix, scope)
        scope_id = scope_id_of(SESSION if scope is None else scope)
        return tuple(
            (k[2], record)
            for k, record in last.values
            if k[0] == scope_id and k[1] == namespace and k[2].startswith(prefix)
        )

    def read_list(self, address: ListAddress[Any, Any], **options: Any) -> Any:
        last = self._after_close()
        if last is None:
            return self._inner.read_list(address, **options)
        query = check_list_query(
            options.get("cursor"),
            options.get("order", "asc"),
            options.get("limit"),
            options.get("stop_at_tag"),
        )
        key = (address.scope_id, address.namespace, address.key)
        elements = list(dict(last.lists).get(key, ()))
        page = select_page(elements, query.cursor, query.order, query.limit, query.stop_at_tag)
        return tuple(page)

    def get_entry(self, entry_id: str) -> Any:
        last = self._after_close()
        if last is None:
            return self._inner.get_entry(entry_id)
        return next((e for e in last.entries if e.id == entry_id), None)

    def get_usage(self, usage_id: str) -> Any:
        last = self._after_close()
        if last is None:
            return self._inner.get_usage(usage_id)
        return next((u for u in last.usage if u.id == usage_id), None)

    def stats(self) -> Stats:
        last = self._after_close()
        return self._inner.stats() if last is None else last.stats

    def snapshot(self) -> Snapshot:
        last = self._after_close()
        return self._inner.snapshot() if last is None else last


_wrapped(
    "memory-stop-at-tag-past-limit",
    "stop_at_tag searches past the page limit (LIST-5)",
    StopAtTagPastLimit,
)
_wrapped(
    "memory-mixed-mutates-first",
    "a mixed-scope transaction applies its session writes before it is rejected (TX-4)",
    MixedMutatesFirst,
)
_wrapped(
    "memory-reuse-resurrects",
    "a write after retirement brings the retired lifetime's values back (RETIRE-4)",
    ReuseResurrects,
)
_wrapped(
    "memory-stats-count-scoped",
    "stats count ephemeral value writes as messages (STATS-3)",
    StatsCountScoped,
)
_wrapped(
    "memory-empty-commit-consumes-seq",
    "an empty commit consumes a sequence number (SEQ-4)",
    EmptyCommitConsumesSeq,
)
_wrapped(
    "memory-inclusive-cursor",
    "the list cursor is inclusive instead of exclusive (LIST-2)",
    InclusiveCursor,
)
_wrapped(
    "memory-close-does-not-seal",
    "reads keep working after close() (LIFE-2)",
    CloseDoesNotSeal,
)
