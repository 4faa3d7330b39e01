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
from urllib.parse import unquote

from models.errors import usage
from models.scope import MAX_ENCODED_SCOPE_ID, encode_uri_component

MAIN_SUFFIX: Final = ".jsonl"
SCOPES_SUFFIX: Final = ".scopes"
SIDECAR_PREFIX: Final = "scope-"
SIDECAR_SUFFIX: Final = ".scope"
TEMP_SUFFIX: Final = ".tmp"
#: Longest encoded session id: keeps ``<id>.jsonl.scopes`` and ``<id>.jsonl.tmp`` under the
#: common 255-byte file-name limit.
MAX_ENCODED_SESSION_ID: Final = 200


def _join(directory: str, name: str) -> str:
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

    Only the canonical spelling counts: ``a%2fb.jsonl`` (lower-case hex) is a foreign file.
    """
    if not name.endswith(MAIN_SUFFIX):
        return None
    stem = name[: -len(MAIN_SUFFIX)]
    if not stem:
        return None
    session_id = unquote(stem, errors="strict") if "%" in stem else stem
    try:
        if encode_uri_component(session_id) != stem:
            return None
    except UnicodeEncodeError:
        return None
    return session_id


def main_path(root: str, session_id: str) -> str:
    return _join(root, encode_session_id(session_id) + MAIN_SUFFIX)


def scopes_dir(main: str) -> str:
    """``${mainPath}.scopes`` (000 §6.1)."""
    return main + SCOPES_SUFFIX


def sidecar_name(scope_id: str) -> str:
    encoded = encode_uri_component(scope_id)
    if len(encoded) > MAX_ENCODED_SCOPE_ID:  # pragma: no cover - EphemeralScope refuses these
        raise usage("invalid_scope", "scope ID too long for a sidecar name")
    return SIDECAR_PREFIX + encoded + SIDECAR_SUFFIX


def sidecar_path(main: str, scope_id: str) -> str:
    return _join(scopes_dir(main), sidecar_name(scope_id))


def decode_sidecar_name(name: str) -> str | None:
    """The scope ID a file in ``.scopes`` belongs to, or ``None`` for unrelated/temp files."""
    if not (name.startswith(SIDECAR_PREFIX) and name.endswith(SIDECAR_SUFFIX)):
        return None
    stem = name[len(SIDECAR_PREFIX) : -len(SIDECAR_SUFFIX)]
    if not stem:
        return None
    try:
        scope_id = unquote(stem, errors="strict")
        if encode_uri_component(scope_id) != stem or len(stem) > MAX_ENCODED_SCOPE_ID:
            return None
    except UnicodeError:
        return None
    return scope_id


def temp_path(path: str) -> str:
    return path + TEMP_SUFFIX
