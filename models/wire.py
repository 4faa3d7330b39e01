"""The JSON form of the contract's values, for a backend in another process or language.

This is the vocabulary of the backend process protocol (``docs/protocol.md``): writes,
addresses, records, snapshots and errors as plain JSON objects.  Every payload (a value, a list
element, an entry payload, a usage row, its details) travels as its canonical JSON *text* -- a
string -- so a backend can store and return it verbatim and two backends agree byte for byte
(``1.0`` is never ``1``), whatever the language's own JSON library does with numbers.

Decoding is strict: a value of the wrong shape is a :class:`WireError`, which the protocol
client reports as a protocol error (the backend speaks the protocol wrongly), never as a
storage mismatch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final

from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.errors import (
    CODES,
    ClosedError,
    CorruptError,
    ProtocolError,
    ScopecheckError,
    StorageIOError,
    UsageError,
)
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.payload import encode_json
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Snapshot,
    Stats,
    UsageRecord,
    UsageTotals,
    ValueRecord,
)
from scopecheck.models.scope import SESSION, Scope, ephemeral_scope
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)

#: The error codes whose class is not :class:`UsageError`.
_ERROR_CLASSES: dict[str, type[ScopecheckError]] = {
    "closed": UsageError,
    "corrupt": CorruptError,
    "unsupported_version": CorruptError,
    "io_error": StorageIOError,
    "locked": StorageIOError,
    "unusable": StorageIOError,
    "outcome_unknown": StorageIOError,
}


class WireError(ValueError):
    """A JSON value that is not what the protocol says it is (``where`` names the field)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class NotEncodable(WireError):
    """A record a Python backend returned that the protocol cannot carry -- a payload that is
    not bytes, a seq that is no integer, an entry that is a number: ``scopecheck serve``
    answers it as a ``corrupt`` error naming where (a store that reads back garbage has not
    kept what it acknowledged), never as the backend speaking the protocol wrongly."""


def _text(raw: bytes, what: str) -> str:
    """Payload bytes as JSON text: UTF-8 as it is, and a byte that is not UTF-8 as the lone
    surrogate ``U+DC80``..``U+DCFF`` that :func:`_bytes` turns back into that byte
    (``surrogateescape``), so a payload a reopened store gives back corrupt travels byte for
    byte and is judged for what it is (PROC-1)."""
    if not isinstance(raw, bytes):
        raise NotEncodable(what, f"expected bytes (canonical JSON), got {_what(raw)}")
    return raw.decode("utf-8", "surrogateescape")


_SURROGATES = re.compile("[\ud800-\udfff]+")


