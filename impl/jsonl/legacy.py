"""Legacy session files (the coding agent's v1/v2/v3 JSONL) opened as format-4 Sessions.

REFERENCE §8 and 000 §6.4; the rules are ``spec/rules/legacy.toml`` (LEGACY-n).  The importer is
read-only: :func:`import_legacy` turns the complete lines of a legacy file into the format-4
*records* (the exact dicts a format-4 main log would hold, one per line) plus the header and the
high-water mark.  The storage replays those records like any format-4 load, and the first
non-empty commit publishes them as a real format-4 file (:func:`upgrade_bytes`, LEGACY-9).

The model has its own, separately written importer (``models/legacy.py``); the two must agree
byte for byte on every record, which the machine and the focused tests check.

What the importer does, in order (LEGACY-2..LEGACY-8):

1. v1 (no ``version``) → v2: every record gets a fresh legacy id and ``parentId`` = the previous
   record's (a linear chain); a compaction's ``firstKeptEntryIndex`` (an index into the whole
   file, header = 0) becomes ``firstKeptEntryId`` when it names an earlier record.
2. v2 → v3: a message whose ``role`` is ``hookMessage`` gets role ``custom``.
3. Retained records (``message``, ``custom``, ``custom_message``, ``branch_summary``,
   ``compaction``) become entries with minted ids and seqs 1..n in file order; discarded records
   (``model_change``, ``thinking_level_change``, ``active_tools_change``, ``session_info``,
   ``label``) are folded: any reference to them resolves to their nearest retained ancestor.
4. Value writes follow: ``pi.session.name``, ``pi.entry.label/<id>``, ``pi.branch.tip/main`` and,
   when the final record's ancestry holds a model and a thinking level,
   ``pi.lane.config/main`` plus an idle ``pi.lane.state/main``.
5. One usage row (``adjustment: true``, ``details: {source: "v3-import"}``) carries the sum of
   every legacy usage object, when there is at least one.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
import orjson

from scopecheck.impl.jsonl.codec import FORMAT_VERSION, STORAGE_VERSION
from scopecheck.models.errors import CorruptError
from scopecheck.models.payload import canonical_bytes

#: Mints the format-4 id of the ``ordinal``-th imported record (0-based: retained entries in
#: file order, then the usage row) whose legacy timestamp is ``timestamp_ms`` (LEGACY-3).
LegacyIds = Callable[[int, int], str]

RETAINED: Final = frozenset({"message", "custom", "custom_message", "branch_summary", "compaction"})
DISCARDED: Final = frozenset(
    {"model_change", "thinking_level_change", "active_tools_change", "session_info", "label"}
)
THINKING_LEVELS: Final = frozenset({"off", "minimal", "low", "medium", "high", "xhigh", "max"})
USAGE_TOKENS: Final = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
USAGE_COST: Final = ("input", "output", "cacheRead", "cacheWrite", "total")
IMPORT_DETAILS: Final = {"source": "v3-import"}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)


def uuid7_ids(timestamp_ms: int, ordinal: int) -> str:
    """The default id minting: a UUIDv7 from the legacy timestamp and random bits, as the
    TypeScript importer does.  Not stable across opens (001 §1.3), which is why an open legacy
    Session's ids only become durable at its first commit (LEGACY-9)."""
    del ordinal
    ms = max(0, timestamp_ms) & ((1 << 48) - 1)
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) & 0xFFF) << 64 | (0b10 << 62)
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@attrs.frozen
class LegacyImport:
    """What a legacy file imports as (see the module docstring)."""

    path: str
    version: int
    header: dict[str, Any]
    records: list[dict[str, Any]]
    next_seq: int
    retained: int
    discarded: int
    torn: bool

    @property
    def entries(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "entry"]

    @property
    def values(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "value"]

    @property
    def usage_row(self) -> dict[str, Any] | None:
        rows = [r for r in self.records if r["kind"] == "usage"]
        return rows[0] if rows else None


def is_legacy_header(line: bytes) -> bool:
    """Whether a file's first line is a legacy session header (``type: "session"``)."""
    if not line.startswith(b"{"):
        return False
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return type(obj) is dict and obj.get("type") == "session"


