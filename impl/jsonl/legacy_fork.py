"""Forks of *closed* legacy files: a bounded, read-only, disk-backed normaliser (001 §1.3,
LEGACY-13).

:func:`scopecheck.impl.jsonl.legacy.import_legacy` holds the whole file in memory — right for an
open Session, which keeps its import resident until the first commit, but 001 §1.3 forbids a fork
from going through resident state.  :class:`LegacyCapture` is the fork-side replacement: it
records the file's length (the fixed prefix), streams the complete lines once into a
temporary APSW index (one row per legacy record: parent, type, nearest retained ancestor,
minted id, the migrated record), keeps only bounded aggregates in memory (the usage sum, the
last session name, the final record id) and then yields the same format-4 records the
in-memory importer would, one at a time, from the index.
:func:`scopecheck.impl.jsonl.fork.fork_jsonl` consumes it exactly like a format-4
:class:`~scopecheck.impl.jsonl.fork.Capture` — its two passes call
:meth:`LegacyCapture.records` twice and get identical records, because ids are minted once
into the index.  The source file is only ever read (``iter_prefix_lines``); nothing is written
beside it; the index directory is removed by :meth:`close` (on success and on failure).

Ids are minted with the repository's ``legacy_ids`` (UUIDv7 by default), so every reparse
mints fresh ids: an entry id a caller saw in an earlier open is unknown to this parse and a
branch fork naming it rejects normally (``unknown_entry``); an omitted ``entry_id`` means the
freshly normalised tip (001 §1.3).

``tests/legacy/test_fork_legacy.py`` checks record-for-record agreement with
:func:`~scopecheck.impl.jsonl.legacy.import_legacy` on the real transcripts and on generated files.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import apsw
import orjson

from scopecheck.impl.fs import FileSystem
from scopecheck.impl.jsonl.fork import Ops, checked_transactions
from scopecheck.impl.jsonl.legacy import (
    DISCARDED,
    IMPORT_DETAILS,
    RETAINED,
    THINKING_LEVELS,
    USAGE_COST,
    USAGE_TOKENS,
    LegacyIds,
    add_usage,
    iso_ms,
    legacy_entry,
    project,
    usage_of,
)
from scopecheck.impl.jsonl.scratch import scratch_index
from scopecheck.models.errors import CorruptError
from scopecheck.models.payload import canonical_bytes

_DDL = """
CREATE TABLE recs(lid TEXT PRIMARY KEY, line INTEGER, parent TEXT, type TEXT,
                  res TEXT, minted TEXT, seq INTEGER, pres TEXT, data BLOB);
