"""The model of legacy import: a pure function from a legacy file's lines to its committed log.

Written apart from ``impl/jsonl/legacy.py`` on purpose (the oracle must not share the backend's
code): here the file becomes a tree of nodes, each retained node is turned into an
:class:`~scopecheck.models.writes.InsertEntry` through the public constructors, and the synthesised
values and the import usage row are ordinary :func:`~scopecheck.models.writes.set_value` /
:func:`~scopecheck.models.writes.insert_usage` writes.  The result is the initial log of the
Session, one committed write per transaction (entries keep their own legacy timestamps), so the
reference model can start a Session from a legacy file (LEGACY-10).  Rules:
``spec/rules/legacy.toml``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import orjson

from scopecheck.models.addresses import value
from scopecheck.models.errors import CorruptError, usage
from scopecheck.models.records import Committed
from scopecheck.models.writes import AnyWrite, insert_entry, insert_usage, set_value

_KEEP = ("message", "custom", "custom_message", "branch_summary", "compaction")
_DROP = ("model_change", "thinking_level_change", "active_tools_change", "session_info", "label")
_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


class _Node:
    __slots__ = ("key", "kind", "line", "parent", "raw", "when")

    def __init__(self, line: int, key: str, parent: str | None, raw: dict[str, Any]) -> None:
        self.line, self.key, self.parent, self.raw = line, key, parent, raw
        self.kind: str = raw["type"]
        self.when = 0


def _fail(line: int, why: str) -> CorruptError:
    return CorruptError("corrupt", f"legacy line {line}: {why}", line=line)


def _when(text: object, line: int) -> int:
    if not isinstance(text, str):
        raise _fail(line, "bad timestamp")
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _fail(line, "bad timestamp") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def import_log(
    lines: Sequence[bytes], session_id: str, mint: Callable[[int, int], str]
) -> list[Committed]:
    """The committed writes a legacy file imports as, in seq order starting at 1."""
    head = orjson.loads(lines[0])
    if not isinstance(head, dict) or head.get("type") != "session":
        raise _fail(1, "not a legacy header")
    if head.get("id") != session_id:
        raise _fail(1, "session id mismatch")
    version = head.get("version") or 1
    created = _when(head.get("timestamp"), 1)
    nodes: list[_Node] = []
    index: dict[str, _Node] = {}
    key: Any
    parent: Any
    for n, raw_line in enumerate(lines[1:], start=2):
        raw = orjson.loads(raw_line)
        if not isinstance(raw, dict) or raw.get("type") not in _KEEP + _DROP:
            raise _fail(n, "unsupported record")
        if version == 1:
            key, parent = f"#{n}", (nodes[-1].key if nodes else None)
            if raw["type"] == "compaction":
                pos = raw.pop("firstKeptEntryIndex", None)
                # file index (header = 0) → line = index + 1; only earlier records count
                if isinstance(pos, int) and not isinstance(pos, bool) and 0 < pos < n - 1:
                    raw["firstKeptEntryId"] = f"#{pos + 1}"
        else:
            key, parent = raw.get("id"), raw.get("parentId")
            if not isinstance(key, str) or key in index:
                raise _fail(n, "bad or duplicate id")
            if parent is not None and parent not in index:
                raise _fail(n, "unknown parent")
        if version < 3 and raw["type"] == "message":  # v2 → v3 (v1 goes through v2)
            msg = raw.get("message")
            if isinstance(msg, dict) and msg.get("role") == "hookMessage":
                msg["role"] = "custom"
        node = _Node(n, key, parent, raw)
        node.when = _when(raw.get("timestamp"), n)
        nodes.append(node)
        index[key] = node

    kept = [node for node in nodes if node.kind in _KEEP]
    new_id = {node.key: mint(node.when, i) for i, node in enumerate(kept)}

    def nearest(key: str | None) -> str | None:
        while key is not None and key not in new_id:
            key = index[key].parent
        return None if key is None else new_id[key]

    def target(node: _Node, field: str) -> str:
        ref = node.raw.get(field)
        if ref not in index:
            raise _fail(node.line, f"{field} unknown")
        assert isinstance(ref, str)
        return ref

    def summary_from(node: _Node) -> str | None:
        return None if node.raw.get("fromId") == "root" else nearest(target(node, "fromId"))

    def as_custom(node: _Node) -> dict[str, Any]:
        r = node.raw
        out = {"role": "custom", "customType": r.get("customType"), "content": r.get("content")}
        if "details" in r:
            out["details"] = r["details"]
        return {**out, "display": r.get("display", False), "timestamp": node.when}

    def context(node: _Node) -> list[Any]:
        r = node.raw
        if node.kind == "message":
            return [r.get("message")]
        if node.kind == "custom_message":
            return [as_custom(node)]
        if node.kind == "compaction":
            return [
                {
                    "role": "compactionSummary",
                    "summary": r.get("summary"),
                    "tokensBefore": r.get("tokensBefore"),
                    "timestamp": node.when,
                }
            ]
        if node.kind == "branch_summary" and r.get("summary"):
            return [
                {
                    "role": "branchSummary",
                    "summary": r["summary"],
                    "fromId": summary_from(node),
                    "timestamp": node.when,
                }
            ]
        return []

    def ancestry(key: str | None) -> list[_Node]:
        path = []
        while key is not None:
            path.append(index[key])
            key = index[key].parent
        return path

    def retained_tail(node: _Node) -> list[Any]:
        first = node.raw.get("firstKeptEntryId")
        if first is None:
            return []
        path = ancestry(node.parent)
        cut = [i for i, anc in enumerate(path) if anc.key == first]
        if not cut:
            raise _fail(node.line, "firstKeptEntryId off branch")
        return [m for anc in reversed(path[: cut[0] + 1]) for m in context(anc)]

    writes: list[tuple[int, AnyWrite]] = []
    for node in kept:
        r = node.raw
        payload: dict[str, Any]
        kind = node.kind
        if kind == "message":
            kind, payload = "message", {"message": r.get("message")}
        elif kind == "custom_message":
            kind, payload = "message", {"message": as_custom(node)}
        elif kind == "custom":
            payload = {"customType": r.get("customType")}
            if "data" in r:
                payload["data"] = r["data"]
        else:
            if kind == "branch_summary":
                payload = {"fromId": summary_from(node), "summary": r.get("summary")}
            else:
                payload = {
                    "summary": r.get("summary"),
                    "retainedTail": retained_tail(node),
                    "tokensBefore": r.get("tokensBefore"),
                }
            payload.update({k: r[k] for k in ("details", "usage") if k in r})
            payload["fromHook"] = r.get("fromHook", False)
        writes.append(
            (node.when, insert_entry(new_id[node.key], nearest(node.parent), kind, payload))
        )

    infos = [node for node in nodes if node.kind == "session_info"]
    if infos and isinstance(infos[-1].raw.get("name"), str) and infos[-1].raw["name"]:
        writes.append((created, set_value(value("pi.session.name", ""), infos[-1].raw["name"])))
    labels: dict[str, str] = {}
    for node in nodes:
        if node.kind == "label":
            entry = nearest(target(node, "targetId"))
            if entry is not None:
                labels.pop(entry, None)
                text = node.raw.get("label")
                if isinstance(text, str) and text:
                    labels[entry] = text
    writes.extend((created, set_value(value("pi.entry.label", k), v)) for k, v in labels.items())
    last = nodes[-1].key if nodes else None
    writes.append((created, set_value(value("pi.branch.tip", "main"), nearest(last))))
    lane = _lane(ancestry(last))
    if lane is not None:
        writes.append((created, set_value(value("pi.lane.config", "main"), lane)))
        idle: dict[str, Any] = {"currentOperationId": None, "lastOperationId": None, "inbox": []}
        writes.append((created, set_value(value("pi.lane.state", "main"), idle)))

    sums = _usage_sum(nodes)
    if sums is not None:
        row = insert_usage(
            mint(created, len(kept)), sums, adjustment=True, details={"source": "v3-import"}
        )
        writes.append((created, row))
    return [Committed(seq, when, write) for seq, (when, write) in enumerate(writes, start=1)]


def _lane(path: list[_Node]) -> dict[str, Any] | None:
    """The nearest model, thinking level and tool list on the final record's ancestry."""
    first: dict[str, _Node] = {}
    for node in path:
        first.setdefault(node.kind, node)
    m, t, a = (
        first.get("model_change"),
        first.get("thinking_level_change"),
        first.get("active_tools_change"),
    )
    if m is None or t is None:
        return None
    provider, model_id = m.raw.get("provider"), m.raw.get("modelId")
    level = t.raw.get("thinkingLevel")
    if not (isinstance(provider, str) and provider and isinstance(model_id, str) and model_id):
        return None
    if level not in _LEVELS:
        return None
    tools: list[str] = []
    if a is not None:
        names = a.raw.get("activeToolNames")
        if isinstance(names, list) and all(isinstance(x, str) for x in names):
            tools = list(names)
    return {
        "model": {"provider": provider, "modelId": model_id},
        "thinkingLevel": level,
        "activeToolNames": tools,
    }


