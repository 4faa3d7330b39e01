"""Folding a Session's log into resident state (000 §6.3 stage 7, JSONL-7).

Two ways in, one result:

* :func:`replay` folds a load plan's retained transactions (:mod:`scopecheck.impl.jsonl.load`)
  in global order.  The inspector, legacy imports and any file the fast path does not
  recognise go this way.
* :func:`fold_main_log` is open's fast path for a *clean* main log: it checks each line and
  folds it into the resident maps in the same pass, so nothing per transaction outlives its
  line (no operation lists, no transaction objects).  It accepts exactly what the record checks
  accept and folds exactly what :func:`replay` would (``tests/jsonl/test_fold_main_log.py``);
  anything else -- a record it does not recognise, a corrupt line -- makes it give up
  (``None``), and the caller reads the file the documented way, which names the problem.

Folding the main log before the sidecars is the same fold as the global order: main-log
records touch entries, usage rows and *unscoped* values and lists only, sidecar records only
their own scope's (000 §6.1, JSONL-2), and a retirement is a boundary the plan applies to the
sidecars, not a write (see :func:`replay`).  Reads never depend on map order (every read sorts).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from scopecheck.impl.jsonl.codec import (
    OP_APPEND,
    OP_CLEAR,
    OP_DELETE,
    OP_ENTRY,
    OP_MESSAGE,
    OP_SET,
    OP_USAGE,
)
from scopecheck.impl.jsonl.lazy import (
    LazyRecords,
    build_entry,
    build_usage,
    build_value,
    find_entry,
    find_usage,
    find_value,
)
from scopecheck.impl.resident import ResidentState
from scopecheck.impl.stats import MESSAGE_TYPE, BadUsage, add_usages
from scopecheck.models.payload import canonical_bytes
from scopecheck.models.records import ListElement

if TYPE_CHECKING:
    from scopecheck.impl.jsonl.load import SessionLoad


def resident_state() -> ResidentState:
    """An empty resident state whose entry, usage and value maps build records lazily."""
    return ResidentState(
        entries=LazyRecords(build_entry, find_entry),
        usage=LazyRecords(build_usage, find_usage),
        values=LazyRecords(build_value, find_value),
    )


@attrs.define
class MainFold:
    """A clean main log folded into ``state``, plus what the plan needs from it: its last seq
    (0 when it holds no transaction), the latest retirement per scope (stage 5), and the
    sidecar transaction spans that share a seq with a main transaction (stage 7 rejects
    those that are retained)."""

    state: ResidentState
    last: int = 0
    boundaries: dict[str, int] = attrs.field(factory=dict)
    collisions: set[tuple[int, int]] = attrs.field(factory=set)
    messages: int = 0


def fold_main_log(lines: list[bytes], spans: Sequence[tuple[int, int]] = ()) -> MainFold | None:
    """Check and fold the transaction lines of a main log (``lines[0]`` is its header, already
    checked); ``None`` if any line is not one the fast path recognises (JSONL-6 stays with the
    documented checks then).  ``spans`` are the sidecars' transactions as ``(first, last)``
    seqs, sorted.

    :func:`_fold_lines` does the work and hands each usage value to
    :func:`~scopecheck.impl.stats.add_usages` as it comes, which checks and sums it, so no decoded
    record outlives its line.
    """
    fold = MainFold(resident_state())
    state = fold.state
    try:
        totals = add_usages(state.stats.usage, _fold_lines(lines, spans, fold))
    except (_Unrecognised, BadUsage, KeyError, TypeError, ValueError):
        # ValueError covers bad JSON; KeyError and TypeError a missing key or a non-dict record
        return None
    _count_raw(state)
    state.stats = attrs.evolve(
        state.stats, message_count=state.stats.message_count + fold.messages, usage=totals
    )
    return fold


_NEVER = float("inf")


class _Unrecognised(Exception):
    """A line the fast path does not take (the documented path will say what is wrong)."""


def _fold_lines(
    lines: list[bytes], spans: Sequence[tuple[int, int]], fold: MainFold
) -> Iterator[dict[str, Any]]:
    """Fold ``lines[1:]`` into ``fold`` and yield each usage value in seq order.

    Along the way it notes the sidecar ``spans`` a main transaction shares a seq with: both
    ascend, so one comparison per line (``last >= next_span``) says whether to look.

    Each record's check is the one :func:`scopecheck.impl.jsonl.codec.check_record` makes for the
    main log, written inline: a record holding exactly *n* keys, all *n* of them subscripted here,
    has exactly the required key set.  Entries, usage rows and values are stored as the line
    that holds them (:mod:`scopecheck.impl.jsonl.lazy` finds the record again on first read); the
    line is alive anyway, so a record costs no object of its own until something reads it.
    """
    state = fold.state
    entries, usage_rows, values, lists = state.entries, state.usage, state.values, state.lists
    assert isinstance(values, LazyRecords) and isinstance(entries, LazyRecords)
    assert isinstance(usage_rows, LazyRecords)
    drop_value = values.pop_raw
    boundaries = fold.boundaries
    span_count = len(spans)
    span_at = 0  # spans before this one end before the current main transaction
    next_span = spans[0][0] if spans else _NEVER
    loads = orjson.loads
    messages = 0
    previous = 0
    for index in range(1, len(lines)):
        line = lines[index]
        obj = loads(line)
        if type(obj) is list:
            if len(obj) < 2:
                raise _Unrecognised
            records: Any = obj
        elif type(obj) is dict:
            records = (obj,)
        else:
            raise _Unrecognised
        first = 0
        for rec in records:
            seq = rec["seq"]
            if type(seq) is not int:
                raise _Unrecognised
            if first:
                if seq != previous + 1:  # consecutive inside a transaction
                    raise _Unrecognised
            elif seq > previous:  # ascending along the file, and so >= 1
                first = seq
            else:
                raise _Unrecognised
            previous = seq
            kind = rec["kind"]
            if kind == "entry":
                ident, type_, parent = rec["id"], rec["type"], rec["parentId"]
                if (
                    type(ident) is not str
                    or type(type_) is not str
                    or type(rec["timestamp"]) is not int
                    or (parent is not None and type(parent) is not str)
                ):
                    raise _Unrecognised
                entries[ident] = line
                if type_ == MESSAGE_TYPE:
                    messages += 1
            elif kind == "usage":
                ident, usage_value = rec["id"], rec["usage"]
                has_entry = "entryId" in rec
                if (
                    len(rec) != 5 + has_entry + ("details" in rec)
                    or type(ident) is not str
                    or type(usage_value) is not dict
                    or type(rec["adjustment"]) is not bool
                    or (has_entry and type(rec["entryId"]) is not str)
                ):
                    raise _Unrecognised
                usage_rows[ident] = line
                yield usage_value
            elif kind == "value" or kind == "list":
                namespace, key, verb = rec["namespace"], rec["key"], rec["op"]
                if type(namespace) is not str or type(key) is not str:
                    raise _Unrecognised
                size = len(rec)
                if verb == "delete":
                    if size != 5:
                        raise _Unrecognised
                    if kind == "value":
                        drop_value((None, namespace, key))
                    else:
                        lists.pop((None, namespace, key), None)
                elif "value" not in rec:
                    raise _Unrecognised
                elif kind == "value":
                    if verb != "set" or size != 6:
                        raise _Unrecognised
                    values[(None, namespace, key)] = line
                else:
                    if verb != "append":
                        raise _Unrecognised
                    if size == 6:
                        tag = None
                    else:
                        tag = rec["tag"]
                        if size != 7 or type(tag) is not str or not tag:
                            raise _Unrecognised
                    element = ListElement(seq, canonical_bytes(rec["value"]), tag)
                    bucket = lists.get((None, namespace, key))
                    if bucket is None:
                        lists[(None, namespace, key)] = [element]
                    else:
                        bucket.append(element)
            elif kind == "scope":
                scope_id = rec["scopeId"]
                if (
                    len(rec) != 4
                    or rec["op"] != "retire"
                    or type(scope_id) is not str
                    or not scope_id
                ):
                    raise _Unrecognised
                boundaries[scope_id] = seq  # seqs ascend: the latest retirement wins
            else:
                raise _Unrecognised
        if previous >= next_span:
            while span_at < span_count and spans[span_at][1] < first:
                span_at += 1
            at = span_at
            while at < span_count and spans[at][0] <= previous:
                if spans[at][1] >= first:
                    fold.collisions.add(spans[at])
                at += 1
            next_span = spans[span_at][0] if span_at < span_count else _NEVER
    fold.last = previous
    fold.messages = messages


def replay(load: SessionLoad) -> ResidentState:
    """The resident state of a load plan: its folded main log (:func:`fold_main_log`), if the
    fast path read it, with the retained transactions folded in in global order (stage 7).

    Retirement records are *boundaries* here, not deletions: the records they end were already
    left out by stage 6 (000 §6.3), so replay never needs to apply them.  Entries, usage rows
    and values are kept as their replay operations, which point at their lines, until first
    read (:mod:`scopecheck.impl.jsonl.lazy`); the operation already carries the resident key.
    """
    state = load.folded.state if load.folded is not None else resident_state()
    values, lists, entries, usage_rows = state.values, state.lists, state.entries, state.usage
    assert isinstance(values, LazyRecords) and isinstance(entries, LazyRecords)
    assert isinstance(usage_rows, LazyRecords)
    drop_value = values.pop_raw
    message_count = state.stats.message_count
    usage_values: list[dict[str, Any]] = []
    add_usage_value = usage_values.append
    for _scope_id, tx in load.retained:
        for op in tx.ops:
            code = op[0]
            if code == OP_MESSAGE:
                entries[op[1]] = op
                message_count += 1
            elif code == OP_SET:
                values[op[1]] = op
            elif code == OP_ENTRY:
                entries[op[1]] = op
            elif code == OP_USAGE:
                usage_rows[op[1]] = op
                add_usage_value(op[4])
            elif code == OP_APPEND:
                bucket = lists.get(op[1])
                if bucket is None:
                    lists[op[1]] = [op[2]]
                else:
                    bucket.append(op[2])
            elif code == OP_DELETE:
                drop_value(op[1])
            elif code == OP_CLEAR:
                lists.pop(op[1], None)
            # OP_RETIRE: a boundary only (see docstring)
    _count_raw(state)
    if usage_values or message_count != state.stats.message_count:
        totals = add_usages(state.stats.usage, usage_values)
        state.stats = attrs.evolve(state.stats, message_count=message_count, usage=totals)
    state.next_seq = load.next_seq
    return state


def _count_raw(state: ResidentState) -> None:
    for mapping in (state.entries, state.values, state.usage):
        assert isinstance(mapping, LazyRecords)
        mapping.count_raw()
