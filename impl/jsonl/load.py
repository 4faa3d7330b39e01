"""Reading a Session from disk: the read-only part of the nine open stages of 000 §6.3.

:func:`load_session` reads the main log and every matching sidecar and works out, without
changing a byte: the transactions of each file, torn tails, corruption (file and 1-based line),
the high-water mark from the header and *every* complete record of every file (stage 4, before
anything is ignored), the latest retirement per scope (stage 5), which sidecar transactions are
live (stage 6), and the retained transactions merged in global sequence order (stage 7).  The
storage then performs the repairs this plan calls for (stages 1, 3 and 9) and replays; the
inspector (``scopecheck inspect``) only reports it.  Keeping one reader for both means the
inspector shows exactly what open would do.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import orjson

from scopecheck.impl.fs import FileSystem, Lines, fs_code
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import (
    OP_RETIRE,
    BadRecord,
    decode_header,
    decode_scope_header,
    index_transaction,
    transaction_records,
    unknown_header_keys,
)
from scopecheck.impl.jsonl.highwater import high_water
from scopecheck.impl.jsonl.replay import MainFold, fold_main_log
from scopecheck.models.errors import CorruptError, StorageIOError


@attrs.define
class Tx:
    """One complete transaction line: its 1-based line number, first and last seq, its replay
    operations (:func:`~scopecheck.impl.jsonl.codec.index_transaction`) and its source: the line's
    bytes, or the decoded records for a legacy import.

    The decoded records are not kept (open speed, JSONL-7); :attr:`records` decodes them again
    for the inspector.
    """

    line: int
    first: int
    last: int
    ops: list[tuple[Any, ...]]
    raw: bytes | list[dict[str, Any]]

    @property
    def seqs(self) -> list[int]:
        return list(range(self.first, self.last + 1))

    @property
    def records(self) -> list[dict[str, Any]]:
        raw = self.raw
        return transaction_records(orjson.loads(raw)) if isinstance(raw, bytes) else raw


@attrs.frozen
class Problem:
    """A torn tail (dropped on open), a corrupt line (fails open), or a note: a line in a
    non-canonical form upstream's reader takes and so does open (JSONL-23, JSONL-24)."""

    kind: Literal["torn", "corrupt", "note"]
    path: str
    line: int
    message: str

    def error(self) -> CorruptError:
        return CorruptError(
            "corrupt",
            f"{self.path}:{self.line}: {self.message}; the file was left untouched — restore it "
            "from a backup or remove the damaged line",
            file=self.path,
            line=self.line,
        )


@attrs.define
class FileScan:
    """What one file holds.  ``lines`` are the complete lines (header first)."""

    path: str
    scope_id: str | None
    header: dict[str, Any] | None = None
    txs: list[Tx] = attrs.field(factory=list)
    lines: list[bytes] = attrs.field(factory=list)
    torn: Problem | None = None
    corrupt: list[Problem] = attrs.field(factory=list)
    #: For a sidecar: malformed lines as (problem, index into txs of the next good tx).
    malformed_at: list[tuple[Problem, int]] = attrs.field(factory=list)
    #: Lines in a form no writer produces but the reader accepts (``kind == "note"``).
    notes: list[Problem] = attrs.field(factory=list)


def scan_lines(path: str, lines: Lines, session_id: str, scope_id: str | None) -> FileScan:
    """Parse a main log (``scope_id is None``) or a sidecar; never raises for bad content."""
    scan = scan_head(path, lines, session_id, scope_id)
    if scan.header is not None:
        scan_body(scan)
    return scan


def scan_head(path: str, lines: Lines, session_id: str, scope_id: str | None) -> FileScan:
    """The torn tail and the header of a file (``header`` stays ``None`` if it is bad)."""
    scan = FileScan(path, scope_id, lines=lines.complete)
    complete = lines.complete
    if lines.tail is not None:
        scan.torn = Problem(
            "torn",
            path,
            len(complete) + 1,
            f"unterminated final line ({len(lines.tail)} bytes) is dropped",
        )
    if not complete:
        what = "missing header" if scope_id is None else "missing scope header"
        detail = "unterminated" if lines.tail is not None else "empty file"
        scan.corrupt.append(Problem("corrupt", path, 1, f"{what} ({detail})"))
        return scan
    try:
        if scope_id is None:
            scan.header = decode_header(complete[0], session_id)
            unknown = unknown_header_keys(scan.header)
            if unknown:
                message = f"header keys upstream does not define, kept as they are: {unknown}"
                scan.notes.append(Problem("note", path, 1, message))
        else:
            scan.header = decode_scope_header(complete[0], session_id, scope_id)
    except BadRecord as exc:
        scan.corrupt.append(Problem("corrupt", path, 1, str(exc)))
    return scan