class _Bad(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def iso_ms(value: object, line: int) -> int:
    """An ISO-8601 timestamp in Unix ms; a naive one is read as UTC (LEGACY-1)."""
    if type(value) is not str:
        raise _Bad(line, "timestamp must be an ISO-8601 string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(line, f"timestamp {value!r} is not ISO-8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MS


def usage_of(rec: dict[str, Any]) -> Any:
    """The usage object a legacy record carries (an assistant or tool-result message, a
    compaction or a branch summary), else ``None``; the importer and the fork of a legacy file
    sum them alike (LEGACY-3)."""
    kind = rec["type"]
    if kind == "message":
        message = rec.get("message")
        if type(message) is dict and message.get("role") in ("assistant", "toolResult"):
            return message.get("usage")
        return None
    if kind in ("compaction", "branch_summary"):
        return rec.get("usage")
    return None


def add_usage(total: dict[str, Any], usage_value: Any) -> None:
    """Sum one legacy usage object: int token counts, int/float costs; anything else counts 0."""
    for name in USAGE_TOKENS:
        count = usage_value.get(name, 0)
        if type(count) is int:
            total[name] += count
    cost = usage_value.get("cost")
    if type(cost) is dict:
        for name in USAGE_COST:
            amount = cost.get(name, 0)
            if type(amount) is int or type(amount) is float:
                total["cost"][name] += amount


def import_legacy(
    path: str,
    lines: Sequence[bytes],
    session_id: str,
    ids: LegacyIds = uuid7_ids,
    *,
    torn: bool = False,
) -> LegacyImport:
    """Import the complete lines of a legacy file (header first); raises ``CorruptError`` naming
    the 1-based line of the first problem (LEGACY-1).  ``torn`` only records that the caller
    dropped an unterminated final line (LEGACY-1)."""
    try:
        return _import(path, lines, session_id, ids, torn)
    except _Bad as exc:
        raise CorruptError(
            "corrupt",
            f"{path}:{exc.line}: legacy session file: {exc}; the file was left untouched — "
            "repair or remove the damaged line",
            file=path,
            line=exc.line,
        ) from None


def _import(
    path: str, lines: Sequence[bytes], session_id: str, ids: LegacyIds, torn: bool
) -> LegacyImport:
    if not lines:
        raise _Bad(1, "missing header")
    try:
        head = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        raise _Bad(1, "header is not JSON") from None
    if type(head) is not dict or head.get("type") != "session":
        raise _Bad(1, 'header has no type "session"')
    version = head.get("version", 1)
    if version not in (1, 2, 3) or type(version) is not int:
        raise _Bad(1, f"unsupported legacy version {version!r} (expected 1, 2 or 3)")
    if head.get("id") != session_id:
        raise _Bad(1, f"header names session {head.get('id')!r}, expected {session_id!r}")
    cwd = head.get("cwd")
    if type(cwd) is not str:
        raise _Bad(1, "header cwd must be a string")
    created_at = iso_ms(head.get("timestamp"), 1)

    # Parse, migrate (v1 → v2 → v3) and index every record.
    records: list[dict[str, Any]] = []
    line_of: dict[str, int] = {}
    by_id: dict[str, dict[str, Any]] = {}
    previous: str | None = None
    for index in range(1, len(lines)):
        number = index + 1
        try:
            rec = orjson.loads(lines[index])
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
                if type(kept) is int and 1 <= kept < index:
                    rec["firstKeptEntryId"] = f"v1:{kept + 1}"
        legacy_id, parent = rec.get("id"), rec.get("parentId")
        if type(legacy_id) is not str:
            raise _Bad(number, "record id must be a string")
        if legacy_id in by_id:
            raise _Bad(number, f"duplicate record id {legacy_id!r}")
        if parent is not None and (type(parent) is not str or parent not in by_id):
            raise _Bad(number, f"parentId {parent!r} names no earlier record")
        if version <= 2 and kind == "message":
            message = rec.get("message")
            if type(message) is dict and message.get("role") == "hookMessage":
                message["role"] = "custom"
        rec["timestamp"] = iso_ms(rec.get("timestamp"), number)
        by_id[legacy_id] = rec
        line_of[legacy_id] = number
        records.append(rec)
        previous = legacy_id

    # Mint ids for retained records, in file order (LEGACY-3).
    minted: dict[str, str] = {}
    ordinal = 0
    for rec in records:
        if rec["type"] in RETAINED:
            minted[rec["id"]] = ids(rec["timestamp"], ordinal)
            ordinal += 1
    resolved: dict[str, str | None] = {}

    def resolve(legacy_id: str | None) -> str | None:
        """The minted id of ``legacy_id`` or of its nearest retained ancestor (LEGACY-4)."""
        walked: list[str] = []
        found: str | None = None
        current = legacy_id
        while current is not None:
            if current in minted:
                found = minted[current]
                break
            if current in resolved:
                found = resolved[current]
                break
            walked.append(current)
            current = by_id[current]["parentId"]
        for item in walked:
            resolved[item] = found
        return found

    def known(rec: dict[str, Any], field: str) -> str:
        target = rec.get(field)
        if type(target) is not str or target not in by_id:
            raise _Bad(line_of[rec["id"]], f"{field} {target!r} names no record")
        return target

    def from_id(rec: dict[str, Any]) -> str | None:
        if rec.get("fromId") == "root":
            return None
        return resolve(known(rec, "fromId"))

    def tail(rec: dict[str, Any]) -> list[Any]:
        first = rec.get("firstKeptEntryId")
        if first is None:
            return []
        chain: list[dict[str, Any]] = []
        current = rec["parentId"]
        while current is not None:
            chain.append(by_id[current])
            if current == first:
                chain.reverse()
                return [message for item in chain for message in project(item, from_id)]
            current = by_id[current]["parentId"]
        raise _Bad(line_of[rec["id"]], f"firstKeptEntryId {first!r} is not on its parent branch")

    out: list[dict[str, Any]] = []
    seq = 0
    for rec in records:
        kind = rec["type"]
        if kind not in RETAINED:
            continue
        seq += 1
        entry = legacy_entry(rec, minted[rec["id"]], resolve(rec["parentId"]), seq, from_id, tail)
        out.append(entry)
    retained = seq

    def set_value(namespace: str, key: str, value: Any) -> None:
        nonlocal seq
        seq += 1
        out.append(
            {
                "kind": "value",
                "op": "set",
                "seq": seq,
                "namespace": namespace,
                "key": key,
                "value": value,
            }
        )

    # Synthesised values (LEGACY-5, LEGACY-6).
    infos = [rec for rec in records if rec["type"] == "session_info"]
    if infos:
        name = infos[-1].get("name")
        if type(name) is str and name:
            set_value("pi.session.name", "", name)
    labels: dict[str, str] = {}
    for rec in records:
        if rec["type"] != "label":
            continue
        target = resolve(known(rec, "targetId"))
        if target is None:
            continue
        label = rec.get("label")
        labels.pop(target, None)
        if type(label) is str and label:
            labels[target] = label
    for target, label in labels.items():
        set_value("pi.entry.label", target, label)
    final = records[-1]["id"] if records else None
    set_value("pi.branch.tip", "main", resolve(final))
    config = _lane_config(by_id, final)
    if config is not None:
        set_value("pi.lane.config", "main", config)
        set_value(
            "pi.lane.state",
            "main",
            {"currentOperationId": None, "lastOperationId": None, "inbox": []},
        )

    # The import usage row (LEGACY-7).
    total: dict[str, Any] = {name: 0 for name in USAGE_TOKENS}
    total["cost"] = {name: 0 for name in USAGE_COST}
    seen = False
    for rec in records:
        usage_value = usage_of(rec)
        if type(usage_value) is dict:
            seen = True
            add_usage(total, usage_value)
    if seen:
        seq += 1
        out.append(
            {
                "kind": "usage",
                "id": ids(created_at, ordinal),
                "usage": total,
                "adjustment": True,
                "details": dict(IMPORT_DETAILS),
                "seq": seq,
            }
        )
    header = {
        "v": FORMAT_VERSION,
        "kind": "header",
        "id": session_id,
        "storageVersion": STORAGE_VERSION,
        "createdAt": created_at,
        "cwd": cwd,
    }
    return LegacyImport(
        path, version, header, out, seq + 1, retained, len(records) - retained, torn
    )


def _lane_config(by_id: dict[str, dict[str, Any]], final: str | None) -> dict[str, Any] | None:
    """The lane configuration the final record's ancestry selects, or ``None`` when it lacks a
    valid model or thinking level (LEGACY-6).  The nearest record of each kind decides, even if
    it is invalid."""
    model: dict[str, str] | None = None
    level: str | None = None
    tools: list[str] | None = None
    seen: set[str] = set()
    current = final
    while current is not None and len(seen) < 3:
        rec = by_id[current]
        kind = rec["type"]
        if kind == "model_change" and kind not in seen:
            seen.add(kind)
            provider, model_id = rec.get("provider"), rec.get("modelId")
            if type(provider) is str and provider and type(model_id) is str and model_id:
                model = {"provider": provider, "modelId": model_id}
        elif kind == "thinking_level_change" and kind not in seen:
            seen.add(kind)
            if rec.get("thinkingLevel") in THINKING_LEVELS:
                level = rec["thinkingLevel"]
        elif kind == "active_tools_change" and kind not in seen:
            seen.add(kind)
            names = rec.get("activeToolNames")
            if type(names) is list and all(type(n) is str for n in names):
                tools = list(names)
        current = rec["parentId"]
    if model is None or level is None:
        return None
    return {"model": model, "thinkingLevel": level, "activeToolNames": tools or []}


FromId = Callable[[dict[str, Any]], str | None]


def custom_message(rec: dict[str, Any]) -> dict[str, Any]:
    """A ``custom_message`` record as the ``custom``-role message it becomes (LEGACY-3)."""
    message: dict[str, Any] = {
        "role": "custom",
        "customType": rec.get("customType"),
        "content": rec.get("content"),
    }
    if "details" in rec:
        message["details"] = rec["details"]
    message["display"] = rec.get("display", False)
    message["timestamp"] = rec["timestamp"]
    return message


def project(rec: dict[str, Any], from_id: FromId) -> list[Any]:
    """A record as context messages (what a compaction's retained tail holds, LEGACY-8)."""
    kind = rec["type"]
    if kind == "message":
        return [rec.get("message")]
    if kind == "custom_message":
        return [custom_message(rec)]
    if kind == "branch_summary":
        if not rec.get("summary"):
            return []
        return [
            {
                "role": "branchSummary",
                "summary": rec["summary"],
                "fromId": from_id(rec),
                "timestamp": rec["timestamp"],
            }
        ]
    if kind == "compaction":
        return [
            {
                "role": "compactionSummary",
                "summary": rec.get("summary"),
                "tokensBefore": rec.get("tokensBefore"),
                "timestamp": rec["timestamp"],
            }
        ]
    return []


def legacy_entry(
    rec: dict[str, Any],
    entry_id: str,
    parent_id: str | None,
    seq: int,
    from_id: FromId,
    tail: Callable[[dict[str, Any]], list[Any]],
) -> dict[str, Any]:
    """A retained record as its format-4 entry (LEGACY-3); the in-memory importer and the
    fork's disk normaliser (:mod:`scopecheck.impl.jsonl.legacy_fork`) resolve ids and tails their
    own way and share this mapping, so their lines stay byte-identical."""
    kind = rec["type"]
    entry: dict[str, Any] = {"kind": "entry", "id": entry_id, "parentId": parent_id}
    if kind == "message":
        entry["type"] = "message"
        entry["message"] = rec.get("message")
    elif kind == "custom_message":
        entry["type"] = "message"
        entry["message"] = custom_message(rec)
    elif kind == "custom":
        entry["type"] = "custom"
        entry["customType"] = rec.get("customType")
        if "data" in rec:
            entry["data"] = rec["data"]
    else:
        entry["type"] = kind
        if kind == "branch_summary":
            entry["fromId"] = from_id(rec)
            entry["summary"] = rec.get("summary")
        else:
            entry["summary"] = rec.get("summary")
            entry["retainedTail"] = tail(rec)
            entry["tokensBefore"] = rec.get("tokensBefore")
        for optional in ("details", "usage"):
            if optional in rec:
                entry[optional] = rec[optional]
        entry["fromHook"] = rec.get("fromHook", False)
    entry["seq"] = seq
    entry["timestamp"] = rec["timestamp"]
    return entry


def upgrade_bytes(imported: LegacyImport) -> bytes:
    """The format-4 file an import publishes at its first commit: the header with ``nextSeq``,
    then one line per imported record in seq order (LEGACY-9)."""
    header = dict(imported.header)
    header["nextSeq"] = imported.next_seq
    dumps = canonical_bytes
    return b"\n".join([dumps(header), *(dumps(r) for r in imported.records)]) + b"\n"
