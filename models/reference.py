"""The reference model: every observation is a query over the log of committed transactions.

This is the oracle the machines compare every backend with.  It is written differently from the
backends on purpose (BRIEF "The model is the oracle"):

* nothing is ever deleted — the model keeps the full history of every address and the latest
  retirement sequence of every scope, and *computes* what is live: a scoped record is live iff
  its seq is above its scope's latest retirement (RETIRE-3, 000 §2.2), a list element iff it is
  above both that boundary and the list's latest whole-list delete;
* its checks are its own code, not ``impl/validation.py``;
* ``state_at(k)`` folds only the first ``k`` transactions, which is what crash checking needs
  ("the recovered state equals the model after some prefix").

It imports only the contract vocabulary of ``models`` and the fold of a log
(:mod:`scopecheck.models.fold`), which the fork and legacy models share (tests/test_layering.py
enforces this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.errors import ClosedError, usage
from scopecheck.models.fold import (
    ALL_WRITES,
    LIST_WRITES,
    VALUE_WRITES,
    Fold,
    Folded,
    Transaction,
    fold,
    scope_id_of,
    snapshot_of,
    stats_of,
)
from scopecheck.models.records import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    Committed,
    EntryRecord,
    ListElement,
    Snapshot,
    Stats,
    UsageRecord,
    ValueRecord,
)
from scopecheck.models.scope import Scope
from scopecheck.models.writes import (
    AnyWrite,
    InsertEntry,
    InsertUsage,
)


class ReferenceSession:
    """The model of one open Session handle over a shared, growing log."""

    def __init__(
        self,
        session_id: str,
        log: list[Transaction],
        folded: Folded | None = None,
        parent_session_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.log = log
        self._view = Folded(log) if folded is None or folded.log is not log else folded
        self.closed = False
        #: The Session this one was forked from, ``None`` for one created (FORK-11).
        self.parent_session_id = parent_session_id

    def _state(self) -> Fold:
        return self._view.state()

    def state_at(self, prefix: int) -> Snapshot:
        """The snapshot after the first ``prefix`` committed transactions (crash oracle)."""
        return snapshot_of(fold(self.log[:prefix]))

    # -- commit ----------------------------------------------------------------------------

    def commit(self, writes: object, timestamp: int) -> tuple[Committed, ...]:
        if self.closed:
            raise ClosedError()
        items = self._admissible(writes)
        self._check_ids(items)
        if not items:
            return ()
        tx = Transaction(self._state().next_seq, timestamp, tuple(items))
        self.log.append(tx)
        return tx.committed()

    @staticmethod
    def _admissible(writes: object) -> list[AnyWrite]:
        """TX-1..TX-3, in the order TX-5 fixes: item types first, then the one-scope rule."""
        if isinstance(writes, (str, bytes)) or not isinstance(writes, Sequence):
            raise usage("invalid_transaction", "a transaction is a list of writes")
        for index, item in enumerate(writes):
            if not isinstance(item, ALL_WRITES):
                raise usage("invalid_transaction", f"item {index} is not a write", index=index)
        ephemeral_ids = {
            w.address.scope_id
            for w in writes
            if isinstance(w, (*VALUE_WRITES, *LIST_WRITES)) and w.address.scope_id is not None
        }
        if len(ephemeral_ids) > 1:
            raise usage("invalid_transaction", "two ephemeral scope IDs in one transaction")
        if ephemeral_ids:
            for item in writes:
                session_scoped = not isinstance(item, (*VALUE_WRITES, *LIST_WRITES)) or (
                    item.address.scope_id is None
                )
                if session_scoped:
                    raise usage("invalid_transaction", "session and ephemeral writes mixed")
        return list(writes)

    def _check_ids(self, items: list[AnyWrite]) -> None:
        """WRITE-5/WRITE-6 in write order; a duplicate id is reported before a bad reference."""
        state = self._state()
        taken = {e.id for e in state.entries} | {u.id for u in state.usage_rows}
        entry_ids = {e.id for e in state.entries}
        for index, item in enumerate(items):
            if not isinstance(item, (InsertEntry, InsertUsage)):
                continue
            if item.id in taken:
                raise usage("duplicate_id", f"id {item.id!r} is taken", index=index)
            ref = item.parent_id if isinstance(item, InsertEntry) else item.entry_id
            if ref is not None and ref not in entry_ids:
                raise usage("unknown_reference", f"{ref!r} is not an earlier entry", index=index)
            taken.add(item.id)
            if isinstance(item, InsertEntry):
                entry_ids.add(item.id)

    # -- reads -----------------------------------------------------------------------------

    def _open(self) -> Fold:
        if self.closed:
            raise ClosedError()
        return self._state()

    def get_value(self, address: ValueAddress[Any, Scope]) -> ValueRecord | None:
        state = self._open()
        if not isinstance(address, ValueAddress):
            raise usage("invalid_query", "not a value address")
        return state.current_value(address.scope_id, address.namespace, address.key)

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        state = self._open()
        for name in (namespace, prefix):
            if not isinstance(name, str) or "\x00" in name:
                raise usage("invalid_address", "bad namespace or prefix")
        scope_id = scope_id_of(scope)
        found = []
        for sid, tagged_ns, key in state.history:
            if sid == scope_id and tagged_ns == "v" + namespace and key.startswith(prefix):
                record = state.current_value(sid, namespace, key)
                if record is not None:
                    found.append((key, record))
        found.sort(key=lambda row: [ord(ch) for ch in row[0]])
        return tuple(found)

    def read_list(
        self,
        address: ListAddress[Any, Scope],
        *,
        cursor: object = None,
        order: object = "asc",
        limit: object = None,
        stop_at_tag: object = None,
    ) -> tuple[ListElement, ...]:
        state = self._open()
        if not isinstance(address, ListAddress):
            raise usage("invalid_query", "not a list address")
        # LIST-2..LIST-5, checked in this order: cursor, order, limit, stop_at_tag.
        if cursor is not None and (type(cursor) is not int or cursor < 0):
            raise usage("invalid_query", "bad cursor")
        if order not in ("asc", "desc"):
            raise usage("invalid_query", "bad order")
        if limit is not None and (type(limit) is not int or limit <= 0):
            raise usage("invalid_query", "bad limit")
        if stop_at_tag is not None and (type(stop_at_tag) is not str or stop_at_tag == ""):
            raise usage("invalid_query", "bad stop_at_tag")
        page_size = DEFAULT_LIST_LIMIT if limit is None else min(int(limit), MAX_LIST_LIMIT)
        elements = state.surviving(address.scope_id, address.namespace, address.key)
        if order == "desc":
            elements = sorted(elements, key=lambda e: -e.seq)
            if cursor is not None:
                elements = [e for e in elements if e.seq < cursor]
        elif cursor is not None:
            elements = [e for e in elements if e.seq > cursor]
        page: list[ListElement] = []
        for element in elements:
            if len(page) == page_size:
                break
            page.append(element)
            if stop_at_tag is not None and element.tag == stop_at_tag:
                break
        return tuple(page)

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        return next((e for e in self._open().entries if e.id == entry_id), None)

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        return next((u for u in self._open().usage_rows if u.id == usage_id), None)

    def stats(self) -> Stats:
        return stats_of(self._open())

    def snapshot(self) -> Snapshot:
        self._open()
        return self._view.snapshot()

    def close(self) -> None:
        self.closed = True


class ReferenceRepository:
    """The model of a repository: one transaction log per Session id (REPO-*)."""

    def __init__(self) -> None:
        self.logs: dict[str, list[Transaction]] = {}
        self.open_handles: dict[str, ReferenceSession] = {}
        #: Fork destinations and their sources (``parentSessionId``, FORK-11).
        self.parents: dict[str, str] = {}
        #: Sessions imported from legacy files (:meth:`import_legacy`, LEGACY-13).
        self.legacy: dict[str, Any] = {}
        #: The fold of each Session's log, shared by its successive handles (:class:`Folded`).
        self._folds: dict[str, Folded] = {}

    def import_legacy(self, session_id: str, lines: Sequence[bytes], mint: Any) -> None:
        """A Session that exists as the legacy file ``lines`` (LEGACY-11): its log is the
        model's own import; it stays legacy until its first non-empty commit."""
        from scopecheck.models.legacy import LegacySource, import_transactions

        self._check_id(session_id)
        log = import_transactions(lines, session_id, mint)
        self.logs[session_id] = log
        self.legacy[session_id] = LegacySource(tuple(lines), mint, len(log))

    def fork(self, source_id: str, options: object, dest_id: str) -> str:
        """Fork ``source_id`` into ``dest_id`` (the id the backend chose when ``options.id`` is
        ``None``); the destination log comes from :mod:`scopecheck.models.fork_model`."""
        from scopecheck.models.fork import check_fork_options
        from scopecheck.models.fork_model import expected_fork

        checked = check_fork_options(options)
        self._check_id(source_id)
        self._check_id(dest_id)
        if source_id not in self.logs:
            raise usage("not_found", "missing")
        if dest_id in self.logs:
            raise usage("already_exists", "exists")
        log = self.logs[source_id]
        legacy = self.legacy.get(source_id)
        if legacy is not None and len(log) == legacy.imported:
            from scopecheck.models.legacy import legacy_fork_log

            log = legacy_fork_log(legacy, source_id, source_id in self.open_handles)
        self.logs[dest_id] = expected_fork(log, checked)
        self.parents[dest_id] = source_id
        return dest_id

    @staticmethod
    def _check_id(session_id: object) -> str:
        if isinstance(session_id, str) and session_id != "" and "\x00" not in session_id:
            try:
                session_id.encode("utf-8")
                return session_id
            except UnicodeEncodeError:
                pass
        raise usage("invalid_session_id", f"bad session id {session_id!r}")

    def create(self, session_id: str) -> ReferenceSession:
        self._check_id(session_id)
        if session_id in self.logs:
            raise usage("already_exists", "exists")
        self.logs[session_id] = []
        return self._handle(session_id)

    def open(self, session_id: str) -> ReferenceSession:
        self._check_id(session_id)
        if session_id not in self.logs:
            raise usage("not_found", "missing")
        if session_id in self.open_handles:
            raise usage("already_open", "open")
        return self._handle(session_id)

    def _handle(self, session_id: str) -> ReferenceSession:
        log = self.logs[session_id]
        handle = ReferenceSession(
            session_id, log, self._folds.get(session_id), self.parents.get(session_id)
        )
        self._folds[session_id] = handle._view
        self.open_handles[session_id] = handle
        return handle

    def close_session(self, session_id: str) -> None:
        handle = self.open_handles.pop(session_id, None)
        if handle is not None:
            handle.close()

    def list(self) -> list[str]:
        return sorted(self.logs)

    def delete(self, session_id: str) -> None:
        self._check_id(session_id)
        if session_id in self.open_handles:
            raise usage("already_open", "open")
        if session_id not in self.logs:
            raise usage("not_found", "missing")
        del self.logs[session_id]
        self._folds.pop(session_id, None)
        self.parents.pop(session_id, None)
        self.legacy.pop(session_id, None)
