"""Writes: what a transaction is made of.  Frozen, validated when built (WRITE-*).

Every write class is generic in its scope ``Sc`` and *invariant* in it, so a list of writes has
one static scope and ``Storage.commit`` rejects a session write mixed with an ephemeral write at
type-check time (TYPE-3, 002 §6).  Entry, usage and retirement writes are always
``Write[SessionScope]``; retirement is session-scoped even though applying it deletes ephemeral
state (000 §2.3).  Two different ephemeral IDs share one static type and are caught at run time
(TX-3).
"""

from __future__ import annotations

import functools
from typing import Any, Generic, TypeAlias, TypeVar

import attrs

from scopecheck.models.addresses import ListAddress, ValueAddress
from scopecheck.models.errors import usage
from scopecheck.models.payload import JsonValue, decode_json, encode_json
from scopecheck.models.scope import SESSION, EphemeralScope, Scope, SessionScope

T = TypeVar("T")
Sc = TypeVar("Sc", bound=Scope)

#: Keys an entry record owns; an entry payload may not carry them (WRITE-4).
RESERVED_ENTRY_KEYS = frozenset({"kind", "id", "parentId", "type", "seq", "timestamp"})
#: Numeric fields of a usage row and of its cost object (STATS-1).
USAGE_TOKEN_FIELDS = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
USAGE_COST_FIELDS = ("input", "output", "cacheRead", "cacheWrite", "total")


class WriteBase(Generic[Sc]):
    """Base of every write; its scope parameter is invariant (TYPE-3)."""

    __slots__ = ()


def _check_id(what: str) -> Any:
    # A partial, not a closure: the check body then runs at validation time, where a mutation
    # test can reach it (a closure's body is fixed when the class body runs; docs/mutation.md).
    return functools.partial(_check_id_value, what)


def _check_id_value(what: str, _: object, __: attrs.Attribute[str], ident: object) -> None:
    if not isinstance(ident, str) or not ident or "\x00" in ident:
        raise usage(
            "invalid_payload", f"{what} must be a non-empty str without NUL", value=repr(ident)
        )
    try:
        ident.encode("utf-8")
    except UnicodeEncodeError:
        raise usage("invalid_payload", f"{what} is not well-formed Unicode") from None


def _check_tag(_: object, __: attrs.Attribute[str | None], tag: object) -> None:
    if tag is None:
        return
    if not isinstance(tag, str) or not tag:
        raise usage("invalid_payload", "a list tag must be a non-empty str (LIST-6)", value=tag)
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise usage("invalid_payload", "a list tag must be well-formed Unicode") from None


def _check_json_bytes(_: object, attribute: attrs.Attribute[bytes], data: object) -> None:
    if not isinstance(data, bytes):
        raise usage("invalid_payload", f"{attribute.name} must be JSON bytes")


@attrs.frozen(repr=False)
class SetValue(WriteBase[Sc]):
    """Set a scalar value (replacing any current one)."""

    address: ValueAddress[Any, Sc]
    value_json: bytes = attrs.field(validator=_check_json_bytes)

    @property
    def value(self) -> JsonValue:
        return decode_json(self.value_json)

    @property
    def scope(self) -> Scope:
        return self.address.scope

    def __repr__(self) -> str:
        return f"set_value({self.address!r}, {self.value!r})"


@attrs.frozen(repr=False)
class DeleteValue(WriteBase[Sc]):
    """Delete a scalar value; deleting an absent value is legal and still consumes a seq."""

    address: ValueAddress[Any, Sc]

    @property
    def scope(self) -> Scope:
        return self.address.scope

    def __repr__(self) -> str:
        return f"delete_value({self.address!r})"


@attrs.frozen(repr=False)
class AppendList(WriteBase[Sc]):
    """Append one element (with an optional non-empty tag) to a list."""

    address: ListAddress[Any, Sc]
    element_json: bytes = attrs.field(validator=_check_json_bytes)
    tag: str | None = attrs.field(default=None, validator=_check_tag)

    @property
    def element(self) -> JsonValue:
        return decode_json(self.element_json)

    @property
    def scope(self) -> Scope:
        return self.address.scope

    def __repr__(self) -> str:
        tail = "" if self.tag is None else f", tag={self.tag!r}"
        return f"append_list({self.address!r}, {self.element!r}{tail})"