def _bytes(where: str, text: object) -> bytes:
    """JSON text back to payload bytes: the inverse of :func:`_text`; any other lone
    surrogate (``\\ud800`` from a backend in another language) as the three bytes
    ``surrogatepass`` gives it -- bytes no well-formed payload holds, compared as they are."""
    if not isinstance(text, str):
        raise WireError(where, f"expected JSON text (a string), got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    at = 0
    for lone in _SURROGATES.finditer(text):  # linear: one pass, plain runs encoded whole
        out += text[at : lone.start()].encode("utf-8")
        for ch in lone.group():
            code = ord(ch)
            out += bytes([code - 0xDC00]) if code >= 0xDC80 else ch.encode("utf-8", "surrogatepass")
        at = lone.end()
    out += text[at:].encode("utf-8")
    return bytes(out)


def _field(data: object, where: str, name: str, kinds: tuple[type, ...]) -> Any:
    if not isinstance(data, dict):
        raise WireError(where, f"expected an object, got {type(data).__name__}")
    if name not in data:
        raise WireError(where, f"missing {name!r}")
    found = data[name]
    if not isinstance(found, kinds) or (isinstance(found, bool) and bool not in kinds):
        names = "/".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise WireError(f"{where}.{name}", f"expected {names}, got {type(found).__name__}")
    return found


def _only(data: object, where: str, names: tuple[str, ...]) -> None:
    """Refuse a field the record does not have: a usage record carrying a ``timestamp`` is a
    backend storing something the contract has no place for (WRITE-9), not a detail to drop
    silently (PROC-1, PROC-2)."""
    if isinstance(data, dict):
        extra = sorted(set(data) - set(names))
        if extra:
            raise WireError(where, f"unexpected field(s) {extra} (the record has {list(names)})")


# -- writes and addresses ----------------------------------------------------------------------


def scope_to_json(scope: Scope | None) -> str | None:
    return None if scope is None or scope is SESSION else getattr(scope, "id", None)


def address_to_json(address: ValueAddress[Any, Any] | ListAddress[Any, Any]) -> dict[str, Any]:
    return {"scope": address.scope_id, "namespace": address.namespace, "key": address.key}


def write_to_json(item: object) -> dict[str, Any]:
    """The JSON form of one write; anything that is not a write is sent as ``not_a_write``,
    which the backend must refuse with ``invalid_transaction`` (TX-1)."""
    if isinstance(item, SetValue):
        value = _text(item.value_json, "value")
        return {"kind": "set", **address_to_json(item.address), "value": value}
    if isinstance(item, DeleteValue):
        return {"kind": "delete", **address_to_json(item.address)}
    if isinstance(item, AppendList):
        element = _text(item.element_json, "element")
        return {"kind": "append", **address_to_json(item.address), "element": element,
                "tag": item.tag}  # fmt: skip
    if isinstance(item, DeleteList):
        return {"kind": "drop", **address_to_json(item.address)}
    if isinstance(item, InsertEntry):
        return {"kind": "entry", "id": item.id, "parent_id": item.parent_id, "type": item.type,
                "payload": _text(item.payload_json, "payload")}  # fmt: skip
    if isinstance(item, InsertUsage):
        details = None if item.details_json is None else _text(item.details_json, "details")
        return {"kind": "usage", "id": item.id, "usage": _text(item.usage_json, "usage"),
                "entry_id": item.entry_id, "adjustment": item.adjustment,
                "details": details}  # fmt: skip
    if isinstance(item, RetireScope):
        return {"kind": "retire", "scope": item.retired.id}
    return {"kind": "not_a_write", "repr": repr(item)[:200]}


def scope_from_json(where: str, scope_id: object) -> Scope:
    if scope_id is None:
        return SESSION
    if not isinstance(scope_id, str):
        raise WireError(where, f"expected a scope id or null, got {type(scope_id).__name__}")
    return ephemeral_scope(scope_id)


def _address(data: object, where: str, make: Callable[..., Any]) -> Any:
    scope = scope_from_json(f"{where}.scope", _field(data, where, "scope", (str, type(None))))
    namespace = _field(data, where, "namespace", (str,))
    key = _field(data, where, "key", (str,))
    return make(namespace, key, scope)


def value_address_from_json(data: object, where: str = "address") -> ValueAddress[Any, Any]:
    found: ValueAddress[Any, Any] = _address(data, where, value)
    return found


def list_address_from_json(data: object, where: str = "address") -> ListAddress[Any, Any]:
    found: ListAddress[Any, Any] = _address(data, where, value_list)
    return found


def write_from_json(data: object, where: str = "write") -> object:
    """The write a JSON object names; a ``not_a_write`` item comes back as a plain string, so
    the storage refuses it exactly as it refuses any non-write (TX-1).  Payload checks run in
    the write constructors (``invalid_payload``); a malformed object is a :class:`WireError`."""
    kind = _field(data, where, "kind", (str,))

    def text(name: str) -> bytes:
        return _bytes(f"{where}.{name}", _field(data, where, name, (str,)))

    if kind == "set":
        return SetValue(value_address_from_json(data, where), text("value"))
    if kind == "delete":
        return DeleteValue(value_address_from_json(data, where))
    if kind == "append":
        tag = _field(data, where, "tag", (str, type(None)))
        return AppendList(list_address_from_json(data, where), text("element"), tag)
    if kind == "drop":
        return DeleteList(list_address_from_json(data, where))
    if kind == "entry":
        return InsertEntry(
            _field(data, where, "id", (str,)),
            _field(data, where, "parent_id", (str, type(None))),
            _field(data, where, "type", (str,)),
            text("payload"),
        )
    if kind == "usage":
        details = _field(data, where, "details", (str, type(None)))
        return InsertUsage(
            _field(data, where, "id", (str,)),
            text("usage"),
            _field(data, where, "entry_id", (str, type(None))),
            _field(data, where, "adjustment", (bool,)),
            None if details is None else _bytes(f"{where}.details", details),
        )
    if kind == "retire":
        return RetireScope(ephemeral_scope(_field(data, where, "scope", (str,))))
    if kind == "not_a_write":
        return str(_field(data, where, "repr", (str,)))
    raise WireError(f"{where}.kind", f"unknown write kind {kind!r}")


# -- records -----------------------------------------------------------------------------------


def _what(value: object) -> str:
    """A value a backend returned, in a few words: its type and the start of its repr."""
    try:
        shown = repr(value)
    except Exception:
        shown = "(its repr raised)"
    return f"{type(value).__name__} {shown[:80]}{'…' if len(shown) > 80 else ''}"


def _carried(where: str, value: object, kinds: tuple[type, ...]) -> Any:
    """``value`` when the protocol carries it as one of ``kinds`` (an int: not a bool, and
    within 64 bits), else :class:`NotEncodable`."""
    fits = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
    if fits and isinstance(value, int) and not isinstance(value, bool):
        fits = -(2**63) <= value < 2**64
    elif fits and isinstance(value, float):
        fits = math.isfinite(value)
    if not fits:
        names = "/".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise NotEncodable(where, f"expected {names}, got {_what(value)}")
    return value


def _record(where: str, record: object, kind: type) -> None:
    if not isinstance(record, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise NotEncodable(where, f"expected {article} {kind.__name__}, got {_what(record)}")


_NONE = type(None)


def committed_to_json(committed: Committed, where: str = "committed") -> dict[str, Any]:
    """One element of a commit's result: the write's seq and the commit's timestamp."""
    _record(where, committed, Committed)
    return {
        "seq": _carried(f"{where}.seq", committed.seq, (int,)),
        "timestamp": _carried(f"{where}.timestamp", committed.timestamp, (int,)),
    }


def value_record_to_json(record: ValueRecord, where: str = "value") -> dict[str, Any]:
    _record(where, record, ValueRecord)
    return {
        "seq": _carried(f"{where}.seq", record.seq, (int,)),
        "value": _text(record.value_json, f"{where}.value"),
    }


def element_to_json(element: ListElement, where: str = "element") -> dict[str, Any]:
    _record(where, element, ListElement)
    return {
        "seq": _carried(f"{where}.seq", element.seq, (int,)),
        "value": _text(element.value_json, f"{where}.value"),
        "tag": _carried(f"{where}.tag", element.tag, (str, _NONE)),
    }


def entry_to_json(record: EntryRecord, where: str = "entry") -> dict[str, Any]:
    _record(where, record, EntryRecord)
    return {
        "id": _carried(f"{where}.id", record.id, (str,)),
        "parent_id": _carried(f"{where}.parent_id", record.parent_id, (str, _NONE)),
        "type": _carried(f"{where}.type", record.type, (str,)),
        "payload": _text(record.payload_json, f"{where}.payload"),
        "seq": _carried(f"{where}.seq", record.seq, (int,)),
        "timestamp": _carried(f"{where}.timestamp", record.timestamp, (int,)),
    }


def usage_to_json(record: UsageRecord, where: str = "usage") -> dict[str, Any]:
    _record(where, record, UsageRecord)
    details = record.details_json
    return {
        "id": _carried(f"{where}.id", record.id, (str,)),
        "usage": _text(record.usage_json, f"{where}.usage"),
        "entry_id": _carried(f"{where}.entry_id", record.entry_id, (str, _NONE)),
        "adjustment": _carried(f"{where}.adjustment", record.adjustment, (bool,)),
        "details": None if details is None else _text(details, f"{where}.details"),
        "seq": _carried(f"{where}.seq", record.seq, (int,)),
    }


_TOTALS = ("input", "output", "cache_read", "cache_write", "total_tokens")
_COSTS = ("cost_input", "cost_output", "cost_cache_read", "cost_cache_write", "cost_total")


def stats_to_json(stats: Stats, where: str = "stats") -> dict[str, Any]:
    _record(where, stats, Stats)
    _record(f"{where}.usage", stats.usage, UsageTotals)
    usage = {
        name: _carried(
            f"{where}.usage.{name}",
            getattr(stats.usage, name),
            (int,) if name in _TOTALS else (int, float),
        )
        for name in (*_TOTALS, *_COSTS)
    }
    return {
        "message_count": _carried(f"{where}.message_count", stats.message_count, (int,)),
        "usage": usage,
    }


def _rows(where: str, rows: object) -> Any:
    """A snapshot's field as the sequence it must be."""
    return _carried(where, rows, (tuple, list))


def key_to_json(key: object, where: str) -> list[Any]:
    """A value's or list's ``(scope, namespace, key)``, as the first three items of its row."""
    if not isinstance(key, tuple) or len(key) != 3:
        raise NotEncodable(where, f"expected (scope, namespace, key), got {_what(key)}")
    return [
        _carried(f"{where}.scope", key[0], (str, _NONE)),
        _carried(f"{where}.namespace", key[1], (str,)),
        _carried(f"{where}.key", key[2], (str,)),
    ]


def _keyed_rows(where: str, rows: object) -> list[tuple[list[Any], Any]]:
    found = []
    for i, row in enumerate(_rows(where, rows)):
        if not isinstance(row, tuple) or len(row) != 2:
            raise NotEncodable(f"{where}[{i}]", f"expected (key, record), got {_what(row)}")
        found.append((key_to_json(row[0], f"{where}[{i}]"), row[1]))
    return found


def snapshot_to_json(snapshot: Snapshot, where: str = "snapshot") -> dict[str, Any]:
    """A snapshot's JSON form; a record of another type than the contract's anywhere in it
    is a :class:`NotEncodable` naming where."""
    _record(where, snapshot, Snapshot)
    entries = _rows(f"{where}.entries", snapshot.entries)
    usage = _rows(f"{where}.usage", snapshot.usage)
    lists = []
    for i, (key, elements) in enumerate(_keyed_rows(f"{where}.lists", snapshot.lists)):
        at = f"{where}.lists[{i}]"
        lists.append(
            [*key, [element_to_json(e, f"{at}[{j}]") for j, e in enumerate(_rows(at, elements))]]
        )
    return {
        "entries": [entry_to_json(e, f"{where}.entries[{i}]") for i, e in enumerate(entries)],
        "usage": [usage_to_json(u, f"{where}.usage[{i}]") for i, u in enumerate(usage)],
        "values": [
            [*key, value_record_to_json(r, f"{where}.values[{i}]")]
            for i, (key, r) in enumerate(_keyed_rows(f"{where}.values", snapshot.values))
        ],
        "lists": lists,
        "stats": stats_to_json(snapshot.stats, f"{where}.stats"),
    }


def _int(data: object, where: str, name: str) -> int:
    found: int = _field(data, where, name, (int,))
    return found


#: The fields of each record on the wire, in the order the encoders above write them (the
#: protocol's JSON Schema lists the same, PROC-5).
VALUE_FIELDS: Final = ("seq", "value")
ELEMENT_FIELDS: Final = ("seq", "value", "tag")
ENTRY_FIELDS: Final = ("id", "parent_id", "type", "payload", "seq", "timestamp")
USAGE_FIELDS: Final = ("id", "usage", "entry_id", "adjustment", "details", "seq")
STATS_FIELDS: Final = ("message_count", "usage")
SNAPSHOT_FIELDS: Final = ("entries", "usage", "values", "lists", "stats")
COMMITTED_FIELDS: Final = ("seq", "timestamp")


def committed_from_json(data: object, where: str = "committed") -> tuple[int, int]:
    """One element of a commit's result: the write's ``(seq, timestamp)``."""
    _only(data, where, COMMITTED_FIELDS)
    return _int(data, where, "seq"), _int(data, where, "timestamp")


def value_record_from_json(data: object, where: str = "value") -> ValueRecord:
    _only(data, where, VALUE_FIELDS)
    return ValueRecord(
        _int(data, where, "seq"), _bytes(f"{where}.value", _field(data, where, "value", (str,)))
    )


def element_from_json(data: object, where: str = "element") -> ListElement:
    _only(data, where, ELEMENT_FIELDS)
    return ListElement(
        _int(data, where, "seq"),
        _bytes(f"{where}.value", _field(data, where, "value", (str,))),
        _field(data, where, "tag", (str, type(None))),
    )


def entry_from_json(data: object, where: str = "entry") -> EntryRecord:
    _only(data, where, ENTRY_FIELDS)
    return EntryRecord(
        _field(data, where, "id", (str,)),
        _field(data, where, "parent_id", (str, type(None))),
        _field(data, where, "type", (str,)),
        _bytes(f"{where}.payload", _field(data, where, "payload", (str,))),
        _int(data, where, "seq"),
        _int(data, where, "timestamp"),
    )


def usage_from_json(data: object, where: str = "usage") -> UsageRecord:
    _only(data, where, USAGE_FIELDS)
    details = _field(data, where, "details", (str, type(None)))
    return UsageRecord(
        _field(data, where, "id", (str,)),
        _bytes(f"{where}.usage", _field(data, where, "usage", (str,))),
        _field(data, where, "entry_id", (str, type(None))),
        _field(data, where, "adjustment", (bool,)),
        None if details is None else _bytes(f"{where}.details", details),
        _int(data, where, "seq"),
    )


def stats_from_json(data: object, where: str = "stats") -> Stats:
    _only(data, where, STATS_FIELDS)
    usage = _field(data, where, "usage", (dict,))
    _only(usage, f"{where}.usage", (*_TOTALS, *_COSTS))
    sums: dict[str, Any] = {name: _field(usage, f"{where}.usage", name, (int,)) for name in _TOTALS}
    for name in _COSTS:
        sums[name] = float(_field(usage, f"{where}.usage", name, (int, float)))
    return Stats(_int(data, where, "message_count"), UsageTotals(**sums))


def _keyed(row: object, where: str) -> tuple[tuple[str | None, str, str], Any]:
    if not isinstance(row, list) or len(row) != 4:
        raise WireError(where, "expected [scope, namespace, key, record]")
    scope, namespace, key, record = row
    if not (scope is None or isinstance(scope, str)) or not isinstance(namespace, str):
        raise WireError(where, "scope must be a string or null and namespace a string")
    if not isinstance(key, str):
        raise WireError(where, "key must be a string")
    return (scope, namespace, key), record


def snapshot_from_json(data: object, where: str = "snapshot") -> Snapshot:
    _only(data, where, SNAPSHOT_FIELDS)
    entries = _field(data, where, "entries", (list,))
    usage = _field(data, where, "usage", (list,))
    values = []
    for i, row in enumerate(_field(data, where, "values", (list,))):
        key, record = _keyed(row, f"{where}.values[{i}]")
        values.append((key, value_record_from_json(record, f"{where}.values[{i}]")))
    lists = []
    for i, row in enumerate(_field(data, where, "lists", (list,))):
        key, elements = _keyed(row, f"{where}.lists[{i}]")
        if not isinstance(elements, list):
            raise WireError(f"{where}.lists[{i}]", "expected a list of elements")
        lists.append((key, tuple(element_from_json(e, f"{where}.lists[{i}]") for e in elements)))
    return Snapshot(
        tuple(entry_from_json(e, f"{where}.entries[{i}]") for i, e in enumerate(entries)),
        tuple(usage_from_json(u, f"{where}.usage[{i}]") for i, u in enumerate(usage)),
        tuple(values),
        tuple(lists),
        stats_from_json(_field(data, where, "stats", (dict,)), f"{where}.stats"),
    )


# -- errors ------------------------------------------------------------------------------------


def error_to_json(error: ScopecheckError) -> dict[str, Any]:
    details = {k: v for k, v in error.details.items() if _plain(v)}
    return {"code": error.code, "message": error.message, "details": details}


def _plain(found: object) -> bool:
    try:
        encode_json(found, what="error detail")
    except UsageError:
        return False
    return True


def error_from_json(data: object, where: str = "error") -> ScopecheckError:
    """The error a backend reported; an unknown code is a :class:`WireError` (the codes are
    the contract's, ERR-1)."""
    code = _field(data, where, "code", (str,))
    if code not in CODES:
        raise WireError(f"{where}.code", f"unknown error code {code!r} (not one of the contract's)")
    message = _field(data, where, "message", (str,))
    details = (data.get("details") if isinstance(data, dict) else None) or {}
    if not isinstance(details, dict):
        raise WireError(f"{where}.details", "expected an object")
    if code == "closed":
        return ClosedError(message, **details)
    if code == "protocol_error":
        return ProtocolError(message, **details)
    return _ERROR_CLASSES.get(code, UsageError)(code, message, **details)


# -- fork options ------------------------------------------------------------------------------


def fork_options_to_json(options: ForkOptions) -> dict[str, Any]:
    if isinstance(options, BranchFork):
        return {"scope": "branch", "branch": options.branch, "entry_id": options.entry_id,
                "position": options.position, "id": options.id}  # fmt: skip
    return {"scope": "tree", "id": options.id}


def fork_options_from_json(data: object, where: str = "options") -> ForkOptions:
    scope = _field(data, where, "scope", (str,))
    dest = _field(data, where, "id", (str, type(None)))
    if scope == "tree":
        return TreeFork(id=dest)
    if scope == "branch":
        return BranchFork(
            _field(data, where, "branch", (str,)),
            entry_id=_field(data, where, "entry_id", (str, type(None))),
            position=_field(data, where, "position", (str,)),
            id=dest,
        )
    raise WireError(f"{where}.scope", f"expected 'branch' or 'tree', got {scope!r}")
