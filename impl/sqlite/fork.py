"""SQLite forks through a temporary on-disk staging database (001 §1.3 SQLite, SQLITE-15).

1. *Boundary.*  The staging connection attaches the source file and begins a read transaction;
   when the source is open in this repository the snapshot is established while holding the
   source handle's commit queue, then the queue is released at once (FORK-12).  Later source
   commits proceed on the writer connection: stage writes target another file.
2. *Stage.*  Branch ancestry is walked by one recursive statement into a staging table (no
   RAM id set); entries are copied set-based (branch scope through that member table);
   current session-scoped scalar rows and surviving list elements are read only in the
   namespace ranges the classifier needs (:func:`~scopecheck.models.fork_policy.scan_spans`,
   SQL-level prefilters; a branch fork reads its lane by point and labels through the member table),
   iterated stepwise through the shared :class:`~scopecheck.models.fork_policy.ForkDriver` and
   written in bounded batches (SQLITE-16).  The source is never written.
3. *Publish.*  The stage is copied into the destination in one ``BEGIN IMMEDIATE``; per-file
   destinations are built under a temp name and published with ``link`` like ``create``.
   The staging database is removed in ``finally`` on success and failure.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import apsw

from scopecheck.impl.sqlite.schema import translate
from scopecheck.models.errors import CorruptError
from scopecheck.models.fork import BranchFork, ForkOptions
from scopecheck.models.fork_policy import (
    BRANCH_TIP,
    BRANCH_VALUE_SPANS,
    ENTRY_LABEL,
    LANE_CONFIG,
    LANE_NAMESPACES,
    LANE_STATE,
    MISSING,
    TREE_SPANS,
    BranchTarget,
    DestElement,
    DestValue,
    ForkDriver,
    NamespaceSpan,
    check_branch_lane,
    scan_spans,
    select_target,
)
from scopecheck.models.records import ListElement

if TYPE_CHECKING:
    from scopecheck.impl.sqlite.storage import SqliteStorage

_STAGE_DDL = """
CREATE TABLE entries(id TEXT PRIMARY KEY, parent_id TEXT, type TEXT, payload TEXT,
                     seq INTEGER, timestamp INTEGER) WITHOUT ROWID;
CREATE TABLE vals(namespace TEXT, key TEXT, seq INTEGER, value TEXT,
                  PRIMARY KEY(namespace, key)) WITHOUT ROWID;
CREATE TABLE elems(namespace TEXT, key TEXT, seq INTEGER, value TEXT, tag TEXT,
                   PRIMARY KEY(namespace, key, seq)) WITHOUT ROWID;
