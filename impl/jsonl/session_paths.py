"""Where a Session's files live, and the path-containment rules (JSONL-1, JSONL-2, JSONL-14).

``<root>/<encodeURIComponent(session id)>.jsonl`` is the main log, ``<main>.scopes/`` its sidecar
directory and ``<main>.scopes/scope-<encodeURIComponent(scope id)>.scope`` one sidecar.  Temp
files are ``<path>.tmp``.  ``encodeURIComponent`` turns ``/``, ``\\``, ``%`` and NUL into
``%XX``; what it leaves (letters, digits, ``-_.!~*'()``) can never form a separator, and the
fixed ``scope-`` prefix and ``.jsonl`` suffix mean ``.``/``..`` never become a path segment.  Each
path is additionally checked to be a direct child of its directory before it is used.
"""

from __future__ import annotations

import posixpath
from typing import Final

from scopecheck.models.errors import usage
from scopecheck.models.scope import (
    MAX_ENCODED_SCOPE_ID,
    decode_uri_component,
    encode_uri_component,
    scope_id_problem,  # noqa: F401 - used by the CrossHair contracts in docstrings
)

MAIN_SUFFIX: Final = ".jsonl"
SCOPES_SUFFIX: Final = ".scopes"
SIDECAR_PREFIX: Final = "scope-"
SIDECAR_SUFFIX: Final = ".scope"
TEMP_SUFFIX: Final = ".tmp"
#: Longest encoded session id: keeps ``<id>.jsonl.scopes`` and ``<id>.jsonl.tmp`` under the
#: common 255-byte file-name limit.
MAX_ENCODED_SESSION_ID: Final = 200


def child_path(directory: str, name: str) -> str:
    """``directory/name``, refusing any ``name`` that is not one segment inside it."""
    path = posixpath.join(directory, name)
    if "/" in name or name in (".", "..") or posixpath.dirname(path) != directory.rstrip("/"):
        raise usage("invalid_session_id", f"name {name!r} would leave {directory!r}")
    return path


def encode_session_id(session_id: str) -> str:
    """The file-name stem of a Session; raises ``invalid_session_id`` if it is too long."""
    try:
        encoded = encode_uri_component(session_id)
    except UnicodeEncodeError:
        raise usage("invalid_session_id", "session id is not well-formed Unicode") from None
    if len(encoded) > MAX_ENCODED_SESSION_ID:
        raise usage(
            "invalid_session_id",
            f"session id encodes to {len(encoded)} characters; at most "
            f"{MAX_ENCODED_SESSION_ID} fit in a file name (JSONL-14)",
        )
    return encoded


def decode_main_name(name: str) -> str | None:
    """The session id a directory entry names, or ``None`` if it is not a main log name.

    Only the canonical spelling counts: ``a%2fb.jsonl`` (lower-case hex) is a foreign file, and
    so is a name whose escapes are not UTF-8 (CHECK-1).  Never raises.

    post: __return__ is None or encode_uri_component(__return__) + MAIN_SUFFIX == name
    post: __return__ != ""
    """
    if not name.endswith(MAIN_SUFFIX):
        return None
    stem = name[: -len(MAIN_SUFFIX)]
    return decode_uri_component(stem) if stem else None


def main_path(root: str, session_id: str) -> str:
    return child_path(root, encode_session_id(session_id) + MAIN_SUFFIX)


def scopes_dir(main: str) -> str:
    """``${mainPath}.scopes`` (000 §6.1)."""
    return main + SCOPES_SUFFIX


def sidecar_stem(scope_id: str) -> str:
    """``scope-<encoded id>.scope`` without the length check (for contracts and the inspector)."""
    return SIDECAR_PREFIX + encode_uri_component(scope_id) + SIDECAR_SUFFIX


def sidecar_name(scope_id: str) -> str:
    """The file name of ``scope_id``'s sidecar (JSONL-2).

    The contract is the path-safety argument of the module docstring (CHECK-1): one path
    segment, never ``.`` or ``..``, ASCII, and it decodes back to the same scope ID.  CrossHair
    explores ASCII IDs here (this function's own cases: ``/``, ``.``, the prefix); escaping
    non-ASCII text is :func:`~scopecheck.models.scope.encode_uri_component`'s contract.

    pre: len(scope_id) <= 3
    pre: scope_id != "" and scope_id.isascii()
    post: "/" not in __return__ and __return__ not in (".", "..") and __return__.isascii()
    post: decode_sidecar_name(__return__) == scope_id
    """
    encoded = encode_uri_component(scope_id)
    if len(encoded) > MAX_ENCODED_SCOPE_ID:  # pragma: no cover - EphemeralScope refuses these
        raise usage("invalid_scope", "scope ID too long for a sidecar name")
    return SIDECAR_PREFIX + encoded + SIDECAR_SUFFIX


def sidecar_path(main: str, scope_id: str) -> str:
    return child_path(scopes_dir(main), sidecar_name(scope_id))


def decode_sidecar_name(name: str) -> str | None:
    """The scope ID a file in ``.scopes`` belongs to, or ``None`` for unrelated/temp files.

    Only the canonical spelling of a valid scope ID counts, so two files never claim one scope
    (CHECK-1).  Never raises.

    post: __return__ is None or sidecar_stem(__return__) == name
    post: __return__ is None or scope_id_problem(__return__) is None
    """
    if not (name.startswith(SIDECAR_PREFIX) and name.endswith(SIDECAR_SUFFIX)):
        return None
    stem = name[len(SIDECAR_PREFIX) : -len(SIDECAR_SUFFIX)]
    if not stem or len(stem) > MAX_ENCODED_SCOPE_ID:
        return None
    return decode_uri_component(stem)


def temp_path(path: str) -> str:
    return path + TEMP_SUFFIX
