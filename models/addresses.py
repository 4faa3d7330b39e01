"""Value and list addresses.  The scope is part of an address's physical identity (ADDR-1).

``ValueAddress[T, Sc]`` and ``ListAddress[T, Sc]`` are *covariant* in the scope ``Sc`` (reading
is safe at any scope, so an address of a narrower scope is usable wherever ``Scope`` is) and
*invariant* in the element type ``T`` (002 §6, 000 §2.4; TYPE-2).  The phantom parameters have no
runtime cost; at run time only ``scope`` matters.
"""

from __future__ import annotations

import functools
from typing import Any, Generic, TypeVar, overload

import attrs

from scopecheck.models.errors import usage
from scopecheck.models.scope import SESSION, EphemeralScope, Scope, SessionScope, scope_id_of

T = TypeVar("T")
Sc_co = TypeVar("Sc_co", bound=Scope, covariant=True)


def _check_name(what: str) -> Any:
    # A partial, not a closure, so the check runs (and can be mutation-tested) at validation time.
    return functools.partial(_check_name_value, what)


def _check_name_value(what: str, _: object, __: attrs.Attribute[str], name: object) -> None:
    if not isinstance(name, str):
        raise usage(
            "invalid_address",
            f"{what} must be a str (got {type(name).__name__})",
            value=repr(name),
        )
    if "\x00" in name:
        raise usage("invalid_address", f"{what} must not contain NUL (ADDR-2)", value=name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise usage(
            "invalid_address", f"{what} is not well-formed Unicode (ADDR-2)", value=repr(name)
        ) from None


def _check_scope(_: object, __: attrs.Attribute[Any], scope: object) -> None:
    if not isinstance(scope, (SessionScope, EphemeralScope)):
        raise usage(
            "invalid_scope",
            f"scope must be SESSION or ephemeral_scope(id) (got {scope!r})",
        )


@attrs.frozen(repr=False)
class ValueAddress(Generic[T, Sc_co]):
    """A scalar value slot: ``(scope, namespace, key)``."""

    namespace: str = attrs.field(validator=_check_name("namespace"))
    key: str = attrs.field(validator=_check_name("key"))
    scope: Sc_co = attrs.field(validator=_check_scope)

    @property
    def scope_id(self) -> str | None:
        return scope_id_of(self.scope)

    def __repr__(self) -> str:
        tail = "" if self.scope == SESSION else f", {self.scope!r}"
        return f"value({self.namespace!r}, {self.key!r}{tail})"


@attrs.frozen(repr=False)
class ListAddress(Generic[T, Sc_co]):
    """An append-only list: ``(scope, namespace, key)``; elements are ordered by global seq."""

    namespace: str = attrs.field(validator=_check_name("namespace"))
    key: str = attrs.field(validator=_check_name("key"))
    scope: Sc_co = attrs.field(validator=_check_scope)

    @property
    def scope_id(self) -> str | None:
        return scope_id_of(self.scope)

    def __repr__(self) -> str:
        tail = "" if self.scope == SESSION else f", {self.scope!r}"
        return f"value_list({self.namespace!r}, {self.key!r}{tail})"


@overload
def value(namespace: str, key: str = "") -> ValueAddress[Any, SessionScope]: ...
@overload
def value(namespace: str, key: str, scope: SessionScope) -> ValueAddress[Any, SessionScope]: ...
@overload
def value(namespace: str, key: str, scope: EphemeralScope) -> ValueAddress[Any, EphemeralScope]: ...
def value(namespace: str, key: str = "", scope: Scope | None = None) -> ValueAddress[Any, Any]:
    """A value address; session-scoped unless ``scope`` is an ephemeral scope (TYPE-1)."""
    return ValueAddress(namespace, key, SESSION if scope is None else scope)


@overload
def value_list(namespace: str, key: str = "") -> ListAddress[Any, SessionScope]: ...
@overload
def value_list(namespace: str, key: str, scope: SessionScope) -> ListAddress[Any, SessionScope]: ...
@overload
def value_list(
    namespace: str, key: str, scope: EphemeralScope
) -> ListAddress[Any, EphemeralScope]: ...
def value_list(namespace: str, key: str = "", scope: Scope | None = None) -> ListAddress[Any, Any]:
    """A list address; session-scoped unless ``scope`` is an ephemeral scope (TYPE-1)."""
    return ListAddress(namespace, key, SESSION if scope is None else scope)