@attrs.frozen(repr=False)
class DeleteList(WriteBase[Sc]):
    """Delete a whole list; later appends start a new list at the same address."""

    address: ListAddress[Any, Sc]

    @property
    def scope(self) -> Scope:
        return self.address.scope

    def __repr__(self) -> str:
        return f"delete_list({self.address!r})"


@attrs.frozen(repr=False)
class InsertEntry(WriteBase[SessionScope]):
    """Insert an immutable entry; ``parent_id`` must name an earlier entry (WRITE-6)."""

    id: str = attrs.field(validator=_check_id("entry id"))
    parent_id: str | None = attrs.field(
        validator=attrs.validators.optional(_check_id("entry parent id"))
    )
    type: str = attrs.field(validator=_check_id("entry type"))
    payload_json: bytes = attrs.field(validator=_check_json_bytes)

    @property
    def payload(self) -> dict[str, JsonValue]:
        result: dict[str, JsonValue] = decode_json(self.payload_json)
        return result

    @property
    def scope(self) -> Scope:
        return SESSION

    def __repr__(self) -> str:
        return (
            f"insert_entry({self.id!r}, parent_id={self.parent_id!r}, type={self.type!r}, "
            f"payload={self.payload!r})"
        )


@attrs.frozen(repr=False)
class InsertUsage(WriteBase[SessionScope]):
    """Insert a usage ledger row; ids share one space with entries (WRITE-5)."""

    id: str = attrs.field(validator=_check_id("usage id"))
    usage_json: bytes = attrs.field(validator=_check_json_bytes)
    entry_id: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_check_id("usage entry id"))
    )
    adjustment: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    details_json: bytes | None = None

    @property
    def usage(self) -> dict[str, JsonValue]:
        result: dict[str, JsonValue] = decode_json(self.usage_json)
        return result

    @property
    def details(self) -> JsonValue:
        return None if self.details_json is None else decode_json(self.details_json)

    @property
    def scope(self) -> Scope:
        return SESSION

    def __repr__(self) -> str:
        extra = ""
        if self.entry_id is not None:
            extra += f", entry_id={self.entry_id!r}"
        if self.adjustment:
            extra += ", adjustment=True"
        if self.details_json is not None:
            extra += f", details={self.details!r}"
        return f"insert_usage({self.id!r}, {self.usage!r}{extra})"


@attrs.frozen(repr=False)
class RetireScope(WriteBase[SessionScope]):
    """End the current lifetime of ``retired`` at this write's seq (RETIRE-1)."""

    retired: EphemeralScope = attrs.field(validator=attrs.validators.instance_of(EphemeralScope))

    @property
    def scope(self) -> Scope:
        return SESSION

    def __repr__(self) -> str:
        return f"retire_scope({self.retired!r})"


Write: TypeAlias = WriteBase[Sc]
"""Any write whose static scope is ``Sc``; entry/usage/retire writes are ``Write[SessionScope]``."""

AnyWrite: TypeAlias = (
    SetValue[Any]
    | DeleteValue[Any]
    | AppendList[Any]
    | DeleteList[Any]
    | InsertEntry
    | InsertUsage
    | RetireScope
)
WRITE_TYPES = (SetValue, DeleteValue, AppendList, DeleteList, InsertEntry, InsertUsage, RetireScope)


# -- constructors (the public spelling; 000 §2.4, BRIEF "The Python spelling") ---------------


def set_value(address: ValueAddress[T, Sc], value: T) -> SetValue[Sc]:
    """Set ``address`` to ``value``; the value is validated and frozen now (WRITE-3)."""
    return SetValue(address, encode_json(value))


def delete_value(address: ValueAddress[Any, Sc]) -> DeleteValue[Sc]:
    return DeleteValue(address)