def _usage_sum(nodes: list[_Node]) -> dict[str, Any] | None:
    found = []
    for node in nodes:
        r = node.raw
        if node.kind == "message":
            msg = r.get("message")
            u = (
                msg.get("usage")
                if isinstance(msg, dict) and msg.get("role") in ("assistant", "toolResult")
                else None
            )
        elif node.kind in ("compaction", "branch_summary"):
            u = r.get("usage")
        else:
            u = None
        if isinstance(u, dict):
            found.append(u)
    if not found:
        return None
    tokens = dict.fromkeys(("input", "output", "cacheRead", "cacheWrite", "totalTokens"), 0)
    money: dict[str, int | float] = dict.fromkeys(
        ("input", "output", "cacheRead", "cacheWrite", "total"), 0
    )
    for u in found:
        for k in tokens:
            v = u.get(k, 0)
            if type(v) is int:
                tokens[k] += v
        cost = u.get("cost")
        if isinstance(cost, dict):
            for k in money:
                v = cost.get(k, 0)
                if type(v) in (int, float):
                    money[k] += v
    return {**tokens, "cost": money}


@attrs.frozen
class LegacySource:
    """A Session that is still a legacy file on disk (LEGACY-13): its complete lines, the id
    mint its repository uses, and the length of its imported log — the Session stays legacy
    while its log has exactly that many transactions (any non-empty commit upgrades it,
    LEGACY-9)."""

    lines: tuple[bytes, ...]
    mint: Callable[[int, int], str]
    imported: int


def import_transactions(
    lines: Sequence[bytes], session_id: str, mint: Callable[[int, int], str]
) -> list[Any]:
    """The imported log as reference-model transactions, one write each."""
    from scopecheck.models.fold import Transaction

    return [
        Transaction(c.seq, c.timestamp, (c.write,)) for c in import_log(lines, session_id, mint)
    ]


def legacy_fork_log(source: LegacySource, session_id: str, is_open: bool) -> list[Any]:
    """The log a fork of a not-yet-upgraded legacy Session reads (001 §1.3).

    Open: rejected — its ids were minted for that open only and the fork may not upgrade the
    file itself.  Closed: a fresh reparse of the file with the repository's mint (so with
    random ids an id from an earlier open names nothing and rejects as ``unknown_entry``)."""
    if is_open:
        raise usage(
            "legacy_not_upgraded",
            f"model: {session_id!r} is an open legacy Session not yet upgraded",
        )
    return import_transactions(source.lines, session_id, source.mint)
