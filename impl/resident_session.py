"""An open Session whose state is resident: the commit path and reads Memory and JSONL share.

The commit path of 000 §3 and §7 -- admit, validate the shape (TX-1..TX-4), take the queue,
check references, allocate seqs (SEQ-1), make the transaction durable, apply it -- is the same
for both backends; only "make it durable" differs.  So the Session is composed of collaborators
rather than specialised by subclassing: a :class:`~scopecheck.impl.commit_queue.CommitQueue`,
the :class:`~scopecheck.impl.resident.ResidentState` it reads, the
:class:`~scopecheck.impl.sequence.SequencePolicy` and
:class:`~scopecheck.impl.resident.Retirement` of the contract, and a :class:`Journal`:
:data:`NO_JOURNAL` for Memory, the main log and scope sidecars for JSONL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from scopecheck.impl.commit_queue import CommitQueue
from scopecheck.impl.resident import (
    RETIRE_EXACT_SCOPE,
    ResidentState,
    Retirement,
    apply_committed,
    key_of,
)
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, SequencePolicy
from scopecheck.impl.validation import (
    check_list_query,
    check_name,
    check_references,
    check_shape,
    select_page,
)
from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.errors import usage
from scopecheck.models.protocols import Clock
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
from scopecheck.models.scope import SESSION, Scope, scope_id_of
from scopecheck.models.writes import Write


class Journal(Protocol):
    """What makes a resident Session's commits durable before they are acknowledged."""

    def check_writable(self) -> None:
        """Raise if this handle can take no more commits (JSONL-12); runs under the queue
        after the item and one-scope checks and before ids and references, so an empty
        commit is refused too (the order docs/protocol.md gives)."""
        ...

    def before_first_write(self) -> None:
        """Runs under the queue once a non-empty commit passed every check, before its seqs
        are allocated (the first-commit upgrade of a legacy file, LEGACY-9)."""
        ...

    def persist(
        self, scope_id: str | None, committed: tuple[Committed, ...], apply: Callable[[], None]
    ) -> None:
        """Make ``committed`` durable, then call ``apply`` (JSONL-3, JSONL-10); whatever must
        follow a durable commit on the queue (retirement cleanup, JSONL-9) runs after it."""
        ...

    def close(self) -> None:
        """Release files; runs once, after the last admitted commit finished (000 §6.5)."""
        ...


class NoJournal:
    """Memory: nothing to make durable, a commit is acknowledged once applied (000 §7)."""

    def check_writable(self) -> None:
        return None

    def before_first_write(self) -> None:
        return None

    def persist(
        self, scope_id: str | None, committed: tuple[Committed, ...], apply: Callable[[], None]
    ) -> None:
        apply()

    def close(self) -> None:
        return None


NO_JOURNAL: Journal = NoJournal()


