"""The model of a fork: the expected destination, as a query over the source's committed log.

Written differently from the backends on purpose (BRIEF "The model is the oracle"): it does
not use the streaming driver.  It folds the whole log, asks the fold for *current* rows, decides
lanes and ancestry with its own code, and returns the destination as a new log — one
single-write transaction per copied row at that row's source seq, then an empty *reservation*
transaction at the source's high-water mark, so folding the destination log yields the
preserved seqs and ``next_seq`` = the source's (FORK-6).  Only :func:`classify` is shared: the
closed classifier is the contract (001 §1.2 requires one, used by everyone).

Independence from impl/ is enforced by tests/test_layering.py.
"""

from __future__ import annotations

from typing import Any

import attrs

from scopecheck.models.errors import CorruptError, usage
from scopecheck.models.fold import Transaction, fold, snapshot_of
from scopecheck.models.fork import BranchFork, ForkOptions
from scopecheck.models.fork_policy import Disposition, classify, classify_list
from scopecheck.models.payload import decode_json, encode_json
from scopecheck.models.writes import AnyWrite, AppendList, InsertEntry, SetValue

_IDLE: dict[str, Any] = {"currentOperationId": None, "lastOperationId": None, "inbox": []}


def _corrupt(what: str) -> CorruptError:
    return CorruptError("corrupt", f"model: {what}")


@attrs.frozen
class _Row:
    seq: int
    timestamp: int
    write: AnyWrite


def expected_fork(log: list[Transaction], options: ForkOptions) -> list[Transaction]:
    """The destination log of forking a Session whose committed log is ``log``; raises the
    error a backend must raise (same code, same precedence) when the fork is rejected."""
    state = fold(log)
    snap = snapshot_of(state)
    high_water = state.next_seq
    values = {key[1:]: record for key, record in snap.values if key[0] is None}
    lists = {key[1:]: elements for key, elements in snap.lists if key[0] is None}
    parents = {e.id: e.parent_id for e in snap.entries}

    def lane(namespace: str) -> dict[str, Any]:
        return {k: r for (ns, k), r in values.items() if ns == namespace}

    tips, configs, states = lane("pi.branch.tip"), lane("pi.lane.config"), lane("pi.lane.state")

    def chain(start: str | None) -> list[str]:
        out: list[str] = []
        while start is not None:
            if start not in parents:
                raise _corrupt(f"ancestry names missing entry {start!r}")
            out.append(start)
            start = parents[start]
        return out

    if isinstance(options, BranchFork):
        name = options.branch
        if (name in configs) != (name in states):
            raise _corrupt("partial lane")
        if name not in tips:
            if name in configs:
                raise _corrupt("lane without tip")
            raise usage("unknown_branch", "model: no such branch")
        if name not in configs:
            raise usage("data_only_branch", "model: data-only branch")
        tip = decode_json(tips[name].value_json)
        if tip is not None and not isinstance(tip, str):
            raise _corrupt("tip is not an id")
        on_tip = chain(tip)
        target = tip
        if options.entry_id is not None:
            if options.entry_id not in parents:
                raise usage("unknown_entry", "model: no such entry")
            if options.entry_id not in on_tip:
                raise usage("entry_not_on_branch", "model: entry off the branch")
            target = options.entry_id
        if options.position == "before" and target is not None:
            target = parents[target]
        kept_entries = set(chain(target))
    else:
        kept_entries = set(parents)

    # Unknown reserved namespaces with current state fail the fork (FORK-8).
    for ns, _ in values:
        if classify(ns) is Disposition.UNKNOWN_RESERVED:
            raise usage("unknown_namespace", f"model: {ns}")
    for ns, _ in lists:
        if classify_list(ns) is Disposition.UNKNOWN_RESERVED:
            raise usage("unknown_namespace", f"model: {ns}")

    rows: list[_Row] = []
    for e in snap.entries:
        if e.id in kept_entries:
            rows.append(
                _Row(e.seq, e.timestamp, InsertEntry(e.id, e.parent_id, e.type, e.payload_json))
            )

    def put(ns: str, key: str, seq: int, value_json: bytes) -> None:
        from scopecheck.models.addresses import value

        rows.append(_Row(seq, 0, SetValue(value(ns, key), value_json)))

    if isinstance(options, BranchFork):
        name = options.branch
        put("pi.branch.tip", name, tips[name].seq, encode_json(target))
        put("pi.lane.config", name, configs[name].seq, configs[name].value_json)
        put("pi.lane.state", name, states[name].seq, encode_json(_IDLE))
    else:
        lanes = set(configs) | set(states)
        for name in sorted(lanes):
            if name not in configs or name not in states:
                raise _corrupt("partial lane")
            if name not in tips:
                raise _corrupt("lane without tip")
        for name, record in tips.items():
            put("pi.branch.tip", name, record.seq, record.value_json)
        for name in lanes:
            put("pi.lane.config", name, configs[name].seq, configs[name].value_json)
            put("pi.lane.state", name, states[name].seq, encode_json(_IDLE))
    for (ns, key), record in values.items():
        kind = classify(ns)
        if (
            kind is Disposition.COPY
            or (kind is Disposition.LABEL and key in kept_entries)
            or (kind is Disposition.APPLICATION and not isinstance(options, BranchFork))
        ):
            put(ns, key, record.seq, record.value_json)
    if not isinstance(options, BranchFork):
        from scopecheck.models.addresses import value_list

        for (ns, key), elements in lists.items():
            if classify_list(ns) is Disposition.APPLICATION:
                for element in elements:
                    write = AppendList(value_list(ns, key), element.value_json, element.tag)
                    rows.append(_Row(element.seq, 0, write))
    rows.sort(key=lambda row: row.seq)
    out = [Transaction(row.seq, row.timestamp, (row.write,)) for row in rows]
    # The reservation: an empty transaction at the high-water mark (see module docstring).
    out.append(Transaction(high_water, 0, ()))
    return out
