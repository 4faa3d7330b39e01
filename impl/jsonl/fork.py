"""JSONL forks: a fixed read-only prefix of the source, two passes, a disk-backed index
(001 §1.3 JSONL, JSONL-20).

* *Capture.*  The caller records the source main file's length (at the source's commit-queue
  boundary when it is open here, FORK-12); only that prefix is ever read, through
  :meth:`FileSystem.iter_prefix_lines`.  The source is never written: a torn final line inside
  the prefix is discarded in memory, not repaired (FORK-14).  Sidecars are read only for their
  highest seq: ephemeral state is never copied (FORK-10), but its seqs count in the high-water.
* *Pass 1* folds value/list writes into a temporary APSW index on the real disk: per scalar
  address the seq of the current ``set``; per list address the surviving element seqs; entry
  ``id → parentId`` for branch ancestry.
* *Pass 2* streams the prefix again and emits a record only when the index proves it current
  and the shared driver selects it.  The transformed built-ins (rewritten tip, idle lane
  states) are computed up front from the index's lane rows (bounded by the lane count) and
  written *in place* at their source seqs, so the destination stays in seq order.
* *Publish.*  Header (``parentSessionId``, ``nextSeq`` = source high-water) plus the rows go to
  ``<dest>.tmp`` and are renamed over ``<dest>`` atomically; the temp file and the index are
  removed on failure, the index also on success.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import apsw
import orjson

from impl.fs import FileSystem
from impl.jsonl import layout
from impl.jsonl.codec import BadRecord, check_record, decode_header, decode_transaction
from models.errors import CorruptError
from models.fork import BranchFork, ForkOptions
from models.fork_policy import (
    BRANCH_TIP,
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
from models.records import ListElement

_INDEX_DDL = """
CREATE TABLE cur(namespace TEXT, key TEXT, seq INTEGER, value TEXT,
                 PRIMARY KEY(namespace, key)) WITHOUT ROWID;
CREATE TABLE elems(namespace TEXT, key TEXT, seq INTEGER,
                   PRIMARY KEY(namespace, key, seq)) WITHOUT ROWID;
CREATE TABLE entries(id TEXT PRIMARY KEY, parent TEXT) WITHOUT ROWID;
CREATE TABLE tipchain(id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE members(id TEXT PRIMARY KEY) WITHOUT ROWID;
"""
_FLUSH = 1 << 20


def _corrupt(path: str, line: int, what: str) -> CorruptError:
    return CorruptError("corrupt", f"{path}:{line}: {what}", path=path, line=line)


class SourcePrefix(Protocol):
    """What the two fork passes read: a format-4 :class:`Capture` or a closed legacy file's
    :class:`~impl.jsonl.legacy_fork.LegacyCapture` (LEGACY-13)."""

    main: str
    size: int
    header: dict[str, Any]

    def records(
        self, source_id: str, validate: bool = True
    ) -> Iterator[tuple[int, dict[str, Any]]]: ...

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
        directory = layout.scopes_dir(main)
        if fs.is_dir(directory):
            for entry in fs.list_dir(directory):
                if entry.is_file and layout.decode_sidecar_name(entry.name) is not None:
                    path = f"{directory}/{entry.name}"
                    self.sidecars[path] = fs.file_size(path)

    def records(
        self, source_id: str, validate: bool = True
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(line number, record)`` of every complete line after the header; a torn final
        line is discarded in memory (FORK-14); a malformed complete line is corruption.
        Pass 2 re-reads the same fixed prefix pass 1 validated, so it skips the checks."""
        number = 0
        for raw, complete in self.fs.iter_prefix_lines(self.main, self.size):
            number += 1
            if not complete:
                if number == 1:
                    raise _corrupt(self.main, 1, "missing header")
                return
            try:
                if number == 1:
                    self.header = decode_header(raw, source_id)
                    continue
                for rec in decode_transaction(raw):
                    if validate:
                        check_record(rec, None)
                    yield number, rec
            except BadRecord as exc:
                raise _corrupt(self.main, number, str(exc)) from None

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


class Index:
    """The temporary disk-backed index of pass 1 (an APSW database in a temp directory)."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="scopecheck-fork-index-")
        self.conn = apsw.Connection(os.path.join(self.directory, "index.sqlite"))
        for pragma in ("journal_mode=OFF", "synchronous=OFF"):
            self.conn.execute(f"PRAGMA {pragma}").fetchall()
        self.conn.execute(_INDEX_DDL)
        self.conn.execute("BEGIN")
        self._entries: list[tuple[str, str | None]] = []

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self.conn.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def fold(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        ex = self.conn.execute
        if kind == "value":
            ns, key = rec["namespace"], rec["key"]
            if rec["op"] == "set":
                value = orjson.dumps(rec["value"]).decode() if ns == BRANCH_TIP else None
                ex("INSERT OR REPLACE INTO cur VALUES (?, ?, ?, ?)", (ns, key, rec["seq"], value))
            else:
                ex("DELETE FROM cur WHERE namespace = ? AND key = ?", (ns, key))
        elif kind == "list":
            ns, key = rec["namespace"], rec["key"]
            if rec["op"] == "append":
                ex("INSERT INTO elems VALUES (?, ?, ?)", (ns, key, rec["seq"]))
            else:
                ex("DELETE FROM elems WHERE namespace = ? AND key = ?", (ns, key))
        elif kind == "entry":
            self._entries.append((rec["id"], rec["parentId"]))
            if len(self._entries) >= 1024:
                self.flush()

    def flush(self) -> None:
        """Write the batched entry links (bounded: at most one batch in memory)."""
        if self._entries:
            self.conn.executemany("INSERT OR IGNORE INTO entries VALUES (?, ?)", self._entries)
            self._entries.clear()

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
    from models.payload import decode_json

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

    ``header(high_water)`` builds the destination header line.
    """
    index = Index()
    temp = layout.temp_path(dest_main)
    published = False
    try:
        high = 0
        for _, rec in capture.records(source_id):
            index.fold(rec)
            high = max(high, rec["seq"])
        index.flush()
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
        tree = not isinstance(options, BranchFork)
        fs.write_file(temp, header(high_water) + b"\n")
        handle = fs.open_append(temp)
        try:
            buffer = bytearray()
            for _, rec in capture.records(source_id, validate=False):
                kind, seq = rec["kind"], rec["seq"]
                if seq in in_place:
                    # The driver still sees the row (it returns nothing for it), so its own
                    # finish() checks the same lanes; the transformed row goes in place.
                    driver.value(None, rec["namespace"], rec["key"], seq, b"null")
                    buffer += _value_line(in_place.pop(seq)) + b"\n"
                    continue
                if kind == "entry":
                    # Tree scope copies every entry of the prefix: no index lookup per entry.
                    if tree or copied(rec["id"]):
                        buffer += orjson.dumps(rec) + b"\n"
                elif kind == "value" and rec["op"] == "set":
                    ns, key = rec["namespace"], rec["key"]
                    if index.current_seq(ns, key) == seq:
                        value = orjson.dumps(rec["value"])
                        for row in driver.value(None, ns, key, seq, value):
                            buffer += _value_line(row) + b"\n"
                elif kind == "list" and rec["op"] == "append":
                    ns, key = rec["namespace"], rec["key"]
                    if index.survives(ns, key, seq):
                        element = ListElement(seq, orjson.dumps(rec["value"]), rec.get("tag"))
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
                            buffer += orjson.dumps(out) + b"\n"
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
