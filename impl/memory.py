"""The Memory backend: maps keyed by physical identity, one global ``next_seq`` (000 §7).

Retirement deletes every value and list of exactly that scope in the same synchronous
application as its sibling writes (RETIRE-2); a later write under the same ID simply recreates
state.  Commits are serialised by a FIFO lock: the Python spelling of the seeds' commit queue
(LIFE-1, spec/python-mapping.md).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from scopecheck.impl.stats import MESSAGE_TYPE, add_usage
from scopecheck.impl.validation import (
    check_list_query,
    check_name,
    check_references,
    check_session_id,
    check_shape,
    select_page,
)
from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.errors import ClosedError, CorruptError, usage
from scopecheck.models.fork import BranchFork, ForkOptions, check_fork_options
from scopecheck.models.fork_policy import (
    BRANCH_TIP,
    LANE_CONFIG,
    LANE_STATE,
    MISSING,
    BranchTarget,
    ForkDriver,
    ancestry,
    check_branch_lane,
    select_target,
)
from scopecheck.models.payload import decode_json
from scopecheck.models.protocols import Clock
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Order,
    Snapshot,
    Stats,
    UsageRecord,
    ValueKey,
    ValueRecord,
)
from scopecheck.models.scope import SESSION, Scope, scope_id_of
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
    Write,
)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define(eq=False)
class MemoryState:
    """Everything one Memory Session holds; it outlives its open handles (REPO-2)."""

    next_seq: int = 1
    entries: dict[str, EntryRecord] = attrs.field(factory=dict)
    usage: dict[str, UsageRecord] = attrs.field(factory=dict)
    values: dict[ValueKey, ValueRecord] = attrs.field(factory=dict)
    lists: dict[ValueKey, list[ListElement]] = attrs.field(factory=dict)
    stats: Stats = attrs.field(factory=Stats)
    #: The source of a fork destination (001 §1.1 ``parentSessionId``), else ``None``.
    parent_session_id: str | None = None


class MemoryStorage:
    """One open Memory Session."""

    def __init__(self, session_id: str, state: MemoryState, clock: Clock) -> None:
        self._session_id = session_id
        self._state = state
        self._clock = clock
        self._queue = threading.Lock()
        self._admission = threading.Condition()
        self._in_flight = 0
        self._sealed = False
        self._closed = False
        self.on_close: list[Any] = []

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def parent_session_id(self) -> str | None:
        """The fork source this Session was made from (FORK-11), else ``None``."""
        return self._state.parent_session_id

    # -- writes ----------------------------------------------------------------------------

    def commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        """Admit (or refuse, once sealed), then run in FIFO order under the queue (LIFE-1)."""
        with self._admission:
            if self._sealed:
                raise ClosedError()
            self._in_flight += 1
        try:
            return self._run_commit(writes)
        finally:
            with self._admission:
                self._in_flight -= 1
                self._admission.notify_all()

    def _run_commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        checked = check_shape(writes)
        with self._queue:
            state = self._state
            check_references(checked.writes, self._id_exists, state.entries.__contains__)
            if not checked.writes:
                return ()
            timestamp = self._clock()
            first = self._first_seq(checked.scope_id)
            committed = tuple(
                Committed(first + index, timestamp, write)
                for index, write in enumerate(checked.writes)
            )
            for item in committed:
                self._apply(item)
            self._advance(checked.scope_id, len(committed))
            return committed

    def _first_seq(self, scope_id: str | None) -> int:
        """One global counter for every scope (SEQ-1); no per-scope counters exist."""
        return self._state.next_seq

    def _advance(self, scope_id: str | None, count: int) -> None:
        self._state.next_seq += count

    def _id_exists(self, ident: str) -> bool:
        return ident in self._state.entries or ident in self._state.usage

    def _apply(self, item: Committed) -> None:
        state, write, seq = self._state, item.write, item.seq
        if isinstance(write, SetValue):
            state.values[_key(write.address)] = ValueRecord(seq, write.value_json)
        elif isinstance(write, DeleteValue):
            state.values.pop(_key(write.address), None)
        elif isinstance(write, AppendList):
            element = ListElement(seq, write.element_json, write.tag)
            state.lists.setdefault(_key(write.address), []).append(element)
        elif isinstance(write, DeleteList):
            state.lists.pop(_key(write.address), None)
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
            self._retire(write.retired.id)
        else:  # pragma: no cover - check_shape admits only the write types above
            raise AssertionError(write)

    def _retire(self, scope_id: str) -> None:
        """Delete every value and list of exactly this scope, nothing else (RETIRE-2)."""
        state = self._state
        for mapping in (state.values, state.lists):
            for key in [k for k in mapping if k[0] == scope_id]:
                del mapping[key]

    # -- reads -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._sealed:
            raise ClosedError()

    def get_value(self, address: ValueAddress[Any, Scope]) -> ValueRecord | None:
        self._check_open()
        if not isinstance(address, ValueAddress):
            raise usage("invalid_query", f"not a value address: {address!r}")
        return self._state.values.get(_key(address))

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        self._check_open()
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
        self._check_open()
        if not isinstance(address, ListAddress):
            raise usage("invalid_query", f"not a list address: {address!r}")
        query = check_list_query(cursor, order, limit, stop_at_tag)
        elements = self._state.lists.get(_key(address), [])
        return tuple(
            select_page(elements, query.cursor, query.order, query.limit, query.stop_at_tag)
        )

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        self._check_open()
        return self._state.entries.get(entry_id)

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        self._check_open()
        return self._state.usage.get(usage_id)

    def stats(self) -> Stats:
        self._check_open()
        return self._state.stats

    def snapshot(self) -> Snapshot:
        self._check_open()
        state = self._state
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
        """Seal at once, then wait for admitted commits to finish (LIFE-1); idempotent."""
        with self._admission:
            self._sealed = True
            self._admission.wait_for(lambda: self._in_flight == 0)
            if self._closed:
                return
            self._closed = True
        for callback in self.on_close:
            callback(self)

    @property
    def closed(self) -> bool:
        return self._sealed


def new_fork_id() -> str:
    """A fresh destination id when ``ForkOptions.id`` is omitted."""
    return "fork-" + uuid.uuid4().hex


def _parent_of(entries: Mapping[str, EntryRecord]) -> Callable[[str], object]:
    def parent_of(entry_id: str) -> object:
        record = entries.get(entry_id)
        return MISSING if record is None else record.parent_id

    return parent_of


def tip_of(value_json: bytes, branch: str) -> str | None:
    """A branch tip value: an entry id or ``null``; anything else is corruption."""
    tip = decode_json(value_json)
    if tip is not None and not isinstance(tip, str):
        raise CorruptError("corrupt", f"branch {branch!r} tip is not an entry id or null")
    return tip


def build_memory_fork(
    source: MemoryState,
    options: ForkOptions,
    select: Callable[..., BranchTarget] = select_target,
    driver_class: type[ForkDriver] = ForkDriver,
) -> MemoryState:
    """The destination state of a fork of ``source`` (001 §1.1–§1.3, Memory procedure)."""
    entries = source.entries
    parent_of = _parent_of(entries)
    target: BranchTarget | None = None
    if isinstance(options, BranchFork):
        name = options.branch
        tip_row = source.values.get((None, BRANCH_TIP, name))
        check_branch_lane(
            options,
            tip_row is not None,
            (None, LANE_CONFIG, name) in source.values,
            (None, LANE_STATE, name) in source.values,
        )
        assert tip_row is not None
        tip = tip_of(tip_row.value_json, name)
        on_tip = set(ancestry(tip, parent_of))
        target = select(options, tip, parent_of, on_tip.__contains__)
        members = set(ancestry(target.destination_tip, parent_of))
        copied: Callable[[str], bool] = members.__contains__
    else:
        copied = entries.__contains__
    driver = driver_class(options, copied, target)
    dest = MemoryState(next_seq=source.next_seq)
    messages = 0
    if target is None:
        # Tree scope copies every entry: one presized copy of the map, so the destination's
        # table is never regrown entry by entry (no transient second table, FORK-16).
        dest.entries = dict(entries)
        messages = sum(record.type == MESSAGE_TYPE for record in entries.values())
    else:
        for entry_id, record in entries.items():
            if copied(entry_id):
                dest.entries[entry_id] = record
                messages += record.type == MESSAGE_TYPE
    for (scope_id, namespace, key), row in source.values.items():
        for out in driver.value(scope_id, namespace, key, row.seq, row.value_json):
            dest.values[(None, out.namespace, out.key)] = ValueRecord(out.seq, out.value_json)
    for (scope_id, namespace, key), elements in source.lists.items():
        for element in elements:
            for item in driver.list_element(scope_id, namespace, key, element):
                dest.lists.setdefault((None, item.namespace, item.key), []).append(item.element)
    for out in driver.finish():
        dest.values[(None, out.namespace, out.key)] = ValueRecord(out.seq, out.value_json)
    dest.stats = Stats(message_count=messages)
    return dest


def _key(address: ValueAddress[Any, Any] | ListAddress[Any, Any]) -> ValueKey:
    return (address.scope_id, address.namespace, address.key)


class MemoryRepository:
    """Memory Sessions by id; state survives close and reopen of a Session (REPO-2)."""

    #: The handle class; the mutant catalogue substitutes broken subclasses here.
    storage_class: type[MemoryStorage] = MemoryStorage

    def __init__(
        self, clock: Clock = wall_clock_ms, sessions: dict[str, MemoryState] | None = None
    ) -> None:
        self._clock = clock
        self._sessions: dict[str, MemoryState] = {} if sessions is None else sessions
        self._open: dict[str, MemoryStorage] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("repository is closed")

    def create(self, session_id: str) -> MemoryStorage:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id in self._sessions:
                raise usage("already_exists", f"session {session_id!r} already exists (REPO-1)")
            self._sessions[session_id] = MemoryState()
            return self._track(session_id)

    def open(self, session_id: str) -> MemoryStorage:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id not in self._sessions:
                raise usage("not_found", f"no session {session_id!r}")
            if session_id in self._open:
                raise usage("already_open", f"session {session_id!r} is already open (REPO-4)")
            return self._track(session_id)

    def _track(self, session_id: str) -> MemoryStorage:
        storage = self.storage_class(session_id, self._sessions[session_id], self._clock)
        storage.on_close.append(lambda _: self._open.pop(session_id, None))
        self._open[session_id] = storage
        return storage

    def list(self) -> list[str]:
        self._check()
        return sorted(self._sessions)

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """Build the destination at a source commit boundary (001 §1.3 Memory): the source's
        commit queue is held while its maps are iterated once through the fork driver, so a
        commit admitted before appears wholly and one after not at all (FORK-12).  Nothing is
        registered until the destination is complete, so a rejection leaves no trace (FORK-1).
        """
        options = check_fork_options(options)
        check_session_id(source_id)
        dest_id = check_session_id(options.id) if options.id is not None else new_fork_id()
        with self._lock:
            self._check()
            source = self._sessions.get(source_id)
            if source is None:
                raise usage("not_found", f"no session {source_id!r}")
            if dest_id in self._sessions:
                raise usage("already_exists", f"session {dest_id!r} already exists (REPO-1)")
            handle = self._open.get(source_id)
            boundary = handle._queue if handle is not None else contextlib.nullcontext()
            with boundary:
                dest = self.build_fork(source, options)
            dest.parent_session_id = source_id
            self._sessions[dest_id] = dest
        return dest_id

    def build_fork(self, source: MemoryState, options: ForkOptions) -> MemoryState:
        """One pass over the source maps through the shared driver; the mutant catalogue
        overrides this to plant fork bugs."""
        return build_memory_fork(source, options)

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id in self._open:
                raise usage("already_open", f"close session {session_id!r} before deleting it")
            if self._sessions.pop(session_id, None) is None:
                raise usage("not_found", f"no session {session_id!r}")

    def close(self) -> None:
        self._closed = True
        for storage in list(self._open.values()):
            storage.close()

    def reopened(self) -> MemoryRepository:
        """A new repository over the same registry: the Memory form of a process restart."""
        self.close()
        fresh = type(self)(self._clock, self._sessions)
        return fresh
