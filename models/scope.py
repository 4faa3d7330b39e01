"""Scopes: the session scope and reusable, validated ephemeral scope IDs.

A scope ID is a reusable logical lifetime name, not a one-use token (SCOPE-1, 000 §2.1).  Scopes
are frozen values compared by ID; object identity means nothing (SCOPE-3).
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias
from urllib.parse import quote

import attrs

from models.errors import usage

#: Longest allowed ``encodeURIComponent`` form of a scope ID (000 §2.1, SCOPE-2).
MAX_ENCODED_SCOPE_ID: Final = 180

# encodeURIComponent leaves A-Z a-z 0-9 and - _ . ! ~ * ' ( ) alone; quote() always keeps
# A-Z a-z 0-9 _ . - ~, so the rest are named here.
_URI_COMPONENT_SAFE: Final = "!*'()"


def encode_uri_component(text: str) -> str:
    """JavaScript's ``encodeURIComponent`` for well-formed text (UTF-8, upper-case hex).

    Raises ``UnicodeEncodeError`` on lone surrogates, as the JavaScript function raises URIError.
    """
    return quote(text.encode("utf-8"), safe=_URI_COMPONENT_SAFE)


@attrs.frozen(repr=False)
class SessionScope:
    """The main scope of a Session: durable history, entries, usage and retirement records."""

    kind: Literal["session"] = attrs.field(default="session", init=False)

    def __repr__(self) -> str:
        return "SESSION"


def _check_scope_id(_: object, __: attrs.Attribute[str], scope_id: object) -> None:
    if not isinstance(scope_id, str):
        raise usage(
            "invalid_scope",
            f"scope ID must be a str (got {type(scope_id).__name__})",
            value=repr(scope_id),
        )
    if not scope_id:
        raise usage("invalid_scope", "scope ID must not be empty (SCOPE-2)", value=scope_id)
    try:
        encoded = encode_uri_component(scope_id)
    except UnicodeEncodeError:
        raise usage(
            "invalid_scope",
            "scope ID is not well-formed Unicode (lone surrogate) (SCOPE-2)",
            value=repr(scope_id),
        ) from None
    if len(encoded) > MAX_ENCODED_SCOPE_ID:
        raise usage(
            "invalid_scope",
            f"scope ID encodes to {len(encoded)} characters; at most {MAX_ENCODED_SCOPE_ID} "
            "are allowed (SCOPE-2)",
            value=scope_id[:40] + "…",
        )


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
