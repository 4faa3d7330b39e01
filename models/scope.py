"""Scopes: the session scope and reusable, validated ephemeral scope IDs.

A scope ID is a reusable logical lifetime name, not a one-use token (SCOPE-1, 000 §2.1).  Scopes
are frozen values compared by ID; object identity means nothing (SCOPE-3).
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias
from urllib.parse import unquote

import attrs

from scopecheck.models.errors import usage

#: Longest allowed ``encodeURIComponent`` form of a scope ID (000 §2.1, SCOPE-2).
MAX_ENCODED_SCOPE_ID: Final = 180

#: What ``encodeURIComponent`` leaves alone (ECMA-262 "uriUnreserved").
_UNRESERVED: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'()"

#: What an encoded form may contain: the unreserved characters and ``%`` for the escapes.
_ENCODED_ALPHABET: Final = frozenset(_UNRESERVED + "%")


def well_formed(text: str) -> bool:
    """True when ``text`` has no lone surrogate, so it encodes to UTF-8 (SCOPE-2)."""
    return not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def _encode(text: str) -> str:
    # ECMA-262's Encode, one character at a time: as fast as urllib's quote() on short IDs, and
    # CrossHair can follow the per-character branch symbolically (it cannot through quote()).
    out: list[str] = []
    for ch in text:
        if ch in _UNRESERVED:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8"))
    return "".join(out)


def encode_uri_component(text: str) -> str:
    """JavaScript's ``encodeURIComponent`` for well-formed text (UTF-8, upper-case hex).

    Raises ``UnicodeEncodeError`` on lone surrogates, as the JavaScript function raises URIError.
    The encoded form is what reaches file names (JSONL-2), so the contract states what makes that
    safe: only unreserved ASCII and ``%`` escapes (so never ``/``, ``\\`` or NUL), and it
    decodes back to ``text``, so the encoding is injective (SCOPE-4, CHECK-1).  CrossHair checks
    it with no size bound because every decoder calls it; its search starts at short inputs, and
    a wrong ``safe`` set or a dropped escape shows on one or two characters.

    raises: UnicodeEncodeError
    post: set(__return__) <= _ENCODED_ALPHABET
    post: decode_uri_component(__return__) == text
    """
    return _encode(text)


def decode_uri_component(encoded: str) -> str | None:
    """The text whose :func:`encode_uri_component` form is exactly ``encoded``, else ``None``.

    Only the canonical spelling decodes: ``a%2fb`` (lower-case hex), ``%41`` (an escaped letter),
    a bad escape, or bytes that are not UTF-8 of well-formed text all give ``None``, so two file
    names never decode to the same ID (SCOPE-4, CHECK-1).  Never raises.

    post: __return__ is None or _encode(__return__) == encoded
    """
    try:
        text = unquote(encoded, errors="strict") if "%" in encoded else encoded
        if _encode(text) != encoded:
            return None
    except UnicodeError:
        return None
    return text


@attrs.frozen(repr=False)
class SessionScope:
    """The main scope of a Session: durable history, entries, usage and retirement records."""

    kind: Literal["session"] = attrs.field(default="session", init=False)

    def __repr__(self) -> str:
        return "SESSION"


def scope_id_problem(scope_id: str) -> str | None:
    """Why ``scope_id`` is not a valid ephemeral scope ID, or ``None`` when it is (SCOPE-2).

    A pure function so CrossHair can check it against the rule's own wording (CHECK-1): valid
    exactly when non-empty, well-formed and at most 180 characters once encoded.  Never raises.
    Within the small bound CrossHair explores, every non-empty well-formed ID fits, so the
    contract says "accepts exactly those"; the 180 limit is a counting fact CrossHair cannot
    reach with short inputs, so it is left to tests/test_contract_types.py rather than written
    as a condition that could never fail here.

    pre: len(scope_id) <= 3
    post: (__return__ is None) == (scope_id != "" and well_formed(scope_id))
    """
    if not scope_id:
        return "scope ID must not be empty (SCOPE-2)"
    try:
        encoded = encode_uri_component(scope_id)
    except UnicodeEncodeError:
        return "scope ID is not well-formed Unicode (lone surrogate) (SCOPE-2)"
    if len(encoded) > MAX_ENCODED_SCOPE_ID:
        return (
            f"scope ID encodes to {len(encoded)} characters; at most {MAX_ENCODED_SCOPE_ID} "
            "are allowed (SCOPE-2)"
        )
    return None


def _check_scope_id(_: object, __: attrs.Attribute[str], scope_id: object) -> None:
    if not isinstance(scope_id, str):
        raise usage(
            "invalid_scope",
            f"scope ID must be a str (got {type(scope_id).__name__})",
            value=repr(scope_id),
        )
    problem = scope_id_problem(scope_id)
    if problem is not None:
        value = scope_id if len(scope_id) <= 40 else scope_id[:40] + "…"
        raise usage("invalid_scope", problem, value=repr(value))


@attrs.frozen(repr=False)
class EphemeralScope:
    """An operation-lifetime scope named by ``id``; ended only by a committed retirement."""

    id: str = attrs.field(validator=_check_scope_id)
    kind: Literal["ephemeral"] = attrs.field(default="ephemeral", init=False)

    @property
    def encoded_id(self) -> str:
        """The ``encodeURIComponent`` form used in sidecar file names (JSONL-2)."""
        return encode_uri_component(self.id)

    def __repr__(self) -> str:
        return f"ephemeral_scope({self.id!r})"


Scope: TypeAlias = SessionScope | EphemeralScope

#: The one session scope value.  ``SessionScope()`` compares equal to it.
SESSION: Final = SessionScope()


def ephemeral_scope(scope_id: str) -> EphemeralScope:
    """Name an ephemeral scope; raises ``UsageError(invalid_scope)`` for a bad ID (SCOPE-2)."""
    return EphemeralScope(scope_id)


def scope_id_of(scope: Scope) -> str | None:
    """The scope ID of ``scope``, or ``None`` for the session scope."""
    return scope.id if isinstance(scope, EphemeralScope) else None


def scope_from_id(scope_id: str | None) -> Scope:
    """Inverse of :func:`scope_id_of`."""
    return SESSION if scope_id is None else EphemeralScope(scope_id)