def append_list(address: ListAddress[T, Sc], element: T, tag: str | None = None) -> AppendList[Sc]:
    """Append ``element``; ``tag``, when given, must be a non-empty str (LIST-6)."""
    return AppendList(address, encode_json(element, what="element"), tag)


def delete_list(address: ListAddress[Any, Sc]) -> DeleteList[Sc]:
    return DeleteList(address)


def insert_entry(
    id: str, parent_id: str | None, type: str, payload: dict[str, Any] | None = None
) -> InsertEntry:
    """An entry ``{id, parentId, type, **payload}``; payload keys may not shadow record keys."""
    payload = {} if payload is None else payload
    if not isinstance(payload, dict):
        raise usage("invalid_payload", "entry payload must be a dict")
    clash = RESERVED_ENTRY_KEYS.intersection(payload)
    if clash:
        raise usage(
            "invalid_payload",
            f"entry payload may not set {sorted(clash)} (WRITE-4)",
            keys=sorted(clash),
        )
    return InsertEntry(id, parent_id, type, encode_json(payload, what="payload"))


def _check_usage(usage_value: object) -> None:
    """The usage object upstream's reader needs (STATS-4): every token count and
    ``totalTokens`` an int, and a ``cost`` object with every field a number.  Without ``cost``
    upstream refuses the file; with a field missing its totals become NaN."""
    if not isinstance(usage_value, dict):
        raise usage("invalid_payload", "usage must be a dict of token counts and cost")
    for name in USAGE_TOKEN_FIELDS:
        if name not in usage_value:
            raise usage("invalid_payload", f"usage.{name} is missing (STATS-4)", field=name)
        count = usage_value[name]
        if isinstance(count, bool) or not isinstance(count, int):
            raise usage("invalid_payload", f"usage.{name} must be an int", value=repr(count))
    cost = usage_value.get("cost")
    if not isinstance(cost, dict):
        raise usage("invalid_payload", "usage.cost must be an object of numbers (STATS-4)")
    for name in USAGE_COST_FIELDS:
        if name not in cost:
            raise usage("invalid_payload", f"usage.cost.{name} is missing (STATS-4)", field=name)
        amount = cost[name]
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise usage("invalid_payload", f"usage.cost.{name} must be a number")


def usage_value(
    input: int = 0,
    output: int = 0,
    cache_read: int = 0,
    cache_write: int = 0,
    total_tokens: int | None = None,
    *,
    cost_input: float = 0,
    cost_output: float = 0,
    cost_cache_read: float = 0,
    cost_cache_write: float = 0,
    cost_total: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A complete usage object in upstream's shape, for :func:`insert_usage`: ``totalTokens``
    defaults to the sum of the counts and ``cost.total`` to the sum of the costs; ``extra``
    keys ride along (upstream keeps them)."""
    if total_tokens is None:
        total_tokens = input + output + cache_read + cache_write
    if cost_total is None:
        cost_total = cost_input + cost_output + cost_cache_read + cost_cache_write
    cost = {
        "input": cost_input,
        "output": cost_output,
        "cacheRead": cost_cache_read,
        "cacheWrite": cost_cache_write,
        "total": cost_total,
    }
    return {
        "input": input,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total_tokens,
        "cost": cost,
        **extra,
    }


def insert_usage(
    id: str,
    usage: dict[str, Any],
    entry_id: str | None = None,
    adjustment: bool = False,
    details: Any = None,
) -> InsertUsage:
    """A usage ledger row.  ``usage`` is upstream's usage object: every token count, and a
    ``cost`` object of numbers (STATS-1, STATS-4; :func:`usage_value` builds one)."""
    _check_usage(usage)
    details_json = None if details is None else encode_json(details, what="details")
    return InsertUsage(id, encode_json(usage, what="usage"), entry_id, adjustment, details_json)


def retire_scope(scope: EphemeralScope) -> RetireScope:
    """End ``scope``'s current lifetime; a session-scoped write (RETIRE-1, 000 §2.3)."""
    if not isinstance(scope, EphemeralScope):
        raise usage(
            "invalid_scope", f"only an ephemeral scope can be retired (got {scope!r}) (RETIRE-1)"
        )
    return RetireScope(scope)