def scan_body(scan: FileScan) -> None:
    """The transactions of a file whose header is good, each line checked (JSONL-6)."""
    path, scope_id, complete = scan.path, scan.scope_id, scan.lines
    previous = 0
    txs = scan.txs
    append = txs.append
    loads = orjson.loads
    index_tx = index_transaction
    for index in range(1, len(complete)):
        line = complete[index]
        notes: list[str] = []
        try:
            try:
                obj = loads(line)
            except orjson.JSONDecodeError as exc:
                raise BadRecord(f"not JSON: {exc}") from None
            first, last, ops = index_tx(obj, line, scope_id, notes=notes)
            scan.notes.extend(Problem("note", path, index + 1, note) for note in notes)
            if not ops and first == 0:  # an empty transaction array: nothing committed
                continue
            if first <= previous:
                raise BadRecord(
                    f"seq {first} does not follow the previous transaction's seq {previous}"
                )
        except BadRecord as exc:
            problem = Problem("corrupt", path, index + 1, str(exc))
            scan.corrupt.append(problem)
            scan.malformed_at.append((problem, len(txs)))
            continue
        previous = last
        append(Tx(index + 1, first, last, ops, line))


@attrs.define
class SessionLoad:
    """The plan for opening one Session (see the module docstring)."""

    session_id: str
    main: FileScan
    sidecars: dict[str, FileScan] = attrs.field(factory=dict)
    #: Files in ``.scopes`` that are not sidecars of this Session (temp files included).
    unrelated: list[str] = attrs.field(factory=list)
    temps: list[str] = attrs.field(factory=list)
    high_water: int = 0
    next_seq: int = 1
    boundaries: dict[str, int] = attrs.field(factory=dict)
    #: Retained transactions in global order, each with its scope (``None`` = main log).
    retained: list[tuple[str | None, Tx]] = attrs.field(factory=list)
    #: Sidecars holding at least one record after their scope's latest retirement.
    live: set[str] = attrs.field(factory=set)
    errors: list[Problem] = attrs.field(factory=list)
    #: The main log as open's fast path folded it
    #: (:func:`~scopecheck.impl.jsonl.replay.fold_main_log`); then ``main.txs`` is empty and
    #: ``retained`` holds sidecar transactions only.
    folded: MainFold | None = None

    def raise_if_corrupt(self) -> None:
        if self.errors:
            raise self.errors[0].error()


def load_session(
    fs: FileSystem,
    main: str,
    session_id: str,
    *,
    fold: bool = False,
) -> SessionLoad:
    """Stages 1–8 of 000 §6.3, read-only.

    ``fold`` (open) lets the fast path fold a clean main log straight into resident state
    (:func:`~scopecheck.impl.jsonl.replay.fold_main_log`).  If the fast path gives up, or the plan
    finds any problem, the Session is read again the documented way, so problems are always reported
    by the same code whichever way open went.
    """
    lines = fs.read_lines(main)
    scan = scan_head(main, lines, session_id, None)
    load = SessionLoad(session_id, scan)
    # Stage 2/3: discover and parse sidecars of this Session.
    directory = session_paths.scopes_dir(main)
    try:
        entries = fs.list_dir(directory)
    except StorageIOError as exc:
        if fs_code(exc) != "not_found":
            raise
        entries = []
    for entry in sorted(entries, key=lambda e: e.name):
        path = f"{directory}/{entry.name}"
        if entry.name.endswith(session_paths.TEMP_SUFFIX) and entry.is_file:
            load.temps.append(path)
            continue
        scope_id = session_paths.decode_sidecar_name(entry.name) if entry.is_file else None
        if scope_id is None:
            load.unrelated.append(path)
            continue
        side_lines = fs.read_lines(path)
        load.sidecars[scope_id] = scan_lines(path, side_lines, session_id, scope_id)
    if fold and scan.header is not None:
        # The sidecars are read first so the fold can note which of their transactions share
        # a seq with a main transaction as it goes (stage 7, :func:`_check_against_folded`).
        spans = sorted((tx.first, tx.last) for side in load.sidecars.values() for tx in side.txs)
        load.folded = fold_main_log(scan.lines, spans)
    if load.folded is None and scan.header is not None:
        scan_body(scan)
    plan(load)
    if load.folded is not None and load.errors:
        return load_session(fs, main, session_id)
    return load


