"""JSONL forks: a fixed read-only prefix of the source, two passes, a disk-backed index
(001 §1.3 JSONL, JSONL-20).

* *Capture.*  The caller records the source main file's length (at the source's commit-queue
  boundary when it is open here, FORK-12); only that prefix is ever read, through
  :meth:`FileSystem.iter_prefix_lines`.  The source is never written: a torn final line inside
  the prefix is discarded in memory, not repaired (FORK-14).  Sidecars are read only for their
  highest seq: ephemeral state is never copied (FORK-10), but its seqs count in the high-water.
* *Pass 1* parses each line once, checks it exactly as open does
  (:func:`~scopecheck.impl.jsonl.codec.index_transaction`), and appends its value and list writes to
  logs in a temporary APSW index on the real disk (batched ``executemany``, one transaction;
  entry ``id → parentId`` too for branch scope).  Set-based SQL then derives the current
  scalar per address, the surviving list elements, and the *dirty* lines: those holding
  anything the destination does not keep unchanged (usage rows, deletes, retirements,
  superseded sets, dead elements, or a namespace the driver does not copy verbatim,
  :meth:`ForkDriver.copies_verbatim`).  A tree fork with current labels makes one more pass to
  index entry ids (labels follow their entries).
* *Pass 2* streams the prefix again.  A tree fork copies every clean line's bytes as they are
  (a whole source transaction, no decoding).  A dirty line is decoded and each record emitted
  when the index proves it current and the shared driver selects it, one record per line.
  The transformed built-ins (rewritten tip, idle lane states) are computed up front from the
  index's lane rows (bounded by the lane count) and written *in place* at their source seqs,
  so the destination stays in seq order.  Lane rows always sit on dirty lines, so the driver
  sees every one of them.
* *Publish.*  Header (``parentSessionId``, ``nextSeq`` = source high-water) plus the rows go to
  ``<dest>.tmp`` and are renamed over ``<dest>`` atomically; the temp file and the index are
  removed on failure, the index also on success.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import apsw
import orjson

from scopecheck.impl.fs import FileSystem
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import (
    OP_APPEND,
    OP_CLEAR,
    OP_DELETE,
    OP_MESSAGE,
    OP_SET,
    BadRecord,
    decode_header,
    decode_transaction,
    index_transaction,
)
from scopecheck.impl.jsonl.scratch import scratch_index
from scopecheck.models.errors import CorruptError
from scopecheck.models.fork import BranchFork, ForkOptions
from scopecheck.models.fork_policy import (
    BRANCH_TIP,
    ENTRY_LABEL,
    LANE_NAMESPACES,
    MISSING,
    BranchTarget,
    DestValue,
    Disposition,
    ForkDriver,
    ancestry,
    check_branch_lane,
    classify,
    classify_list,
    select_target,
    unknown_namespace,
)
from scopecheck.models.payload import canonical_bytes
from scopecheck.models.records import ListElement

_INDEX_DDL = """
CREATE TABLE vlog(ns TEXT, key TEXT, seq INTEGER, line INTEGER, is_set INTEGER, value TEXT);
CREATE TABLE llog(ns TEXT, key TEXT, seq INTEGER, line INTEGER, is_append INTEGER);
CREATE TABLE dirty(line INTEGER);
CREATE TABLE cur(namespace TEXT, key TEXT, seq INTEGER, value TEXT,
                 PRIMARY KEY(namespace, key)) WITHOUT ROWID;
CREATE TABLE cleared(namespace TEXT, key TEXT, seq INTEGER,
                     PRIMARY KEY(namespace, key)) WITHOUT ROWID;
CREATE TABLE elems(namespace TEXT, key TEXT, seq INTEGER,
                   PRIMARY KEY(namespace, key, seq)) WITHOUT ROWID;
