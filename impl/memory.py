"""The Memory backend: resident Sessions with nothing to make durable (000 §7).

A Memory Session is a :class:`~scopecheck.impl.resident_session.ResidentSession` with no
journal: maps keyed by physical identity, one global ``next_seq``, retirement deleting every
value and list of exactly that scope in the same synchronous application as its sibling writes
(RETIRE-2).  The repository keeps each Session's :class:`~scopecheck.impl.resident.ResidentState`
in a registry that outlives open handles (REPO-2) and plays the disk across a simulated restart.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from scopecheck.impl.resident import RETIRE_EXACT_SCOPE, ResidentState, Retirement
from scopecheck.impl.resident_session import ResidentSession
from scopecheck.impl.sequence import GLOBAL_SEQUENCE, SequencePolicy
from scopecheck.impl.stats import MESSAGE_TYPE
from scopecheck.impl.validation import check_session_id
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
from scopecheck.models.records import EntryRecord, Stats, ValueRecord


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
    source: ResidentState, options: ForkOptions, driver_class: type[ForkDriver] = ForkDriver
) -> ResidentState:
    """The destination state of a fork of ``source`` (001 §1.1–§1.3, Memory procedure):
    one pass over the source maps through the fork driver, which classifies every namespace
    (FORK-7, FORK-8) and keeps every copied row's seq (FORK-6)."""
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
        target = select_target(options, tip, parent_of, on_tip.__contains__)
        members = set(ancestry(target.destination_tip, parent_of))
        copied: Callable[[str], bool] = members.__contains__
    else:
        copied = entries.__contains__
    driver = driver_class(options, copied, target)
    dest = ResidentState(next_seq=source.next_seq)
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


class MemoryRepository:
    """Memory Sessions by id; state survives close and reopen of a Session (REPO-2).

    ``sessions`` is the registry of Session states -- Memory's disk: a world that restarts the
    "process" hands the same registry to a new repository (:meth:`reopened`).  ``sequence``,
    ``retirement`` and ``fork_driver`` are the contract's policies (SEQ-1, RETIRE-2, FORK-7),
    explicit so that every resident backend shares one definition of each.
    """

    def __init__(
        self,
        clock: Clock = wall_clock_ms,
        sessions: dict[str, ResidentState] | None = None,
        *,
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = RETIRE_EXACT_SCOPE,
        fork_driver: type[ForkDriver] = ForkDriver,
    ) -> None:
        self._clock = clock
        self._sessions: dict[str, ResidentState] = {} if sessions is None else sessions
        self._sequence = sequence
        self._retirement = retirement
        self._fork_driver = fork_driver
        self._open: dict[str, ResidentSession] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("repository is closed")

    def create(self, session_id: str) -> ResidentSession:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id in self._sessions:
                raise usage("already_exists", f"session {session_id!r} already exists (REPO-1)")
            self._sessions[session_id] = ResidentState()
            return self._track(session_id)

    def open(self, session_id: str) -> ResidentSession:
        check_session_id(session_id)
        with self._lock:
            self._check()
            if session_id not in self._sessions:
                raise usage("not_found", f"no session {session_id!r}")
            if session_id in self._open:
                raise usage("already_open", f"session {session_id!r} is already open (REPO-4)")
            return self._track(session_id)

    def _track(self, session_id: str) -> ResidentSession:
        storage = ResidentSession(
            session_id,
            self._sessions[session_id],
            self._clock,
            sequence=self._sequence,
            retirement=self._retirement,
        )
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
            boundary = (
                handle.at_commit_boundary() if handle is not None else contextlib.nullcontext()
            )
            with boundary:
                dest = build_memory_fork(source, options, self._fork_driver)
            dest.parent_session_id = source_id
            self._sessions[dest_id] = dest
        return dest_id

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
