r"""How a value a backend handed back is shown in a report: bounded, escaped, and never raising.

What a reopened crash image gives back is exactly what crash exploration exists to find wrong:
a payload that is not JSON, a record of the wrong type, tens of megabytes where a few bytes were
written, bytes that are not UTF-8, a string holding a lone surrogate.  A report, a reproducer
file and the ``--json`` verdict carry it as text, so everything here takes any object and gives
what orjson writes and a terminal prints: strings that are UTF-8 (an invalid byte shown as
``\xff``, a lone surrogate as ``\ud800``), integers within 64 bits, string keys, bounded
nesting -- each text cut to a bound, with its full length said (``… (31,457,280 bytes)``).

Nothing here compares: the checks judge the values as they came (a corrupt value is a state no
crash point allows, CRASH-FS-2); this only says what they were.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from scopecheck.models.payload import encode_json
from scopecheck.models.records import (
    EntryRecord,
    ListElement,
    Snapshot,
    Stats,
    UsageRecord,
    ValueRecord,
)

#: Characters of one text, payload or repr shown.
LIMIT = 400
#: Characters of one id, key or namespace shown.
IDS = 100
#: Records of one kind shown (entries, usage rows, values, lists), and list elements checked.
ITEMS = 50
#: Nesting :func:`jsonable` keeps (orjson writes at most 254 levels).
DEPTH = 100

_INT64 = (-(2**63), 2**64 - 1)

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = LIMIT // 4
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 8


def _cut(shown: str, length: int, unit: str, limit: int) -> str:
    return shown if length <= limit else f"{shown}… ({length:,} {unit})"


def text(value: str, limit: int = LIMIT) -> str:
    """``value`` cut to ``limit`` characters (its length said), lone surrogates as ``\\udXXX``."""
    head = value[:limit]
    try:
        head.encode("utf-8")
    except UnicodeEncodeError:
        head = head.encode("utf-8", "backslashreplace").decode("utf-8")
    return _cut(head, len(value), "characters", limit)


def escaped(value: str) -> str:
    """``value`` with each lone surrogate as ``\\udXXX`` and nothing cut: text a report
    prints and writes as UTF-8 (an error message a backend raised with one in it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def data(raw: bytes | bytearray | memoryview, limit: int = LIMIT) -> str:
    """Bytes as text: UTF-8 as it reads, any other byte as ``\\xNN``; cut to ``limit`` bytes
    (the length said)."""
    head = bytes(raw[:limit]).decode("utf-8", "backslashreplace")
    return _cut(head, len(raw), "bytes", limit)


def thing(value: object, limit: int = LIMIT) -> str:
    """Any object in words: its type and a bounded repr (``int 5``, ``dict {'a': 1}``); a repr
    that raises is said to."""
    kind = type(value).__name__
    if isinstance(value, str):  # repr escapes lone surrogates
        return f"str {_cut(repr(value[:limit]), len(value), 'characters', limit)}"
    if isinstance(value, (bytes, bytearray)):
        return f"{kind} {data(value, limit)}"
    try:
        shown = _REPR.repr(value)
    except Exception as exc:  # a backend's own __repr__: whatever it does, we say it failed
        return f"{kind} (its repr raised {type(exc).__name__})"
    return f"{kind} {text(shown, limit)}"


def brief(value: object, limit: int = 4 * LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters (its length said): a mismatch message
    quoting what a backend returned stays readable when that is megabytes."""
    try:
        shown = repr(value)
    except Exception as exc:
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return text(shown, limit)


def _payload(raw: object, limit: int) -> tuple[bool | None, Any]:
    """``(canonical, shown)``: whether ``raw`` is canonical JSON (``None``: too long to say
    cheaply) and how it is shown (:func:`payload`)."""
    if not isinstance(raw, bytes):
        return False, f"<not bytes: {thing(raw, limit)}>"
    if len(raw) > limit:
        return None, f"<{len(raw):,} bytes: {data(raw, limit)}>"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return False, f"<not JSON ({exc}): {data(raw, limit)}>"
    try:
        canonical = encode_json(value) == raw
    except Exception:  # not storable at all (a number JavaScript cannot hold, …)
        canonical = False
    return (True, value) if canonical else (False, f"<not canonical JSON: {data(raw, limit)}>")


def payload(raw: object, limit: int = LIMIT) -> Any:
    """A payload (a value, an element, an entry payload, a usage row) for a report: the JSON
    value it holds when it is canonical JSON of at most ``limit`` bytes -- the only kind a
    write ever stores (WRITE-3) -- else a string that says what it is instead (``<not JSON
    (…): …>``, ``<31,457,280 bytes: "xxx…>``, ``<not bytes: int 5>``)."""
    return _payload(raw, limit)[1]


def _odd(raw: object, obj: bool = False) -> str | None:
    """How a payload is shown when it is known not to be canonical JSON (with ``obj``: a JSON
    object, as an entry's payload and a usage row are), else ``None``."""
    canonical, shown = _payload(raw, LIMIT)
    if canonical is False:
        return str(shown)
    if obj and canonical and not isinstance(shown, dict):
        return f"<not a JSON object: {thing(shown)}>"
    return None


def _name(value: object) -> str:
    return text(value, IDS) if isinstance(value, str) else f"<{thing(value, IDS)}>"


def _records(field: object) -> Sequence[Any] | str:
    """A snapshot field as a sequence, or why it is not one."""
    if isinstance(field, (tuple, list)):
        return field
    return f"<not a sequence: {thing(field)}>"


def _bounded(found: list[Any], total: int) -> list[Any]:
    if total > len(found):
        found.append(f"… {total - len(found):,} more")
    return found


def _record(item: object, kind: type, payloads: tuple[str, ...]) -> Any:
    """An entry or usage row: its id, or ``{"id": …, field: what it holds}`` when a payload
    is not canonical JSON; a thing of another type said to be one."""
    if not isinstance(item, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        return f"<not {article} {kind.__name__}: {thing(item)}>"
    odd = {}
    for field in payloads:
        raw = getattr(item, field, None)
        shown = None if raw is None and field == "details_json" else _odd(raw, obj=True)
        if shown is not None:
            odd[field.removesuffix("_json")] = shown
    ident = _name(getattr(item, "id", None))
    return {"id": ident, **odd} if odd else ident


def _ids(field: object, kind: type, payloads: tuple[str, ...]) -> Any:
    items = _records(field)
    if isinstance(items, str):
        return items
    return _bounded([_record(x, kind, payloads) for x in items[:ITEMS]], len(items))


def _key(key: object) -> str:
    if isinstance(key, tuple) and len(key) == 3:
        scope, namespace, name = key
        return f"{'-' if scope is None else _name(scope)}/{_name(namespace)}/{_name(name)}"
    return f"<not a (scope, namespace, key): {thing(key, IDS)}>"


def _keyed(field: object, show: Callable[[object], Any]) -> Any:
    """``values`` or ``lists`` as ``{"scope/namespace/key": shown}``; two rows that show the
    same key (a key given twice, or two keys alike once cut) are both kept, the later ones
    numbered."""
    rows = _records(field)
    if isinstance(rows, str):
        return rows
    found: dict[str, Any] = {}
    for row in rows[:ITEMS]:
        if isinstance(row, tuple) and len(row) == 2:
            key, shown = _key(row[0]), show(row[1])
        else:
            key, shown = "<not a (key, record) row>", thing(row)
        name, copy = key, 1
        while name in found:
            copy += 1
            name = f"{key} ({copy})"
        found[name] = shown
    if len(rows) > ITEMS:
        found["…"] = f"{len(rows) - ITEMS:,} more"
    return found


def _value(record: object) -> Any:
    if not isinstance(record, ValueRecord):
        return f"<not a ValueRecord: {thing(record)}>"
    return payload(record.value_json)


def _elements(elements: object) -> Any:
    """A list's length, or, when some of its (first :data:`ITEMS`) elements are not list
    elements holding canonical JSON, its length and those elements."""
    items = _records(elements)
    if isinstance(items, str):
        return items
    odd = []
    for index, element in enumerate(items[:ITEMS]):
        if not isinstance(element, ListElement):
            odd.append(f"[{index}] <not a ListElement: {thing(element)}>")
            continue
        shown = _odd(element.value_json)
        if shown is not None:
            odd.append(f"[{index}] {shown}")
    return {"elements": len(items), "odd": odd[:3]} if odd else len(items)


def _seqs(snapshot: Snapshot) -> list[int]:
    found: list[int] = []
    groups: list[object] = [snapshot.entries, snapshot.usage]
    rows = snapshot.values if isinstance(snapshot.values, (tuple, list)) else ()
    groups.append([r[1] for r in rows if isinstance(r, tuple) and len(r) == 2])
    lists = snapshot.lists if isinstance(snapshot.lists, (tuple, list)) else ()
    for row in lists:
        if isinstance(row, tuple) and len(row) == 2 and isinstance(row[1], (tuple, list)):
            groups.append(row[1])
    for group in groups:
        for item in group if isinstance(group, (tuple, list)) else ():
            seq = getattr(item, "seq", None)
            if type(seq) is int and _INT64[0] <= seq <= _INT64[1]:
                found.append(seq)
    return found


def describe(snapshot: object) -> Any:
    """A compact JSON view of a Session state for reports (``None``: no Session): the ids of
    its entries and usage rows, its values, its lists' lengths and the highest seq it holds --
    each bounded (:data:`ITEMS` records, :data:`LIMIT` characters), and whatever is not what
    the contract's records hold (a payload that is not canonical JSON, a record of another
    type, a field that is no sequence) said in words where it is."""
    if snapshot is None:
        return None
    if not isinstance(snapshot, Snapshot):
        return f"<not a Snapshot: {thing(snapshot)}>"
    found = {
        "entries": _ids(snapshot.entries, EntryRecord, ("payload_json",)),
        "usage": _ids(snapshot.usage, UsageRecord, ("usage_json", "details_json")),
        "values": _keyed(snapshot.values, _value),
        "lists": _keyed(snapshot.lists, _elements),
        "next_seq_hint": max([0, *_seqs(snapshot)]),
    }
    if not isinstance(snapshot.stats, Stats):  # shown only when it is not one
        found["stats"] = f"<not a Stats: {thing(snapshot.stats)}>"
    return found


def jsonable(value: object, depth: int = 0) -> Any:
    """``value`` as orjson can write it: strings with lone surrogates escaped, integers beyond
    64 bits and any non-JSON object in words (:func:`thing`), keys as strings, nesting cut at
    :data:`DEPTH` -- the last guard before a record or a verdict is written."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        return value if _INT64[0] <= value <= _INT64[1] else thing(value)
    if isinstance(value, str):
        return escaped(value)
    if depth >= DEPTH:
        return f"<nested deeper than {DEPTH} levels: {thing(value)}>"
    if isinstance(value, dict):
        return {
            (jsonable(k) if isinstance(k, str) else thing(k, IDS)): jsonable(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [jsonable(item, depth + 1) for item in value]
    return thing(value)


def dumps(value: object, option: int | None = None) -> bytes:
    """``orjson.dumps(value)``, or, when orjson cannot write something in it, of
    :func:`jsonable` ``(value)``: a report with an odd string in it is still written."""
    try:
        return orjson.dumps(value, option=option)
    except TypeError:
        return orjson.dumps(jsonable(value), option=option)