CREATE TABLE entries(id TEXT PRIMARY KEY, parent TEXT) WITHOUT ROWID;
CREATE TABLE tipchain(id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE members(id TEXT PRIMARY KEY) WITHOUT ROWID;
"""
# The latest write per address wins (SQLite gives the bare columns of the max(seq) row).
_SETTLE_SQL = """
INSERT INTO cur SELECT ns, key, seq, value FROM
  (SELECT ns, key, max(seq) AS seq, is_set, value FROM vlog GROUP BY ns, key) WHERE is_set = 1;
INSERT INTO cleared SELECT ns, key, max(seq) FROM llog WHERE is_append = 0 GROUP BY ns, key;
INSERT INTO elems SELECT a.ns, a.key, a.seq FROM llog AS a
  LEFT JOIN cleared AS c ON c.namespace = a.ns AND c.key = a.key
  WHERE a.is_append = 1 AND (c.seq IS NULL OR a.seq > c.seq);
INSERT INTO dirty SELECT v.line FROM vlog AS v
  LEFT JOIN cur AS c ON c.namespace = v.ns AND c.key = v.key
  WHERE v.is_set = 1 AND (c.seq IS NULL OR c.seq != v.seq);
INSERT INTO dirty SELECT a.line FROM llog AS a
  JOIN cleared AS c ON c.namespace = a.ns AND c.key = a.key
  WHERE a.is_append = 1 AND a.seq < c.seq;
"""
#: Rows (or namespace verdicts) held in memory before they go to the index.
_BATCH = 4096
_FLUSH = 1 << 20
Ops = list[tuple[Any, ...]]


def _corrupt(path: str, line: int, what: str) -> CorruptError:
    return CorruptError("corrupt", f"{path}:{line}: {what}", file=path, line=line)


class SourcePrefix(Protocol):
    """What the two fork passes read: a format-4 :class:`Capture` or a closed legacy file's
    :class:`~scopecheck.impl.jsonl.legacy_fork.LegacyCapture` (LEGACY-13)."""

    main: str
    size: int
    header: dict[str, Any]

    def lines(self, source_id: str) -> Iterator[tuple[int, bytes]]: ...

    def transactions(
        self, source_id: str, lean: bool = False
    ) -> Iterator[tuple[int, bytes, Any, int, int, Ops]]: ...

    def sidecar_high(self) -> int: ...

    def close(self) -> None: ...


class Capture:
    """The fixed prefix of a source: its main path, captured length and sidecar lengths."""

    def __init__(self, fs: FileSystem, main: str) -> None:
        self.fs = fs
        self.main = main
        self.size = fs.file_size(main)
        self.header: dict[str, Any] = {}
        self.sidecars: dict[str, int] = {}
        directory = session_paths.scopes_dir(main)
        if fs.is_dir(directory):
            for entry in fs.list_dir(directory):
                if entry.is_file and session_paths.decode_sidecar_name(entry.name) is not None:
                    path = f"{directory}/{entry.name}"
                    self.sidecars[path] = fs.file_size(path)

    def lines(self, source_id: str) -> Iterator[tuple[int, bytes]]:
        """``(line number, line)`` of every complete line after the header, which is decoded
        into :attr:`header`; a torn final line is discarded in memory (FORK-14)."""
        number = 0
        for raw, complete in self.fs.iter_prefix_lines(self.main, self.size):
            number += 1
            if not complete:
                if number == 1:
                    raise _corrupt(self.main, 1, "missing header")
                return
            if number == 1:
                try:
                    self.header = decode_header(raw, source_id)
                except BadRecord as exc:
                    raise _corrupt(self.main, 1, str(exc)) from None
                continue
            yield number, raw

    def transactions(
        self, source_id: str, lean: bool = False
    ) -> Iterator[tuple[int, bytes, Any, int, int, Ops]]:
        """Every transaction, checked as open checks it (:func:`checked_transactions`).
        ``lean``: operations for the records other than entries only (see
        :func:`~scopecheck.impl.jsonl.codec.index_transaction`)."""
        return checked_transactions(self.main, self.lines(source_id), lean)

    def close(self) -> None:
        """Nothing to release: a format-4 prefix is read straight from the source file."""

    def sidecar_high(self) -> int:
        """The highest complete sidecar seq (the high-water counts ephemeral commits)."""
        high = 0
        for path, size in self.sidecars.items():
            for raw, complete in self.fs.iter_prefix_lines(path, size):
                if not complete:
                    break
                with contextlib.suppress(orjson.JSONDecodeError, BadRecord):
                    for rec in decode_transaction(raw):
                        seq = rec.get("seq")
                        if type(seq) is int:
                            high = max(high, seq)
        return high


def checked_transactions(
    main: str, lines: Iterator[tuple[int, bytes]], lean: bool = False
) -> Iterator[tuple[int, bytes, Any, int, int, Ops]]:
    """``(line number, line, parsed line, first seq, last seq, operations)`` of every line,
    each checked exactly as open checks it (JSONL-6): a malformed complete line, or seqs that
    do not grow, are corruption of ``main`` at that line."""
    previous = 0
    loads = orjson.loads
    for number, raw in lines:
        try:
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError as exc:
                raise BadRecord(f"not JSON: {exc}") from None
            first, last, ops = index_transaction(obj, raw, None, lean=lean)
            if first <= previous:
                raise BadRecord(
                    f"seq {first} does not follow the previous transaction's seq {previous}"
                )
        except BadRecord as exc:
            raise _corrupt(main, number, str(exc)) from None
        previous = last
        yield number, raw, obj, first, last, ops


class Index:
    """The temporary disk-backed index of pass 1
    (:func:`~scopecheck.impl.jsonl.scratch.scratch_index`).

    Pass 1 only appends rows (batched ``executemany`` into tables without indexes, one
    transaction); :meth:`settle` then derives the current scalars, the surviving list elements
    and the lines that cannot be copied as they are with a few SQL statements.
    """

    def __init__(self, track_entries: bool, verbatim: Callable[[str, bool], bool] | None) -> None:
        self.conn = scratch_index(_INDEX_DDL)
        #: Branch scope walks ancestry: it needs ``entries`` from pass 1.  Tree scope needs it
        #: only for labels (:meth:`index_entries`).
        self.track_entries = track_entries
        #: ``verbatim(namespace, is_list)``: the driver's :meth:`ForkDriver.copies_verbatim`,
        #: or ``None`` when no line is copied as it is (branch scope).
        self._verbatim = verbatim
        self._verdicts: dict[tuple[str, bool], bool] = {}
        self._entries: list[tuple[str, str | None]] = []
        self._values: list[tuple[str, str, int, int, int, str | None]] = []
        self._elements: list[tuple[str, str, int, int, int]] = []
        self._dirty: list[tuple[int]] = []

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self.conn.close()

    def _copies_verbatim(self, namespace: str, is_list: bool) -> bool:
        verdicts = self._verdicts
        verdict = verdicts.get((namespace, is_list))
        if verdict is None:
            assert self._verbatim is not None
            verdict = self._verbatim(namespace, is_list)
            if len(verdicts) >= _BATCH:  # bounded memory: namespaces are not
                verdicts.clear()
            verdicts[namespace, is_list] = verdict
        return verdict

    def fold(self, number: int, obj: Any, first: int, ops: Ops, lean: bool = False) -> None:
        """Log one transaction's value and list writes (and entry links when tracked); note
        the line as *dirty* unless every record in it may be copied unchanged.  ``lean``
        operations (no entries, each ending with its seq) come from ``lean`` indexing."""
        clean = self._verbatim is not None
        track_entries = self.track_entries
        values, elements = self._values, self._elements
        verbatim = self._copies_verbatim
        seq = first - 1
        for op in ops:
            code = op[0]
            seq = op[-1] if lean else seq + 1
            if code <= OP_MESSAGE:  # OP_ENTRY or OP_MESSAGE
                if track_entries:
                    rec = obj if op[3] < 0 else obj[op[3]]
                    self._entries.append((op[1], rec["parentId"]))
            elif code == OP_SET:
                _, ns, key = op[1]
                value = None
                if ns == BRANCH_TIP:
                    rec = obj if op[3] < 0 else obj[op[3]]
                    value = canonical_bytes(rec["value"]).decode()
                values.append((ns, key, seq, number, 1, value))
                if clean and not verbatim(ns, False):
                    clean = False
            elif code == OP_APPEND:
                _, ns, key = op[1]
                elements.append((ns, key, seq, number, 1))
                if clean and not verbatim(ns, True):
                    clean = False
            elif code == OP_DELETE:
                _, ns, key = op[1]
                values.append((ns, key, seq, number, 0, None))
                clean = False
            elif code == OP_CLEAR:
                _, ns, key = op[1]
                elements.append((ns, key, seq, number, 0))
                clean = False
            else:  # usage rows and retirements are never copied
                clean = False
        if not clean:
            self._dirty.append((number,))
        if len(self._entries) + len(self._values) + len(self._elements) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Write the batched rows (bounded: at most one batch in memory)."""
        ex = self.conn.executemany
        if self._entries:
            ex("INSERT OR IGNORE INTO entries VALUES (?, ?)", self._entries)
            self._entries.clear()
        if self._values:
            ex("INSERT INTO vlog VALUES (?, ?, ?, ?, ?, ?)", self._values)
            self._values.clear()
        if self._elements:
            ex("INSERT INTO llog VALUES (?, ?, ?, ?, ?)", self._elements)
            self._elements.clear()
        if self._dirty:
            ex("INSERT INTO dirty VALUES (?)", self._dirty)
            self._dirty.clear()

    def settle(self) -> None:
        """After pass 1: the current scalar per address (the latest write, if a ``set``), the
        surviving list elements (appended after the list's latest delete), and every line
        holding a superseded set or a dead element as dirty."""
        self.flush()
        self.conn.execute(_SETTLE_SQL)

    def index_entries(self, source: Iterator[tuple[int, bytes, Any, int, int, Ops]]) -> None:
        """Fill ``entries`` from another pass over the prefix (tree scope with labels)."""
        self.track_entries = True
        for number, _, obj, first, _, ops in source:
            self.fold(number, obj, first, [op for op in ops if op[0] <= OP_MESSAGE])
        self.flush()

    def dirty_lines(self) -> Iterator[int]:
        """Dirty line numbers in ascending order, streamed from the index."""
        cursor = self.conn.cursor()
        for (number,) in cursor.execute("SELECT DISTINCT line FROM dirty ORDER BY line"):
            yield int(number)

    def has_current(self, namespace: str) -> bool:
        rows = self.conn.execute(
            "SELECT 1 FROM cur WHERE namespace = ? LIMIT 1", (namespace,)
        ).fetchall()
        return bool(rows)

    def current_seq(self, ns: str, key: str) -> int | None:
        rows: list[Any] = self.conn.execute(
            "SELECT seq FROM cur WHERE namespace = ? AND key = ?", (ns, key)
        ).fetchall()
        return int(rows[0][0]) if rows else None

    def survives(self, ns: str, key: str, seq: int) -> bool:
        rows = self.conn.execute(
            "SELECT 1 FROM elems WHERE namespace = ? AND key = ? AND seq = ?", (ns, key, seq)
        ).fetchall()
        return bool(rows)

    def parent_of(self, entry_id: str) -> object:
        rows: list[Any] = self.conn.execute(
            "SELECT parent FROM entries WHERE id = ?", (entry_id,)
        ).fetchall()
        return rows[0][0] if rows else MISSING

    def member(self, table: str) -> Callable[[str], bool]:
        def check(entry_id: str) -> bool:
            sql = f"SELECT 1 FROM {table} WHERE id = ?"
            return bool(self.conn.execute(sql, (entry_id,)).fetchall())

        return check

    def fill(self, table: str, ids: Iterator[str]) -> None:
        for ident in ids:
            self.conn.execute(f"INSERT OR IGNORE INTO {table} VALUES (?)", (ident,))

    def check_namespaces(self) -> None:
        """Fail on current state in an undeclared reserved namespace (one row per namespace)."""
        for table, classifier, kind in (
            ("cur", classify, "scalar"),
            ("elems", classify_list, "list"),
        ):
            for (namespace,) in self.conn.execute(f"SELECT DISTINCT namespace FROM {table}"):
                if classifier(namespace) is Disposition.UNKNOWN_RESERVED:
                    raise unknown_namespace(namespace, kind)

    def lane_rows(self) -> list[tuple[str, str, int, bytes]]:
        """Current lane rows (bounded by the number of lanes)."""
        marks = ", ".join("?" for _ in LANE_NAMESPACES)
        rows: list[Any] = self.conn.execute(
            f"SELECT namespace, key, seq, value FROM cur WHERE namespace IN ({marks}) ORDER BY seq",
            LANE_NAMESPACES,
        ).fetchall()
        return [(ns, k, int(s), (v or "null").encode()) for ns, k, s, v in rows]


def _tip(index: Index, name: str) -> str | None:
    from scopecheck.models.payload import decode_json

    rows: list[Any] = index.conn.execute(
        "SELECT value FROM cur WHERE namespace = ? AND key = ?", (BRANCH_TIP, name)
    ).fetchall()
    tip = decode_json(rows[0][0].encode())
    if tip is not None and not isinstance(tip, str):
        raise CorruptError("corrupt", f"branch {name!r} tip is not an entry id or null")
    return tip


def _value_line(row: DestValue) -> bytes:
    return b'{"kind":"value","op":"set","seq":%d,"namespace":%s,"key":%s,"value":%s}' % (
        row.seq,
        orjson.dumps(row.namespace),
        orjson.dumps(row.key),
        row.value_json,
    )


def fork_jsonl(
    fs: FileSystem,
    capture: SourcePrefix,
    source_id: str,
    options: ForkOptions,
    dest_main: str,
    header: Callable[[int], bytes],
    driver_class: type[ForkDriver] = ForkDriver,
) -> None:
    """Two passes over the captured prefix, then an atomic publish of ``dest_main``.

    ``header(high_water)`` builds the destination header line.  A tree fork copies every line
    the index proves unchanged (only entries, current scalars and surviving elements the driver
    copies verbatim) as its bytes, one transaction per line as in the source; every other
    line is decoded again and its kept records written one per line.
    """
    tree = not isinstance(options, BranchFork)
    # The driver's verdicts need no lanes or target: only the scope.
    verbatim = driver_class(options, lambda _: True, None).copies_verbatim if tree else None
    index = Index(track_entries=not tree, verbatim=verbatim)
    temp = session_paths.temp_path(dest_main)
    published = False
    try:
        high = 0
        # Tree scope needs no entry ids in pass 1 (lean operations).
        for number, _, obj, first, last, ops in capture.transactions(source_id, lean=tree):
            index.fold(number, obj, first, ops, lean=tree)
            high = last
        index.settle()
        hdr = capture.header
        high_water = max(hdr.get("nextSeq", 1), high + 1, capture.sidecar_high() + 1)
        # Plan: lane checks and ancestry through the index.
        target: BranchTarget | None = None
        if isinstance(options, BranchFork):
            name = options.branch
            check_branch_lane(
                options,
                index.current_seq(BRANCH_TIP, name) is not None,
                index.current_seq("pi.lane.config", name) is not None,
                index.current_seq("pi.lane.state", name) is not None,
            )
            tip = _tip(index, name)
            index.fill("tipchain", ancestry(tip, index.parent_of))
            target = select_target(options, tip, index.parent_of, index.member("tipchain"))
            index.fill("members", ancestry(target.destination_tip, index.parent_of))
            copied = index.member("members")
        else:
            if index.has_current(ENTRY_LABEL):  # labels follow entries: index them too
                index.index_entries(capture.transactions(source_id))

            def copied(entry_id: str) -> bool:
                return index.parent_of(entry_id) is not MISSING

        # Same precedence as a streaming driver: undeclared reserved state fails before the
        # lane coherence checks of finish() (FORK-8).
        index.check_namespaces()
        # The transformed built-ins, from the lane rows alone (bounded), written in place.
        lanes = driver_class(options, copied, target)
        for ns, key, seq, value in index.lane_rows():
            lanes.value(None, ns, key, seq, value)
        in_place = {row.seq: row for row in lanes.finish()}
        driver = driver_class(options, copied, target)
        fs.write_file(temp, header(high_water) + b"\n")
        handle = fs.open_append(temp)
        try:
            buffer = bytearray()
            dirty = index.dirty_lines() if tree else None
            next_dirty = next(dirty, None) if dirty is not None else None
            for number, raw in capture.lines(source_id):
                if dirty is not None:
                    if next_dirty is None or number < next_dirty:
                        buffer += raw
                        buffer += b"\n"
                        if len(buffer) >= _FLUSH:
                            fs.append(handle, bytes(buffer))
                            buffer.clear()
                        continue
                    next_dirty = next(dirty, None)
                for rec in decode_transaction(raw):
                    _copy_record(rec, tree, copied, index, driver, in_place, buffer)
                if len(buffer) >= _FLUSH:
                    fs.append(handle, bytes(buffer))
                    buffer.clear()
            driver.finish()  # the same lane checks the in-place rows came from
            if in_place:  # pragma: no cover - lane rows come from the same prefix
                raise CorruptError("corrupt", "lane rows vanished between the fork passes")
            fs.append(handle, bytes(buffer))
            fs.fsync(handle)
        finally:
            fs.close(handle)
        fs.rename(temp, dest_main)
        published = True
        fs.fsync_dir(os.path.dirname(dest_main))
    finally:
        index.close()
        capture.close()
        if not published:
            with contextlib.suppress(Exception):
                fs.remove(temp, force=True)


def _copy_record(
    rec: dict[str, Any],
    tree: bool,
    copied: Callable[[str], bool],
    index: Index,
    driver: ForkDriver,
    in_place: dict[int, DestValue],
    buffer: bytearray,
) -> None:
    """Pass 2 for one record of a dirty line: write what the destination keeps, one record
    per line (the line's other records are gone, so its seqs are no longer consecutive)."""
    kind, seq = rec["kind"], rec["seq"]
    if seq in in_place:
        # The driver still sees the row (it returns nothing for it), so its own finish()
        # checks the same lanes; the transformed row goes in place.
        driver.value(None, rec["namespace"], rec["key"], seq, b"null")
        buffer += _value_line(in_place.pop(seq)) + b"\n"
        return
    if kind == "entry":
        # Tree scope copies every entry of the prefix: no index lookup per entry.
        if tree or copied(rec["id"]):
            buffer += canonical_bytes(rec) + b"\n"
    elif kind == "value" and rec["op"] == "set":
        ns, key = rec["namespace"], rec["key"]
        if index.current_seq(ns, key) == seq:
            value = canonical_bytes(rec["value"])
            for row in driver.value(None, ns, key, seq, value):
                buffer += _value_line(row) + b"\n"
    elif kind == "list" and rec["op"] == "append":
        ns, key = rec["namespace"], rec["key"]
        if index.survives(ns, key, seq):
            element = ListElement(seq, canonical_bytes(rec["value"]), rec.get("tag"))
            for item in driver.list_element(None, ns, key, element):
                out: dict[str, Any] = {
                    "kind": "list",
                    "op": "append",
                    "seq": seq,
                    "namespace": ns,
                    "key": key,
                    "value": rec["value"],
                }
                if item.element.tag is not None:
                    out["tag"] = item.element.tag
                buffer += canonical_bytes(out) + b"\n"
