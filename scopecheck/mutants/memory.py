"""Planted bugs in the Memory backend: the mistakes 000 §2–§3 and §7 warn about."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from scopecheck.backends import Backend, MemoryWorld
from scopecheck.impl.memory import MemoryRepository, MemoryStorage
from scopecheck.impl.validation import check_list_query, check_shape
from scopecheck.models.records import Committed, ListElement, Order
from scopecheck.models.writes import AppendList, SetValue, Write
from scopecheck.mutants import Mutant, register

#: Extra per-Session state a mutant keeps (MemoryState is slotted; the real backend needs none).
_EXTRA: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _extra(storage: MemoryStorage, name: str) -> dict[Any, Any]:
    extra: dict[Any, Any] = _EXTRA.setdefault(storage._state, {}).setdefault(name, {})
    return extra


def _memory_backend(name: str, storage: type[MemoryStorage]) -> Backend:
    repo_class = type(
        f"{storage.__name__}Repository", (MemoryRepository,), {"storage_class": storage}
    )
    world_class = type(f"{storage.__name__}World", (MemoryWorld,), {"repository_class": repo_class})
    return Backend(f"memory[{name}]", world_class, f"Memory with {name}")


def _mutant(name: str, description: str) -> Any:
    def decorate(storage: type[MemoryStorage]) -> type[MemoryStorage]:
        register(Mutant(name, "memory", description, lambda: _memory_backend(name, storage)))
        return storage

    return decorate


@_mutant("memory-per-scope-seq", "ephemeral commits draw seqs from a per-scope counter (SEQ-1)")
class PerScopeSequence(MemoryStorage):
    def _first_seq(self, scope_id: str | None) -> int:
        if scope_id is None:
            return self._state.next_seq
        counters = _extra(self, "scope_seq")
        return int(counters.get(scope_id, 1))

    def _advance(self, scope_id: str | None, count: int) -> None:
        if scope_id is None:
            self._state.next_seq += count
        else:
            counters = _extra(self, "scope_seq")
            counters[scope_id] = counters.get(scope_id, 1) + count


@_mutant("memory-retire-leaves-lists", "retirement deletes the scope's values but not its lists")
class RetireLeavesLists(MemoryStorage):
    def _retire(self, scope_id: str) -> None:
        for key in [k for k in self._state.values if k[0] == scope_id]:
            del self._state.values[key]


@_mutant("memory-stop-at-tag-past-limit", "stop_at_tag searches past the page limit (LIST-5)")
class StopAtTagPastLimit(MemoryStorage):
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
        whole = super().read_list(address, cursor=cursor, order=order, limit=10_000)
        if query.stop_at_tag is not None:
            for index, element in enumerate(whole):
                if element.tag == query.stop_at_tag:
                    return whole[: index + 1]
        return whole[: query.limit]


@_mutant(
    "memory-mixed-mutates-first",
    "a mixed-scope transaction applies its session writes before it is rejected (TX-4)",
)
class MixedMutatesFirst(MemoryStorage):
    def commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        for index, write in enumerate(writes):
            if isinstance(write, SetValue) and write.address.scope_id is None:
                self._apply(Committed(self._state.next_seq + index, 0, write))
        return super().commit(writes)


@_mutant(
    "memory-reuse-resurrects",
    "a write after retirement brings the retired lifetime's values back (RETIRE-4)",
)
class ReuseResurrects(MemoryStorage):
    def _retire(self, scope_id: str) -> None:
        graveyard = _extra(self, "graveyard")
        for key in [k for k in self._state.values if k[0] == scope_id]:
            graveyard[key] = self._state.values.pop(key)
        for key in [k for k in self._state.lists if k[0] == scope_id]:
            del self._state.lists[key]

    def _apply(self, item: Committed) -> None:
        write = item.write
        if isinstance(write, (SetValue, AppendList)) and write.address.scope_id is not None:
            graveyard = _extra(self, "graveyard")
            for key in [k for k in graveyard if k[0] == write.address.scope_id]:
                self._state.values.setdefault(key, graveyard.pop(key))
        super()._apply(item)


@_mutant("memory-stats-count-scoped", "stats count ephemeral value writes as messages (STATS-3)")
class StatsCountScoped(MemoryStorage):
    def _apply(self, item: Committed) -> None:
        super()._apply(item)
        write = item.write
        if isinstance(write, SetValue) and write.address.scope_id is not None:
            stats = self._state.stats
            self._state.stats = type(stats)(stats.message_count + 1, stats.usage)


@_mutant("memory-empty-commit-consumes-seq", "an empty commit consumes a sequence number (SEQ-4)")
class EmptyCommitConsumesSeq(MemoryStorage):
    def commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        if not check_shape(writes).writes and not self.closed:
            self._state.next_seq += 1
        return super().commit(writes)


@_mutant("memory-inclusive-cursor", "the list cursor is inclusive instead of exclusive (LIST-2)")
class InclusiveCursor(MemoryStorage):
    def read_list(
        self,
        address: Any,
        *,
        cursor: Any = None,
        order: Order = "asc",
        limit: Any = None,
        stop_at_tag: Any = None,
    ) -> tuple[ListElement, ...]:
        if isinstance(cursor, int) and not isinstance(cursor, bool) and cursor >= 0:
            cursor = cursor - 1 if order == "asc" else cursor + 1
            cursor = max(cursor, 0)
        return super().read_list(
            address, cursor=cursor, order=order, limit=limit, stop_at_tag=stop_at_tag
        )


@_mutant("memory-close-does-not-seal", "reads keep working after close() (LIFE-2)")
class CloseDoesNotSeal(MemoryStorage):
    def _check_open(self) -> None:
        return None
