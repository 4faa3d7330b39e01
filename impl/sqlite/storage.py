"""One open SQLite Session (000 §8).

A commit is one ``BEGIN IMMEDIATE`` transaction: it reads ``sessions.next_seq``, checks
references against the tables, asks the sequence policy for the transaction's seqs (write *i*
gets ``first + i``; every write draws one, retirements included, SQLITE-5), applies the writes,
stores the policy's new ``next_seq`` and updates the running message count and usage totals in
the same row, in seq order, so the float sums equal Memory's exactly (SQLITE-13).  A retirement
runs the retirement policy inside that transaction -- by default the two
``DELETE ... WHERE session_id = ? AND scope_id = ?`` statements (SQLITE-3); any failure rolls
back everything, the seq advance included (SQLITE-4).  Both policies are collaborators the
repository passes in (:mod:`scopecheck.impl.sequence`, :mod:`scopecheck.impl.sqlite.retirement`):
they are the two places the contract decides seqs and scope lifetimes.

Payloads are stored as the exact canonical JSON text the write carries and returned as the same
bytes, so snapshots compare byte for byte with Memory (SQLITE-13).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import apsw

from scopecheck.impl.sequence import GLOBAL_SEQUENCE, SequencePolicy
from scopecheck.impl.sqlite.retirement import SCOPED_DELETES, Retirement
from scopecheck.impl.sqlite.schema import COST_COLUMNS, TOKEN_COLUMNS, translate
from scopecheck.impl.stats import MESSAGE_TYPE, add_usage
from scopecheck.impl.validation import (
    CheckedTransaction,
    check_list_query,
    check_name,
    check_references,
    check_shape,
    stop_page,
)
from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.errors import ClosedError, UsageError, usage
from scopecheck.models.protocols import Clock
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Order,
    Snapshot,
    Stats,
    UsageRecord,
    UsageTotals,
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

_INT64 = range(-(2**63), 2**63)
_TOTAL_FIELDS = (
    "input",
    "output",
    "cache_read",
    "cache_write",
    "total_tokens",
    "cost_input",
    "cost_output",
    "cost_cache_read",
    "cost_cache_write",
    "cost_total",
)
_SESSION_COLUMNS = ("next_seq", "message_count", *TOKEN_COLUMNS, *COST_COLUMNS)
_SELECT_SESSION = f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE session_id = ?"
_ADVANCE_SEQ = "UPDATE sessions SET next_seq = ?, message_count = ? WHERE session_id = ?"
_ADVANCE_ALL = (
    f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in _SESSION_COLUMNS)} WHERE session_id = ?"
)


def scope_column(scope_id: str | None) -> str:
    """``scope_id`` column value: ``''`` is the session scope (ephemeral IDs are non-empty)."""
    return "" if scope_id is None else scope_id


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _blob(text: str) -> bytes:
    return text.encode("utf-8")


def _store_int(value: int) -> int | str:
    return value if value in _INT64 else str(value)


def _load_int(value: Any) -> int:
    return int(value)


def decode_stats(row: Sequence[Any]) -> Stats:
    """Stats from ``(message_count, *token totals, *cost totals)`` of a sessions row."""
    tokens = [_load_int(v) for v in row[1:6]]
    costs = [float(v) for v in row[6:11]]
    return Stats(row[0], UsageTotals(*tokens, *costs))


class SqliteStorage:
    """An open Session over its own APSW connection (per-file or container layout)."""

    def __init__(
        self,
        session_id: str,
        conn: apsw.Connection,
        path: str,
        clock: Clock,
        on_close: Callable[[SqliteStorage], None] | None = None,
        *,
        sequence: SequencePolicy = GLOBAL_SEQUENCE,
        retirement: Retirement = SCOPED_DELETES,
    ) -> None:
        self._session_id = session_id
        self._conn = conn
        #: One cursor for the write path (no result iteration there): cheaper than a fresh
        #: cursor per statement.
        self._cur = conn.cursor()
        self._path = path
        self._clock = clock
        #: Serialises commits, reads and close on the one connection (re-entrant, so a read
        #: through this handle from inside a commit's collaborators cannot deadlock).
        self._queue = threading.RLock()
        self._sealed = False
        self._closed = False
        self._on_close = on_close
        self._sequence = sequence
        self._retirement = retirement

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def parent_session_id(self) -> str | None:
        """The fork source recorded in the sessions row (FORK-11), else ``None``."""
        with self._queue, translate(self._path):
            rows: list[Any] = self._conn.execute(
                "SELECT parent_session_id FROM sessions WHERE session_id = ?",
                (self._session_id,),
            ).fetchall()
        return rows[0][0] if rows else None

    @property
    def connection(self) -> apsw.Connection:
        """The underlying APSW connection (tests use it for EXPLAIN QUERY PLAN)."""
        return self._conn

    # -- writes ----------------------------------------------------------------------------

    def commit(self, writes: Sequence[Write[Any]]) -> tuple[Committed, ...]:
        if self._sealed:
            raise ClosedError()
        checked = check_shape(writes)
        with self._queue:
            if self._closed:  # pragma: no cover - sealed is set before closed
                raise ClosedError()
            with translate(self._path):
                return self._commit_locked(checked)

    def _commit_locked(self, checked: CheckedTransaction) -> tuple[Committed, ...]:
        if not checked.writes:  # an empty commit consumes no seq and touches nothing (SEQ-4)
            return ()
        cur = self._cur
        cur.execute("BEGIN IMMEDIATE")
        try:
            committed, next_seq = self._commit_in_transaction(checked)
        except BaseException:
            self._rollback()
            raise
        try:
            cur.execute("COMMIT")
        except apsw.Error:
            self._rollback()
            if self._committed_anyway(next_seq):
                return committed
            raise
        return committed

    def _committed_anyway(self, expected_next_seq: int) -> bool:
        """Whether a COMMIT that raised had in fact committed (CRASH-SQL-4).

        An I/O error in the automatic checkpoint that follows a durable commit surfaces from
        the COMMIT statement through APSW, although the transaction is in the WAL and visible.
        ``next_seq`` is only ever advanced by a commit of this Session, so reading it tells the
        two apart; if even that read fails, the commit is reported as failed (never acked).
        """
        try:
            row = self._conn.execute(
                "SELECT next_seq FROM sessions WHERE session_id = ?", (self._session_id,)
            ).fetchone()
        except apsw.Error:
            return False
        return row is not None and row[0] == expected_next_seq

    def _rollback(self) -> None:
        with contextlib.suppress(apsw.Error):
            if not self._conn.get_autocommit():
                self._conn.execute("ROLLBACK")

    def _commit_in_transaction(
        self, checked: CheckedTransaction
    ) -> tuple[tuple[Committed, ...], int]:
        """Apply ``checked`` inside the open transaction: its committed writes and the
        ``next_seq`` stored for the Session."""
        writes = checked.writes
        row = self._session_row()
        message_count = row[1]
        check_references(writes, self._id_exists, self._entry_exists)
        allocation = self._sequence.allocate(self._session_id, row[0], checked.scope_id, writes)
        timestamp = self._clock()
        committed = tuple(
            Committed(allocation.first + index, timestamp, write)
            for index, write in enumerate(writes)
        )
        totals: UsageTotals | None = None
        for item in committed:
            write = item.write
            self._apply(item)
            if isinstance(write, InsertEntry) and write.type == MESSAGE_TYPE:
                message_count += 1
            elif isinstance(write, InsertUsage):
                if totals is None:
                    totals = decode_stats(row[1:]).usage
                totals = add_usage(totals, write.usage)  # in seq order (SQLITE-13)
        self._advance(allocation.next_seq, message_count, totals)
        return committed, allocation.next_seq

    def _session_row(self) -> tuple[Any, ...]:
        # fetchall, not fetchone: a statement left unfinished would pin a read snapshot
        rows = self._cur.execute(_SELECT_SESSION, (self._session_id,)).fetchall()
        row = rows[0] if rows else None
        if row is None:
            raise UsageError(
                "not_found",
                f"session row {self._session_id!r} vanished from {self._path}; it was deleted "
                "by another process",
                path=self._path,
            )
        return tuple(row)

    def _advance(self, next_seq: int, message_count: int, totals: UsageTotals | None) -> None:
        """Store the new ``next_seq``, message count and (if changed) usage totals."""
        if totals is None:
            self._cur.execute(_ADVANCE_SEQ, (next_seq, message_count, self._session_id))
            return
        values = [getattr(totals, f) for f in _TOTAL_FIELDS]
        stored = [_store_int(v) for v in values[:5]] + [float(v) for v in values[5:]]
        self._cur.execute(_ADVANCE_ALL, (next_seq, message_count, *stored, self._session_id))

    def _id_exists(self, ident: str) -> bool:
        return self._cur.execute(
            "SELECT EXISTS(SELECT 1 FROM entries WHERE session_id = ?1 AND id = ?2) "
            "OR EXISTS(SELECT 1 FROM usage_ledger WHERE session_id = ?1 AND id = ?2)",
            (self._session_id, ident),
        ).fetchall() == [(1,)]

    def _entry_exists(self, ident: str) -> bool:
        return self._cur.execute(
            "SELECT EXISTS(SELECT 1 FROM entries WHERE session_id = ? AND id = ?)",
            (self._session_id, ident),
        ).fetchall() == [(1,)]

    def _apply(self, item: Committed) -> None:
        write, seq, sid = item.write, item.seq, self._session_id
        execute = self._cur.execute
        if isinstance(write, SetValue):
            a = write.address
            execute(
                "INSERT OR REPLACE INTO scalar_values"
                "(session_id, scope_id, namespace, key, seq, value) VALUES (?, ?, ?, ?, ?, ?)",
                (sid, scope_column(a.scope_id), a.namespace, a.key, seq, _text(write.value_json)),
            )
        elif isinstance(write, DeleteValue):
            a = write.address
            execute(
                "DELETE FROM scalar_values WHERE session_id = ? AND scope_id = ? "
                "AND namespace = ? AND key = ?",
                (sid, scope_column(a.scope_id), a.namespace, a.key),
            )
        elif isinstance(write, AppendList):
            la = write.address
            execute(
                "INSERT INTO list_values"
                "(session_id, scope_id, namespace, key, seq, value, tag) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    scope_column(la.scope_id),
                    la.namespace,
                    la.key,
                    seq,
                    _text(write.element_json),
                    write.tag,
                ),
            )
        elif isinstance(write, DeleteList):
            la = write.address
            execute(
                "DELETE FROM list_values WHERE session_id = ? AND scope_id = ? "
                "AND namespace = ? AND key = ?",
                (sid, scope_column(la.scope_id), la.namespace, la.key),
            )
        elif isinstance(write, InsertEntry):
            execute(
                "INSERT INTO entries(session_id, id, parent_id, type, payload, seq, timestamp) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    write.id,
                    write.parent_id,
                    write.type,
                    _text(write.payload_json),
                    seq,
                    item.timestamp,
                ),
            )
        elif isinstance(write, InsertUsage):
            details = None if write.details_json is None else _text(write.details_json)
            execute(
                "INSERT INTO usage_ledger"
                "(session_id, id, usage, entry_id, adjustment, details, seq) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    write.id,
                    _text(write.usage_json),
                    write.entry_id,
                    int(write.adjustment),
                    details,
                    seq,
                ),
            )
        elif isinstance(write, RetireScope):
            # inside this transaction, in seq order with its siblings (SQLITE-3)
            self._retirement.retire(self._conn, sid, write.retired.id)
        else:  # pragma: no cover - check_shape admits only the write types above
            raise AssertionError(write)

    # -- reads -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._sealed:
            raise ClosedError()

    def _check_live(self) -> None:
        """Under the lock: the connection was not closed while this read waited."""
        if self._closed:
            raise ClosedError()

    #: Point read of one scalar: exact session, scope, namespace and key (SQLITE-2).
    POINT_READ_SQL = (
        "SELECT seq, value FROM scalar_values "
        "WHERE session_id = ? AND scope_id = ? AND namespace = ? AND key = ?"
    )

    def get_value(self, address: ValueAddress[Any, Scope]) -> ValueRecord | None:
        self._check_open()
        if not isinstance(address, ValueAddress):
            raise usage("invalid_query", f"not a value address: {address!r}")
        with self._queue, translate(self._path):
            self._check_live()
            row = self._conn.execute(
                self.POINT_READ_SQL,
                (
                    self._session_id,
                    scope_column(address.scope_id),
                    address.namespace,
                    address.key,
                ),
            ).fetchone()
        return None if row is None else ValueRecord(row[0], _blob(row[1]))

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        """Keys in code-point order: BINARY collation compares UTF-8 bytes, which sort the same."""
        self._check_open()
        check_name("namespace", namespace)
        check_name("prefix", prefix)
        scope_id = scope_column(scope_id_of(SESSION if scope is None else scope))
        result: list[tuple[str, ValueRecord]] = []
        with self._queue, translate(self._path):
            self._check_live()
            for key, seq, text in self._conn.execute(
                "SELECT key, seq, value FROM scalar_values WHERE session_id = ? AND scope_id = ? "
                "AND namespace = ? AND key >= ? ORDER BY key",
                (self._session_id, scope_id, namespace, prefix),
            ):
                if not key.startswith(prefix):
                    break
                result.append((key, ValueRecord(seq, _blob(text))))
        return tuple(result)

    @staticmethod
    def list_page_sql(order: Order, with_cursor: bool) -> str:
        """The list page query: a primary-key range scan, no temp sort (SQLITE-6)."""
        op, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
        cursor = f" AND seq {op} ?" if with_cursor else ""
        return (
            "SELECT seq, value, tag FROM list_values WHERE session_id = ? AND scope_id = ? "
            f"AND namespace = ? AND key = ?{cursor} ORDER BY seq {direction} LIMIT ?"
        )

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
        params: list[Any] = [
            self._session_id,
            scope_column(address.scope_id),
            address.namespace,
            address.key,
        ]
        if query.cursor is not None:
            params.append(query.cursor)
        params.append(query.limit)
        sql = self.list_page_sql(query.order, query.cursor is not None)
        with self._queue, translate(self._path):
            self._check_live()
            page = [
                ListElement(seq, _blob(text), tag)
                for seq, text, tag in self._conn.execute(sql, params)
            ]
        return tuple(stop_page(page, query.stop_at_tag))

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        self._check_open()
        with self._queue, translate(self._path):
            self._check_live()
            row = self._conn.execute(
                "SELECT id, parent_id, type, payload, seq, timestamp FROM entries "
                "WHERE session_id = ? AND id = ?",
                (self._session_id, entry_id),
            ).fetchone()
        return None if row is None else _entry(row)

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        self._check_open()
        with self._queue, translate(self._path):
            self._check_live()
            row = self._conn.execute(
                "SELECT id, usage, entry_id, adjustment, details, seq "
                "FROM usage_ledger WHERE session_id = ? AND id = ?",
                (self._session_id, usage_id),
            ).fetchone()
        return None if row is None else _usage(row)

    def stats(self) -> Stats:
        self._check_open()
        with self._queue, translate(self._path):
            self._check_live()
            return decode_stats(self._session_row()[1:])

    def snapshot(self) -> Snapshot:
        """The complete logical state, read in one transaction so it is consistent."""
        self._check_open()
        with self._queue, translate(self._path):
            self._check_live()
            conn, sid = self._conn, (self._session_id,)
            conn.execute("BEGIN")
            try:
                stats = decode_stats(self._session_row()[1:])
                entries = tuple(
                    _entry(row)
                    for row in conn.execute(
                        "SELECT id, parent_id, type, payload, seq, timestamp FROM entries "
                        "WHERE session_id = ? ORDER BY seq",
                        sid,
                    )
                )
                ledger = tuple(
                    _usage(row)
                    for row in conn.execute(
                        "SELECT id, usage, entry_id, adjustment, details, seq "
                        "FROM usage_ledger WHERE session_id = ? ORDER BY seq",
                        sid,
                    )
                )
                values = [
                    (_value_key(scope_id, ns, key), ValueRecord(seq, _blob(text)))
                    for scope_id, ns, key, seq, text in conn.execute(
                        "SELECT scope_id, namespace, key, seq, value FROM scalar_values "
                        "WHERE session_id = ?",
                        sid,
                    )
                ]
                lists: dict[ValueKey, list[ListElement]] = {}
                for scope_id, ns, key, seq, text, tag in conn.execute(
                    "SELECT scope_id, namespace, key, seq, value, tag FROM list_values "
                    "WHERE session_id = ? ORDER BY scope_id, namespace, key, seq",
                    sid,
                ):
                    lists.setdefault(_value_key(scope_id, ns, key), []).append(
                        ListElement(seq, _blob(text), tag)
                    )
            finally:
                conn.execute("COMMIT")
        return Snapshot(
            entries=entries,
            usage=ledger,
            values=tuple(sorted(values, key=lambda kv: Snapshot.sort_key(kv[0]))),
            lists=tuple(
                sorted(
                    ((k, tuple(v)) for k, v in lists.items()),
                    key=lambda kv: Snapshot.sort_key(kv[0]),
                )
            ),
            stats=stats,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Seal at once, drain admitted commits, close the connection; idempotent (LIFE-1)."""
        self._sealed = True
        with self._queue:
            if self._closed:
                return
            self._closed = True
            try:
                with translate(self._path):
                    self._conn.close()
            finally:
                if self._on_close is not None:
                    self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._sealed


def _value_key(scope_id: str, namespace: str, key: str) -> ValueKey:
    return (scope_id or None, namespace, key)


def _entry(row: Sequence[Any]) -> EntryRecord:
    ident, parent, kind, payload, seq, timestamp = row
    return EntryRecord(ident, parent, kind, _blob(payload), seq, timestamp)


def _usage(row: Sequence[Any]) -> UsageRecord:
    ident, usage_text, entry_id, adjustment, details, seq = row
    return UsageRecord(
        ident,
        _blob(usage_text),
        entry_id,
        bool(adjustment),
        None if details is None else _blob(details),
        seq,
    )