class ResidentSession:
    """One open Session over resident state (Memory, and JSONL with its journal)."""

    def __init__(
        self,
        session_id: str,
        state: ResidentState,
        clock: Clock,
        *,
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = RETIRE_EXACT_SCOPE,
        journal: Journal = NO_JOURNAL,
    ) -> None:
        self._session_id = session_id
        self._state = state
        self._clock = clock
        self._sequence = sequence
        self._retirement = retirement
        self._journal = journal
        self._queue = CommitQueue()
        self._snapshot: tuple[int, Snapshot] | None = None
        #: Callbacks run with this Session when it closes; the repository drops its handle there.
        self.on_close: list[Callable[[ResidentSession], object]] = []

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def parent_session_id(self) -> str | None:
        """The fork source this Session was made from (FORK-11), else ``None``."""
        return self._state.parent_session_id

    # -- writes ----------------------------------------------------------------------------

    def commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        """Admit (or refuse, once sealed), then validate, allocate, persist and apply under
        the queue, in FIFO order (LIFE-1, TX-1..TX-4, SEQ-1, SEQ-4)."""
        with self._queue.admitted():
            checked = check_shape(writes)
            with self._queue.lock:
                self._journal.check_writable()
                state = self._state
                check_references(checked.writes, self._id_exists, state.entries.__contains__)
                if not checked.writes:
                    return ()
                self._journal.before_first_write()
                timestamp = self._clock()
                allocation = self._sequence.allocate(
                    self._session_id, state.next_seq, checked.scope_id, checked.writes
                )
                committed = tuple(
                    Committed(allocation.first + index, timestamp, write)
                    for index, write in enumerate(checked.writes)
                )

                def apply() -> None:
                    apply_committed(state, committed, allocation.next_seq, self._retirement)

                self._journal.persist(checked.scope_id, committed, apply)
                return committed

    def _id_exists(self, ident: str) -> bool:
        return ident in self._state.entries or ident in self._state.usage

    @contextmanager
    def at_commit_boundary(self) -> Iterator[ResidentState]:
        """Hold the commit queue and yield the state between two commits: a fork reading it
        sees each commit wholly or not at all (FORK-12)."""
        with self._queue.lock:
            yield self._state

    # -- reads -----------------------------------------------------------------------------

    def get_value(self, address: ValueAddress[Any, Scope]) -> ValueRecord | None:
        self._queue.check_open()
        if not isinstance(address, ValueAddress):
            raise usage("invalid_query", f"not a value address: {address!r}")
        return self._state.values.get(key_of(address))

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        """Keys of one scope and namespace starting with ``prefix``, in code-point order
        (LIST-9): Python compares ``str`` by code point."""
        self._queue.check_open()
        check_name("namespace", namespace)
        check_name("prefix", prefix)
        scope_id = scope_id_of(SESSION if scope is None else scope)
        rows = [
            (key[2], record)
            for key, record in self._state.values.items()
            if key[0] == scope_id and key[1] == namespace and key[2].startswith(prefix)
        ]
        return tuple(sorted(rows, key=lambda row: row[0]))

    def read_list(
        self,
        address: ListAddress[Any, Scope],
        *,
        cursor: int | None = None,
        order: Order = "asc",
        limit: int | None = None,
        stop_at_tag: str | None = None,
    ) -> tuple[ListElement, ...]:
        self._queue.check_open()
        if not isinstance(address, ListAddress):
            raise usage("invalid_query", f"not a list address: {address!r}")
        query = check_list_query(cursor, order, limit, stop_at_tag)
        elements = self._state.lists.get(key_of(address), [])
        return tuple(
            select_page(elements, query.cursor, query.order, query.limit, query.stop_at_tag)
        )

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        self._queue.check_open()
        return self._state.entries.get(entry_id)

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        self._queue.check_open()
        return self._state.usage.get(usage_id)

    def stats(self) -> Stats:
        self._queue.check_open()
        return self._state.stats

    def snapshot(self) -> Snapshot:
        """The whole state, sorted; kept until the next applied transaction, since sorting
        every map is most of its cost and a snapshot is immutable."""
        self._queue.check_open()
        state = self._state
        cached = self._snapshot
        if cached is not None and cached[0] == state.version:
            return cached[1]
        snapshot = self._snapshot_of(state)
        self._snapshot = (state.version, snapshot)
        return snapshot

    @staticmethod
    def _snapshot_of(state: ResidentState) -> Snapshot:
        return Snapshot(
            entries=tuple(sorted(state.entries.values(), key=lambda r: r.seq)),
            usage=tuple(sorted(state.usage.values(), key=lambda r: r.seq)),
            values=tuple(sorted(state.values.items(), key=lambda kv: Snapshot.sort_key(kv[0]))),
            lists=tuple(
                sorted(
                    ((k, tuple(v)) for k, v in state.lists.items() if v),
                    key=lambda kv: Snapshot.sort_key(kv[0]),
                )
            ),
            stats=state.stats,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Seal at once, wait for admitted commits, then release the journal and the handle
        (LIFE-1, 000 §6.5); idempotent.  Closing never retires a scope (JSONL-17)."""
        if not self._queue.seal_and_drain():
            return
        self._journal.close()
        for callback in self.on_close:
            callback(self)

    @property
    def closed(self) -> bool:
        return self._queue.sealed