CREATE TABLE tipchain(id TEXT PRIMARY KEY, parent TEXT) WITHOUT ROWID;
CREATE TABLE members(id TEXT PRIMARY KEY, parent TEXT) WITHOUT ROWID;
"""
_BATCH = 512
#: Rows of a source table as the stage reads them.
Rows = Iterator[tuple[Any, ...]]


def span_sql(span: NamespaceSpan) -> tuple[str, tuple[str, ...]]:
    """One namespace span as a ``namespace`` range condition (BINARY collation orders UTF-8
    bytes like code points, so the span is one primary-key range)."""
    if span.low is not None and span.low == span.high:
        return "namespace = ?", (span.low,)
    clauses: list[str] = []
    params: list[str] = []
    if span.low is not None:
        clauses.append("namespace > ?" if span.low_open else "namespace >= ?")
        params.append(span.low)
    if span.high is not None:
        clauses.append("namespace <= ?" if span.high_closed else "namespace < ?")
        params.append(span.high)
    return " AND ".join(clauses) or "1", tuple(params)


def stage_path(directory: str) -> str:
    return os.path.join(directory, f".fork-{uuid.uuid4().hex}.stage.sqlite")


def remove_stage(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


class Stage:
    """The staging database with the source attached as ``src``."""

    def __init__(self, path: str, source_path: str, source_id: str, vfs: str | None = None) -> None:
        self.path = path
        self.source_path = source_path
        self.source_id = source_id
        # The repository's VFS (if any) for the stage and, through ATTACH, the source.
        self.conn = apsw.Connection(path, vfs=vfs) if vfs is not None else apsw.Connection(path)
        for pragma in ("journal_mode=OFF", "synchronous=OFF"):
            self.conn.execute(f"PRAGMA {pragma}").fetchall()
        self.conn.execute(_STAGE_DDL)
        self.conn.execute("ATTACH DATABASE ? AS src", (source_path,))
        self.high_water = 0

    def begin(self, boundary: SqliteStorage | None) -> None:
        """Establish the source snapshot (FORK-12): at the source's commit boundary if open."""
        lock = boundary._queue if boundary is not None else contextlib.nullcontext()
        with lock:
            self.conn.execute("BEGIN")
            row: list[Any] = self.conn.execute(
                "SELECT next_seq FROM src.sessions WHERE session_id = ?", (self.source_id,)
            ).fetchall()
        if not row:
            from scopecheck.models.errors import usage

            raise usage("not_found", f"no session {self.source_id!r}")
        self.high_water = int(row[0][0])

    def value_row(self, namespace: str, key: str) -> tuple[int, bytes] | None:
        rows: list[Any] = self.conn.execute(
            "SELECT seq, value FROM src.scalar_values WHERE session_id = ? AND scope_id = '' "
            "AND namespace = ? AND key = ?",
            (self.source_id, namespace, key),
        ).fetchall()
        return (int(rows[0][0]), rows[0][1].encode()) if rows else None

    def parent_of(self, entry_id: str) -> object:
        rows: list[Any] = self.conn.execute(
            "SELECT parent_id FROM src.entries WHERE session_id = ? AND id = ?",
            (self.source_id, entry_id),
        ).fetchall()
        return rows[0][0] if rows else MISSING

    def _in(self, table: str) -> Callable[[str], bool]:
        def member(entry_id: str) -> bool:
            sql = f"SELECT 1 FROM main.{table} WHERE id = ?"
            return bool(self.conn.execute(sql, (entry_id,)).fetchall())

        return member

    def fill_ancestry(self, table: str, tip: str | None) -> None:
        """``tip`` and its ancestors into ``main.{table}`` in one recursive statement.

        The walk follows ``parent_id`` by primary-key lookups inside SQLite (one B-tree
        descent per ancestor, no Python round trip per entry) and writes straight into the
        staging table, so no id set is held in RAM and exactly the ancestry's rows are read.
        Our schema has no ``branch_entries`` segment index (001 §1.3 walks the TypeScript
        one; REFERENCE §4's tables have none), so the walk is per entry.  A chain that stops
        before a root names a missing entry: corruption, as in
        :func:`scopecheck.models.fork_policy.ancestry`.
        """
        if tip is None:
            return
        try:
            self.conn.execute(
                "WITH RECURSIVE chain(id, parent) AS ("
                "SELECT id, parent_id FROM src.entries WHERE session_id = ?1 AND id = ?2 "
                "UNION ALL "
                "SELECT e.id, e.parent_id FROM chain CROSS JOIN src.entries e "
                "ON e.session_id = ?1 AND e.id = chain.parent) "
                f"INSERT INTO main.{table}(id, parent) SELECT id, parent FROM chain",
                (self.source_id, tip),
            )
        except apsw.ConstraintError as exc:  # an id twice: the parent links form a cycle
            raise CorruptError("corrupt", f"entry parent links from {tip!r} form a cycle") from exc
        roots = self.conn.execute(f"SELECT count(*) FROM main.{table} WHERE parent IS NULL")
        if roots.fetchall()[0][0] != 1:
            raise CorruptError("corrupt", f"branch tip ancestry from {tip!r} names a missing entry")

    def plan(self, options: ForkOptions) -> tuple[Callable[[str], bool], BranchTarget | None]:
        """Branch lane checks and ancestry through staging tables; the entry predicate."""
        from scopecheck.impl.memory import tip_of

        if not isinstance(options, BranchFork):

            def exists(entry_id: str) -> bool:
                return self.parent_of(entry_id) is not MISSING

            return exists, None
        name = options.branch
        tip_row = self.value_row(BRANCH_TIP, name)
        check_branch_lane(
            options,
            tip_row is not None,
            self.value_row(LANE_CONFIG, name) is not None,
            self.value_row(LANE_STATE, name) is not None,
        )
        assert tip_row is not None
        tip = tip_of(tip_row[1], name)
        self.fill_ancestry("tipchain", tip)
        target = select_target(options, tip, self.parent_of, self._in("tipchain"))
        self.fill_ancestry("members", target.destination_tip)
        return self._in("members"), target

    def session_rows(self, table: str, columns: str, spans: tuple[NamespaceSpan, ...]) -> Rows:
        """Current session-scoped rows of ``table`` in the namespace ``spans``.  Each span is
        one primary-key range (session, scope ``''``, namespace range), so rows outside every
        span — and every ephemeral row — are never read (001 §1.3 SQL-level prefilters)."""
        for span in spans:
            where, params = span_sql(span)
            yield from self.conn.cursor().execute(
                f"SELECT {columns} FROM src.{table} "
                f"WHERE session_id = ? AND scope_id = '' AND {where}",
                (self.source_id, *params),
            )

    def value_rows(self, options: ForkOptions) -> Rows:
        """The scalar rows a fork must see.  Tree scope: every namespace but the excluded ones.
        Branch scope: its own lane's three rows by point, labels of member entries through the
        member table, the session name and undeclared reserved namespaces by range — never
        application rows, other lanes or labels of other entries."""
        columns = "namespace, key, seq, value"
        if not isinstance(options, BranchFork):
            yield from self.session_rows("scalar_values", columns, TREE_SPANS)
            return
        for namespace in LANE_NAMESPACES:
            row = self.value_row(namespace, options.branch)
            if row is not None:
                yield namespace, options.branch, row[0], row[1].decode()
        yield from self.conn.cursor().execute(
            "SELECT v.namespace, v.key, v.seq, v.value FROM main.members m "
            "CROSS JOIN src.scalar_values v ON v.session_id = ? AND v.scope_id = '' "
            "AND v.namespace = ? AND v.key = m.id",
            (self.source_id, ENTRY_LABEL),
        )
        yield from self.session_rows("scalar_values", columns, BRANCH_VALUE_SPANS)

    def list_rows(self, options: ForkOptions) -> Rows:
        """Surviving session-scoped list elements a fork must see: tree scope every namespace
        but the excluded ones; branch scope only reserved lists that would fail the fork."""
        spans = scan_spans(isinstance(options, BranchFork), lists=True)
        return self.session_rows("list_values", "namespace, key, seq, value, tag", spans)

    def copy(self, options: ForkOptions, driver_class: type[ForkDriver] = ForkDriver) -> None:
        copied, target = self.plan(options)
        sid = self.source_id
        if isinstance(options, BranchFork):
            self.conn.execute(
                "INSERT INTO main.entries SELECT e.id, e.parent_id, e.type, e.payload, e.seq, "
                "e.timestamp FROM main.members m CROSS JOIN src.entries e "
                "ON e.session_id = ? AND e.id = m.id",
                (sid,),
            )
        else:
            self.conn.execute(
                "INSERT INTO main.entries SELECT id, parent_id, type, payload, seq, timestamp "
                "FROM src.entries WHERE session_id = ?",
                (sid,),
            )
        driver = driver_class(options, copied, target)
        values: list[DestValue] = []
        for namespace, key, seq, text in self.value_rows(options):
            values.extend(driver.value(None, namespace, key, seq, text.encode()))
            if len(values) >= _BATCH:
                self._put_values(values)
        elements: list[DestElement] = []
        for namespace, key, seq, text, tag in self.list_rows(options):
            element = ListElement(seq, text.encode(), tag)
            elements.extend(driver.list_element(None, namespace, key, element))
            if len(elements) >= _BATCH:
                self._put_elements(elements)
        values.extend(driver.finish())
        self._put_values(values)
        self._put_elements(elements)
        self.conn.execute("COMMIT")
        self.conn.execute("DETACH DATABASE src")

    def _put_values(self, rows: list[DestValue]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO main.vals VALUES (?, ?, ?, ?)",
            [(r.namespace, r.key, r.seq, r.value_json.decode()) for r in rows],
        )
        rows.clear()

    def _put_elements(self, rows: list[DestElement]) -> None:
        self.conn.executemany(
            "INSERT INTO main.elems VALUES (?, ?, ?, ?, ?)",
            [
                (r.namespace, r.key, r.element.seq, r.element.value_json.decode(), r.element.tag)
                for r in rows
            ],
        )
        rows.clear()

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            if not self.conn.get_autocommit():
                self.conn.execute("ROLLBACK")
        with contextlib.suppress(apsw.Error):
            self.conn.close()


