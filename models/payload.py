r"""JSON payloads: validated once at the boundary and frozen as canonical bytes.

A write keeps its payload as the bytes it froze, so a caller who mutates a dict after building
a write cannot change what gets committed, and every read decodes a fresh copy (WRITE-3).

Storable JSON is what a JavaScript reader gets back unchanged (WRITE-8), since the seeds'
harness and its files are TypeScript: ``None``, ``bool``, integers within ±(2\ :sup:`53` − 1)
(JavaScript's safe integers), finite ``float``, well-formed ``str``, lists/tuples and dicts with
``str`` keys.  A larger integer would come back rounded (``2**53 + 1`` as ``9007199254740992``),
NaN and the infinities not at all; they are refused.  So is an integral float between the safe
range and 1e21: JavaScript writes it as digits (``1e17`` as ``100000000000000000``), which read
back as an integer outside the safe range, so the boundary's bytes stay a fixed point.
Numbers are written as JavaScript writes them (ECMAScript's ``Number::toString``):
an integral float as an integer (``2.0`` → ``2``, ``-0.0`` → ``0``), exponents only from 1e21
up and below 1e-6, so the canonical bytes are byte for byte what the upstream writer produces
for the same value (JSONL-25).
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeAlias

import orjson

from scopecheck.models.errors import usage

JsonValue: TypeAlias = Any
"""A decoded JSON value.  Kept as ``Any``: recursive aliases buy little at the call sites."""

_MAX_DEPTH = 200
#: The bound within which a JavaScript number holds every integer (``Number.MAX_SAFE_INTEGER``).
MAX_SAFE_INTEGER = 2**53 - 1


def _shown(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:12]}...({len(text)} digits)"


def _read_as(value: int) -> str:
    """What a JavaScript reader gets from ``value``'s digits, when that is another number."""
    try:
        read = js_number(float(value))
    except OverflowError:
        return " (a JavaScript reader gets Infinity)"
    return "" if read == str(value) else f" (a JavaScript reader gets {read})"


def js_number(value: float) -> str:
    """``value`` as ECMAScript's ``Number::toString`` writes it (finite values only).

    Python's ``repr`` gives the same shortest round-trip digits; only where the point and the
    exponent go differs.
    """
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    digits = significant.rstrip("0")
    # value = int(digits) × 10^scale, and ECMAScript's n is where the point goes after digit 1
    scale = int(exponent or 0) - len(fraction) + (len(significant) - len(digits))
    k = len(digits)
    n = k + scale
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    shown = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{shown}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"


def _check(value: object, path: str, depth: int) -> bool:
    """Validate ``value``; ``True`` when some float in it is written differently from how
    orjson writes it (so :func:`encode_json` must rewrite it)."""
    if depth > _MAX_DEPTH:
        raise usage("invalid_payload", f"value nests deeper than {_MAX_DEPTH} levels", path=path)
    if value is None or isinstance(value, (bool, str)):
        return False
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return False
        raise usage(
            "invalid_payload",
            f"integer {_shown(value)} at {path} is outside ±(2**53 - 1), where a JavaScript "
            f"number no longer holds every integer{_read_as(value)}: store it as a string "
            "(WRITE-8)",
            path=path,
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise usage(
                "invalid_payload",
                f"non-finite number {value!r} at {path}: JSON cannot hold it (WRITE-8)",
                path=path,
            )
        if value.is_integer():
            if MAX_SAFE_INTEGER < abs(value) < 1e21:  # JavaScript writes it as digits
                raise usage(
                    "invalid_payload",
                    f"number {value!r} at {path} is written {js_number(value)}, an integer "
                    "outside ±(2**53 - 1) (JavaScript's safe integers): store it as a string "
                    "(WRITE-8)",
                    path=path,
                )
            return True
        return not 1e-5 <= abs(value) < 1e16
    if isinstance(value, (list, tuple)):
        found = False
        for index, item in enumerate(value):
            found = _check(item, f"{path}[{index}]", depth + 1) or found
        return found
    if isinstance(value, dict):
        found = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise usage(
                    "invalid_payload", f"object key {key!r} at {path} is not a str", path=path
                )
            found = _check(item, f"{path}.{key}", depth + 1) or found
        return found
    raise usage(
        "invalid_payload",
        f"{type(value).__name__} at {path} is not JSON (use None, bool, int, float, str, list "
        "or dict)",
        path=path,
    )


def _js_floats(value: Any) -> Any:
    """``value`` with every float replaced by its JavaScript spelling, as raw JSON."""
    if isinstance(value, float):
        return orjson.Fragment(js_number(value).encode())
    if isinstance(value, (list, tuple)):
        return [_js_floats(item) for item in value]
    if isinstance(value, dict):
        return {key: _js_floats(item) for key, item in value.items()}
    return value


#: Where orjson's spelling of a float can differ from JavaScript's: an exponent (``1e+16``,
#: ``1.23e-6``) or an integral float (``2.0``).  A string holding such text only costs a walk.
_FLOAT_SPELLINGS = re.compile(rb"e[-+]|\.0(?![0-9])")


def canonical_bytes(value: Any) -> bytes:
    """The canonical bytes of a JSON value decoded from a file, unchecked (a file may hold what
    the constructors refuse): numbers spelled as JavaScript spells them, so a value read from
    any writer's file is the one a JavaScript reader sees (JSONL-25).  A file written in the
    canonical form decodes to integers wherever it spelled an integral number, so only lines
    with a small number (or text that looks like a float) pay for the walk."""
    data = orjson.dumps(value)
    if _FLOAT_SPELLINGS.search(data) is None:
        return data
    return orjson.dumps(_js_floats(value))


def encode_json(value: object, *, what: str = "value") -> bytes:
    """Validate ``value`` as storable JSON and return its canonical bytes (WRITE-3, WRITE-8)."""
    rewrite = _check(value, what, 0)
    try:
        return orjson.dumps(_js_floats(value) if rewrite else value)
    except TypeError as exc:  # lone surrogates in strings or keys
        raise usage("invalid_payload", f"{what} is not storable JSON: {exc}") from None


def decode_json(data: bytes) -> JsonValue:
    """Decode bytes produced by :func:`encode_json` (a fresh object every call)."""
    return orjson.loads(data)
