"""JSON payloads: validated once at the boundary and frozen as canonical bytes.

A write keeps its payload as the bytes ``orjson`` produced, so a caller who mutates a dict after
building a write cannot change what gets committed, and every read decodes a fresh copy
(WRITE-3).  Storable JSON is what the seeds' harness can serialise: ``None``, ``bool``, ``int``
within 64 bits, finite ``float``, well-formed ``str``, lists/tuples and dicts with ``str`` keys.
NaN and infinities are refused even though ``orjson`` would quietly write them as ``null``.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

import orjson

from scopecheck.models.errors import usage

JsonValue: TypeAlias = Any
"""A decoded JSON value.  Kept as ``Any``: recursive aliases buy little at the call sites."""

_MAX_DEPTH = 200


def _check(value: object, path: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise usage("invalid_payload", f"value nests deeper than {_MAX_DEPTH} levels", path=path)
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise usage("invalid_payload", f"integer at {path} does not fit in 64 bits", path=path)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise usage("invalid_payload", f"non-finite number {value!r} at {path}", path=path)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise usage(
                    "invalid_payload", f"object key {key!r} at {path} is not a str", path=path
                )
            _check(item, f"{path}.{key}", depth + 1)
        return
    raise usage(
        "invalid_payload",
        f"{type(value).__name__} at {path} is not JSON (use None, bool, int, float, str, list "
        "or dict)",
        path=path,
    )


def encode_json(value: object, *, what: str = "value") -> bytes:
    """Validate ``value`` as storable JSON and return its canonical bytes (WRITE-3)."""
    _check(value, what, 0)
    try:
        return orjson.dumps(value)
    except TypeError as exc:  # lone surrogates in strings or keys
        raise usage("invalid_payload", f"{what} is not storable JSON: {exc}") from None


def decode_json(data: bytes) -> JsonValue:
    """Decode bytes produced by :func:`encode_json` (a fresh object every call)."""
    return orjson.loads(data)