def publish_stage(
    conn: apsw.Connection,
    stage: str,
    dest_id: str,
    parent_id: str,
    high_water: int,
    insert_session_row: Callable[..., None],
    before: Callable[[], None] = lambda: None,
) -> None:
    """Copy the stage into ``conn`` in one ``BEGIN IMMEDIATE`` (FORK-13)."""
    conn.execute("ATTACH DATABASE ? AS stage", (stage,))
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            before()
            count = conn.execute(
                "SELECT count(*) FROM stage.entries WHERE type = 'message'"
            ).fetchall()[0][0]
            insert_session_row(
                conn, dest_id, next_seq=high_water, message_count=count, parent=parent_id
            )
            conn.execute(
                "INSERT INTO entries SELECT ?, id, parent_id, type, payload, seq, timestamp "
                "FROM stage.entries",
                (dest_id,),
            )
            conn.execute(
                "INSERT INTO scalar_values SELECT ?, '', namespace, key, seq, value "
                "FROM stage.vals",
                (dest_id,),
            )
            conn.execute(
                "INSERT INTO list_values SELECT ?, '', namespace, key, seq, value, tag "
                "FROM stage.elems",
                (dest_id,),
            )
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(apsw.Error):
                conn.execute("ROLLBACK")
            raise
    finally:
        with contextlib.suppress(apsw.Error):
            conn.execute("DETACH DATABASE stage")


def run_stage(
    directory: str,
    source_path: str,
    source_id: str,
    options: ForkOptions,
    boundary: SqliteStorage | None,
    publish: Callable[[str, int], None],
    driver_class: type[ForkDriver] = ForkDriver,
    stage_class: type[Stage] = Stage,
    vfs: str | None = None,
) -> None:
    """Stage, then ``publish(stage_path, high_water)``; the stage is removed in ``finally``."""
    path = stage_path(directory)
    stage: Stage | None = None
    try:
        with translate(source_path):
            stage = stage_class(path, source_path, source_id, vfs)
            stage.begin(boundary)
            stage.copy(options, driver_class)
            high_water = stage.high_water
            stage.close()
            stage = None
            publish(path, high_water)
    finally:
        if stage is not None:
            stage.close()
        remove_stage(path)
