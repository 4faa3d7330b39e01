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
}


class WireError(ValueError):
    """A JSON value that is not what the protocol says it is (``where`` names the field)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def _text(raw: bytes) -> str:
    return raw.decode("utf-8")


def _bytes(where: str, text: object) -> bytes:
    if not isinstance(text, str):
        raise WireError(where, f"expected JSON text (a string), got {type(text).__name__}")
    return text.encode("utf-8")


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
        return {"kind": "set", **address_to_json(item.address), "value": _text(item.value_json)}
    if isinstance(item, DeleteValue):
        return {"kind": "delete", **address_to_json(item.address)}
    if isinstance(item, AppendList):
        element = _text(item.element_json)
        return {"kind": "append", **address_to_json(item.address), "element": element,
                "tag": item.tag}  # fmt: skip
    if isinstance(item, DeleteList):
        return {"kind": "drop", **address_to_json(item.address)}
    if isinstance(item, InsertEntry):
        return {"kind": "entry", "id": item.id, "parent_id": item.parent_id, "type": item.type,
                "payload": _text(item.payload_json)}  # fmt: skip
    if isinstance(item, InsertUsage):
        details = None if item.details_json is None else _text(item.details_json)
        return {"kind": "usage", "id": item.id, "usage": _text(item.usage_json),
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


def committed_to_json(committed: Committed) -> dict[str, Any]:
    """One element of a commit's result: the write's seq and the commit's timestamp."""
    return {"seq": committed.seq, "timestamp": committed.timestamp}


def value_record_to_json(record: ValueRecord) -> dict[str, Any]:
    return {"seq": record.seq, "value": _text(record.value_json)}


def element_to_json(element: ListElement) -> dict[str, Any]:
    return {"seq": element.seq, "value": _text(element.value_json), "tag": element.tag}


def entry_to_json(record: EntryRecord) -> dict[str, Any]:
    return {"id": record.id, "parent_id": record.parent_id, "type": record.type,
            "payload": _text(record.payload_json), "seq": record.seq,
            "timestamp": record.timestamp}  # fmt: skip


def usage_to_json(record: UsageRecord) -> dict[str, Any]:
    details = None if record.details_json is None else _text(record.details_json)
    return {"id": record.id, "usage": _text(record.usage_json), "entry_id": record.entry_id,
            "adjustment": record.adjustment, "details": details, "seq": record.seq}  # fmt: skip


_TOTALS = ("input", "output", "cache_read", "cache_write", "total_tokens")
_COSTS = ("cost_input", "cost_output", "cost_cache_read", "cost_cache_write", "cost_total")


def stats_to_json(stats: Stats) -> dict[str, Any]:
    usage = {name: getattr(stats.usage, name) for name in (*_TOTALS, *_COSTS)}
    return {"message_count": stats.message_count, "usage": usage}


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "entries": [entry_to_json(e) for e in snapshot.entries],
        "usage": [usage_to_json(u) for u in snapshot.usage],
        "values": [[*key, value_record_to_json(r)] for key, r in snapshot.values],
        "lists": [
            [*key, [element_to_json(e) for e in elements]] for key, elements in snapshot.lists
        ],
        "stats": stats_to_json(snapshot.stats),
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