CREATE INDEX recs_line ON recs(line);
CREATE TABLE labels(line INTEGER PRIMARY KEY, target TEXT, label TEXT);
CREATE TABLE lab(target TEXT PRIMARY KEY, line INTEGER, label TEXT);
"""


class _Bad(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


class LegacyCapture:
    """The fixed prefix of a closed legacy file, normalised through a disk index.

    Same surface as :class:`scopecheck.impl.jsonl.fork.Capture`: ``main``, ``size``, ``header``,
    ``lines(source_id)``, ``transactions(source_id, lean)``, ``sidecar_high()`` and
    ``close()``; ``records(source_id)`` gives the normalised records themselves.
    """

    def __init__(self, fs: FileSystem, main: str, ids: LegacyIds) -> None:
        self.fs = fs
        self.main = main
        self.size = fs.file_size(main)
        self.header: dict[str, Any] = {}
        self._ids = ids
        self._conn: apsw.Connection | None = None
        #: The synthesised rows before and after the labels (a name; tip, lane, usage).
        self._head: list[dict[str, Any]] = []
        self._after: list[dict[str, Any]] = []
        self._retained = 0
        #: Lines the normaliser read (header included): the synthesised rows after the last
        #: record are numbered from here.
        self._lines_read = 0

    # -- the Capture surface -------------------------------------------------------------

    def sidecar_high(self) -> int:
        """Legacy files have no sidecars: a stray ``.scopes`` directory never joins (LEGACY-9)."""
        return 0

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(apsw.Error):
                self._conn.close()
            self._conn = None

    def records(
        self, source_id: str, validate: bool = True
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """The format-4 records of the import, in seq order: entries, then the synthesised
        values, then the usage row (LEGACY-3..LEGACY-7).  The first call builds the index."""
        del validate  # the records are built here, not read from a format-4 file
        try:
            if self._conn is None:
                self._build(source_id)
            yield from self._emit()
        except _Bad as exc:
            raise CorruptError(
                "corrupt",
                f"{self.main}:{exc.line}: legacy session file: {exc}; the file was left "
                "untouched — repair or remove the damaged line",
                file=self.main,
                line=exc.line,
            ) from None

    def lines(self, source_id: str) -> Iterator[tuple[int, bytes]]:
        """The import as format-4 lines, one record per line (a legacy file has no
        transactions of several writes), numbered in the order :meth:`records` emits them."""
        dumps = canonical_bytes
        for number, rec in self.records(source_id):
            yield number, dumps(rec)

    def transactions(
        self, source_id: str, lean: bool = False
    ) -> Iterator[tuple[int, bytes, Any, int, int, Ops]]:
        """Those lines checked exactly as a format-4 source's are (JSONL-6)."""
        return checked_transactions(self.main, self.lines(source_id), lean)

    # -- pass A: the index ---------------------------------------------------------------

    def _build(self, session_id: str) -> None:
        conn = self._conn = scratch_index(_DDL)
        ex = conn.execute
        version = 1
        created_at = 0
        previous: str | None = None
        previous_res: str | None = None
        dumps = canonical_bytes
        final: str | None = None
        name: object = None
        named = False
        total: dict[str, Any] = {n: 0 for n in USAGE_TOKENS}
        total["cost"] = {n: 0 for n in USAGE_COST}
        seen_usage = False
        ordinal = 0
        number = 0
        for raw, complete in self.fs.iter_prefix_lines(self.main, self.size):
            if not complete:
                break  # an unterminated final line is ignored (LEGACY-1)
            number += 1
            self._lines_read = number
            if number == 1:
                version, created_at = self._header(raw, session_id)
                continue
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise _Bad(number, "not JSON") from None
            if type(rec) is not dict:
                raise _Bad(number, "a record must be a JSON object")
            kind = rec.get("type")
            if kind not in RETAINED and kind not in DISCARDED:
                raise _Bad(number, f"unsupported legacy record type {kind!r}")
            if version == 1:
                rec["id"] = f"v1:{number}"
                rec["parentId"] = previous
                if kind == "compaction":
                    kept = rec.pop("firstKeptEntryIndex", None)
                    if type(kept) is int and 1 <= kept < number - 1:
                        rec["firstKeptEntryId"] = f"v1:{kept + 1}"
            legacy_id, parent = rec.get("id"), rec.get("parentId")
            if type(legacy_id) is not str:
                raise _Bad(number, "record id must be a string")
            parent_res: str | None = None
            if parent is not None and parent == previous:
                parent_res = previous_res  # the common case (a chain): no lookup
            elif parent is not None:
                parent_row = self._row(parent) if type(parent) is str else None
                if parent_row is None:
                    raise _Bad(number, f"parentId {parent!r} names no earlier record")
                parent_res = parent_row[0]
            if version <= 2 and kind == "message":
                message = rec.get("message")
                if type(message) is dict and message.get("role") == "hookMessage":
                    message["role"] = "custom"
            rec["timestamp"] = iso_ms(rec.get("timestamp"), number)
            minted: str | None = None
            seq: int | None = None
            if kind in RETAINED:
                minted = self._ids(rec["timestamp"], ordinal)
                ordinal += 1
                seq = ordinal
            elif kind == "session_info":
                name, named = rec.get("name"), True
            elif kind == "label":
                ex(
                    "INSERT INTO labels VALUES (?, ?, ?)",
                    (number, _text(rec.get("targetId")), _label(rec.get("label"))),
                )
            usage_value = usage_of(rec)
            if type(usage_value) is dict:
                seen_usage = True
                add_usage(total, usage_value)
            res = minted if minted is not None else parent_res
            try:
                ex(
                    "INSERT INTO recs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (legacy_id, number, parent, kind, res, minted, seq, parent_res, dumps(rec)),
                )
            except apsw.ConstraintError:
                raise _Bad(number, f"duplicate record id {legacy_id!r}") from None
            previous = final = legacy_id
            previous_res = res
        if number == 0:
            raise _Bad(1, "missing header")
        self._retained = ordinal
        # The tail of the import: name, labels, tip, lane, usage (LEGACY-5..LEGACY-7).  Labels
        # stay in the index (there may be one per entry); the rest is a handful of rows, kept
        # without seqs — :meth:`_emit` numbers everything after the entries consecutively.
        self._resolve_labels()
        (labels,) = next(iter(ex("SELECT COUNT(*) FROM lab WHERE label IS NOT NULL")))
        self._head = []
        if named and type(name) is str and name:
            self._head.append(_set("pi.session.name", "", name))
        after = [_set("pi.branch.tip", "main", self._res(final))]
        config = self._lane_config(final)
        if config is not None:
            after.append(_set("pi.lane.config", "main", config))
            idle: dict[str, Any] = {
                "currentOperationId": None,
                "lastOperationId": None,
                "inbox": [],
            }
            after.append(_set("pi.lane.state", "main", idle))
        if seen_usage:
            after.append(
                {
                    "kind": "usage",
                    "id": self._ids(created_at, ordinal),
                    "usage": total,
                    "adjustment": True,
                    "details": dict(IMPORT_DETAILS),
                }
            )
        self._after = after
        self.header = {"nextSeq": ordinal + len(self._head) + labels + len(after) + 1}

    def _header(self, raw: bytes, session_id: str) -> tuple[int, int]:
        try:
            head = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _Bad(1, "header is not JSON") from None
        if type(head) is not dict or head.get("type") != "session":
            raise _Bad(1, 'header has no type "session"')
        version = head.get("version", 1)
        if version not in (1, 2, 3) or type(version) is not int:
            raise _Bad(1, f"unsupported legacy version {version!r} (expected 1, 2 or 3)")
        if head.get("id") != session_id:
            raise _Bad(1, f"header names session {head.get('id')!r}, expected {session_id!r}")
        if type(head.get("cwd")) is not str:
            raise _Bad(1, "header cwd must be a string")
        return version, iso_ms(head.get("timestamp"), 1)

    def _row(self, legacy_id: str) -> tuple[str | None] | None:
        assert self._conn is not None
        for row in self._conn.execute("SELECT res FROM recs WHERE lid = ?", (legacy_id,)):
            return (row[0],)
        return None

    def _res(self, legacy_id: str | None) -> str | None:
        """The minted id of ``legacy_id`` or of its nearest retained ancestor (LEGACY-4)."""
        if legacy_id is None:
            return None
        row = self._row(legacy_id)
        return None if row is None else row[0]

    def _known(self, rec: dict[str, Any], field: str, line: int) -> str:
        target = rec.get(field)
        if type(target) is not str or self._row(target) is None:
            raise _Bad(line, f"{field} {target!r} names no record")
        return target

    def _resolve_labels(self) -> None:
        """Fold the label records in file order: the last label of each resolved target wins
        and sits where that label was set; an empty one removes it (LEGACY-5)."""
        assert self._conn is not None
        ex = self._conn.execute
        rows = ex("SELECT line, target, label FROM labels ORDER BY line")
        for line, target_lid, label in _iterate(rows):
            if target_lid is None or self._row(target_lid) is None:
                raise _Bad(line, f"targetId {target_lid!r} names no record")
            target = self._res(target_lid)
            if target is None:
                continue
            ex("INSERT OR REPLACE INTO lab VALUES (?, ?, ?)", (target, line, label))

    def _lane_config(self, final: str | None) -> dict[str, Any] | None:
        """The final record's ancestry's nearest model, thinking level and active tools
        (LEGACY-6); reads one row at a time."""
        assert self._conn is not None
        model: dict[str, str] | None = None
        level: str | None = None
        tools: list[str] | None = None
        seen: set[str] = set()
        current = final
        while current is not None and len(seen) < 3:
            parent, kind = next(
                iter(self._conn.execute("SELECT parent, type FROM recs WHERE lid = ?", (current,)))
            )
            if kind in ("model_change", "thinking_level_change", "active_tools_change") and (
                kind not in seen
            ):
                seen.add(kind)
                rec = self._record(current)
                if kind == "model_change":
                    provider, model_id = rec.get("provider"), rec.get("modelId")
                    if type(provider) is str and provider and type(model_id) is str and model_id:
                        model = {"provider": provider, "modelId": model_id}
                elif kind == "thinking_level_change":
                    if rec.get("thinkingLevel") in THINKING_LEVELS:
                        level = rec["thinkingLevel"]
                else:
                    names = rec.get("activeToolNames")
                    if type(names) is list and all(type(n) is str for n in names):
                        tools = list(names)
            current = parent
        if model is None or level is None:
            return None
        return {"model": model, "thinkingLevel": level, "activeToolNames": tools or []}

    def _record(self, legacy_id: str) -> dict[str, Any]:
        assert self._conn is not None
        for (data,) in self._conn.execute("SELECT data FROM recs WHERE lid = ?", (legacy_id,)):
            rec: dict[str, Any] = orjson.loads(data)
            return rec
        raise AssertionError(legacy_id)  # pragma: no cover - callers check membership

    # -- pass B: the records -------------------------------------------------------------

    def _emit(self) -> Iterator[tuple[int, dict[str, Any]]]:
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT line, minted, seq, pres, data FROM recs WHERE minted IS NOT NULL ORDER BY line"
        )
        for line, minted, seq, parent_res, data in _iterate(rows):
            rec = orjson.loads(data)
            yield line, self._entry(rec, line, minted, seq, parent_res)
        seq = self._retained
        line = self._lines_read
        labelled = self._conn.execute(
            "SELECT target, label FROM lab WHERE label IS NOT NULL ORDER BY line"
        )
        rows_after = (_set("pi.entry.label", target, label) for target, label in labelled)
        for rec in _chain(self._head, rows_after, self._after):
            seq += 1
            line += 1
            yield line, _numbered(rec, seq)

    def _entry(
        self, rec: dict[str, Any], line: int, minted: str, seq: int, parent_res: str | None
    ) -> dict[str, Any]:
        return legacy_entry(
            rec,
            minted,
            parent_res,
            seq,
            lambda r: self._from_id(r, line),
            lambda r: self._tail_of(r, line),
        )

    def _from_id(self, rec: dict[str, Any], line: int) -> str | None:
        if rec.get("fromId") == "root":
            return None
        return self._res(self._known(rec, "fromId", line))

    def _tail_of(self, rec: dict[str, Any], line: int) -> list[Any]:
        """A compaction's retained tail: the context messages from ``firstKeptEntryId`` to its
        parent (LEGACY-8).  Only legacy ids are held while walking."""
        assert self._conn is not None
        first = rec.get("firstKeptEntryId")
        if first is None:
            return []
        chain: list[str] = []
        current = rec.get("parentId")
        while current is not None:
            chain.append(current)
            if current == first:
                chain.reverse()
                return [
                    m
                    for lid in chain
                    for m in project(self._record(lid), lambda r: self._from_id(r, line))
                ]
            current = next(
                iter(self._conn.execute("SELECT parent FROM recs WHERE lid = ?", (current,)))
            )[0]
        raise _Bad(line, f"firstKeptEntryId {first!r} is not on its parent branch")


def _set(namespace: str, key: str, value: Any) -> dict[str, Any]:
    return {"kind": "value", "op": "set", "namespace": namespace, "key": key, "value": value}


def _numbered(rec: dict[str, Any], seq: int) -> dict[str, Any]:
    """``rec`` with its seq, keys in the importer's order (its lines are byte-identical)."""
    if rec["kind"] == "value":
        return {"kind": "value", "op": "set", "seq": seq, **{k: rec[k] for k in _VALUE_KEYS}}
    out = {k: rec[k] for k in ("kind", "id", "usage", "adjustment", "details")}
    out["seq"] = seq
    return out


_VALUE_KEYS = ("namespace", "key", "value")


def _chain(*parts: Any) -> Iterator[dict[str, Any]]:
    for part in parts:
        yield from part


def _iterate(cursor: Any) -> Iterator[Any]:
    yield from cursor


def _text(value: object) -> str | None:
    return value if type(value) is str else None


def _label(value: object) -> str | None:
    return value if type(value) is str and value else None