def plan(load: SessionLoad) -> None:
    """Stages 4–8 over already-scanned files."""
    main = load.main
    folded = load.folded
    load.errors.extend(main.corrupt)
    # Stage 5: the latest retirement per scope, from complete main transactions.
    boundaries = load.boundaries
    if folded is not None:
        boundaries.update(folded.boundaries)
    for tx in main.txs:
        for op in tx.ops:
            if op[0] == OP_RETIRE:
                boundaries[op[1]] = op[2]
    # Stage 4: the high-water mark from the header and every complete record of every file.
    header_next_seq = main.header.get("nextSeq") if main.header is not None else None
    if folded is not None:
        tops = [folded.last] if folded.last else []
    else:
        tops = [main.txs[-1].last] if main.txs else []
    # Stage 6: retained sidecar transactions; decide which sidecars are live.
    retained: list[tuple[str | None, Tx]] = [(None, tx) for tx in main.txs]
    for scope_id, scan in load.sidecars.items():
        boundary = boundaries.get(scope_id, 0)
        kept = [tx for tx in scan.txs if tx.last > boundary]
        if scan.txs:
            tops.append(scan.txs[-1].last)
        if kept:
            load.live.add(scope_id)
        retained.extend((scope_id, tx) for tx in kept)
        if scan.header is None:
            load.errors.extend(scan.corrupt)
            continue
        # A malformed line is fatal unless a later good record proves it lies before the
        # boundary (seqs grow along a file), i.e. it belongs to a retired lifetime (000 §6.3).
        for problem, next_good in scan.malformed_at:
            later = scan.txs[next_good:]
            if not any(tx.last <= boundary for tx in later):
                load.errors.append(problem)
    high = high_water(header_next_seq, tops)
    load.high_water = high
    # Stage 7: merge by global seq; reject duplicates and interleaving transactions.  The main
    # log's own transactions already ascend strictly (scan_lines rejects anything else), so
    # with no sidecar transaction retained there is nothing to merge or check.
    load.retained = retained
    load.next_seq = high + 1  # stage 8: advance to the precomputed high-water mark
    if len(retained) == len(main.txs):
        return
    retained.sort(key=_first_seq)
    if folded is not None:
        _check_against_folded(load, folded)
        return
    previous: tuple[str | None, Tx] | None = None
    for item in retained:
        if previous is not None and item[1].first <= previous[1].last:
            where = load.sidecars[item[0]].path if item[0] is not None else main.path
            other = load.sidecars[previous[0]].path if previous[0] is not None else main.path
            if (item[0] is None) == (previous[0] is None):
                message = (
                    f"seq {item[1].first} repeats or precedes seq {previous[1].last} of "
                    f"{other}:{previous[1].line}"
                )
            else:  # one main, one sidecar: the mixed-writer hazard (JSONL-27)
                clash = sorted(set(item[1].seqs) & set(previous[1].seqs))
                what = f"seq {clash[0]} is held by both" if clash else "interleaving seqs in"
                message = (
                    f"{what} {where}:{item[1].line} and {other}:{previous[1].line}: the main "
                    "log reuses a seq a live sidecar holds -- a writer that knows nothing of "
                    "sidecars (one that predates scopes) computed its next seq from the main "
                    "log alone and appended (JSONL-27)"
                )
            load.errors.append(Problem("corrupt", where, item[1].line, message))
        previous = item


def _first_seq(item: tuple[str | None, Tx]) -> int:
    return item[1].first


def _check_against_folded(load: SessionLoad, folded: MainFold) -> None:
    """Stage 7 when the main log was folded: no retained sidecar transaction may share a seq
    with a main transaction (the fold noted which do, ``folded.collisions``) or with another
    retained one.  Only *whether* is decided here; :func:`load_session` then reads the Session
    again the documented way to say where."""
    collisions = folded.collisions
    previous_last = 0
    for _scope_id, tx in load.retained:  # sorted by first seq
        if tx.first <= previous_last or (tx.first, tx.last) in collisions:
            load.errors.append(
                Problem("corrupt", load.main.path, 0, "a sidecar transaction repeats a seq")
            )
            return
        previous_last = tx.last
