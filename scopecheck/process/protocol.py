"""The backend process protocol, version 1: JSON lines over a child's stdin and stdout.

scopecheck (the client) writes one request per line to the backend's stdin and reads one
response per line from its stdout; the backend answers every request, in order, before reading
the next.  The full description, for an implementer in any language, is ``docs/protocol.md``;
the value shapes are :mod:`scopecheck.models.wire`.

Request::

    {"id": 7, "op": "commit", "now": 1700000000123, "handle": 2, "writes": [...]}

Response: ``{"id": 7, "ok": RESULT}`` or ``{"id": 7, "error": {"code", "message", "details"}}``
where ``code`` is one of the contract's stable codes (ERR-1).  Anything else -- a line that is
not JSON, another id, a missing field, a result of the wrong shape, an unknown code -- is a
:class:`~scopecheck.models.errors.ProtocolError` (PROC-2), reported as the backend speaking the
protocol wrongly, never as a storage mismatch.

The first request is always ``hello`` (``{"protocol": 1, "root": DIR}``); its result names the
protocol version the backend speaks and what it offers (``{"protocol": 1, "name": ...,
"fork": bool}``).  A backend that speaks another version is refused at once (PROC-1).

Every line either way is described by a JSON Schema shipped with the package,
``protocol-1.schema.json`` beside this module (:func:`schema`), so a backend in any language can
check its own lines; the tests hold the encoders here and in :mod:`scopecheck.models.wire` to it
(PROC-5).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Final

import orjson

from scopecheck.models.errors import ProtocolError, ScopecheckError
from scopecheck.models.wire import WireError, error_from_json

PROTOCOL_VERSION: Final = 1
#: The JSON Schema of every request and response line of this version (package data).
SCHEMA_FILE: Final = f"protocol-{PROTOCOL_VERSION}.schema.json"

#: Repository requests (no handle) and storage requests (with ``handle``), with the fields
#: each one carries besides ``id``, ``op`` and ``now``.
REPOSITORY_OPS: Final = {
    "hello": ("protocol", "root"),
    "create": ("session",),
    "open": ("session",),
    "list": (),
    "delete": ("session",),
    "fork": ("source", "options"),
    "close_repository": (),
}
STORAGE_OPS: Final = {
    "commit": ("writes",),
    "get_value": ("address",),
    "scan_values": ("namespace", "prefix", "scope"),
    "read_list": ("address", "cursor", "order", "limit", "stop_at_tag"),
    "get_entry": ("entry_id",),
    "get_usage": ("usage_id",),
    "stats": (),
    "snapshot": (),
    "close": (),
}
OPS: Final = {**REPOSITORY_OPS, **{op: ("handle", *f) for op, f in STORAGE_OPS.items()}}


def schema() -> dict[str, Any]:
    """The protocol's JSON Schema: ``#/$defs/request`` and ``#/$defs/response`` for a line,
    ``#/$defs/result_<op>`` for the result of each op (PROC-5)."""
    text = resources.files("scopecheck.process").joinpath(SCHEMA_FILE).read_bytes()
    found: dict[str, Any] = orjson.loads(text)
    return found


def dumps_line(message: Any) -> bytes:
    """One JSON line.  orjson writes it, except for a string holding a lone surrogate (an
    invalid Session id or namespace the checks send on purpose), which UTF-8 cannot carry:
    then the line is written with ``\\ud800`` escapes, which JSON allows (PROC-1)."""
    try:
        return orjson.dumps(message) + b"\n"
    except TypeError:
        return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def loads_line(line: bytes) -> Any:
    """A JSON line, lone-surrogate escapes included (see :func:`dumps_line`)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            return json.loads(line)
        except ValueError:
            pass
        raise


def encode_request(request_id: int, op: str, now: int, **fields: Any) -> bytes:
    """One request line (with its newline)."""
    return dumps_line({"id": request_id, "op": op, "now": now, **fields})


def encode_response(request_id: object, *, ok: Any = None, error: Any = None) -> bytes:
    """One response line (with its newline): a result, or an error object."""
    body: dict[str, Any] = {"id": request_id}
    if error is not None:
        body["error"] = error
    else:
        body["ok"] = ok
    return dumps_line(body)


def decode_response(line: bytes, request_id: int, op: str) -> Any:
    """The result of the response ``line`` to request ``request_id``; the backend's error is
    raised as the :class:`~scopecheck.models.errors.ScopecheckError` it names, and anything
    outside the protocol as a :class:`ProtocolError`."""
    where = f"response to {op} (request {request_id})"
    try:
        body = loads_line(line)
    except orjson.JSONDecodeError as exc:
        shown = line[:200].decode("utf-8", "replace")
        raise ProtocolError(f"{where} is not JSON ({exc}): {shown!r}", op=op) from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{where} is not a JSON object: {body!r}"[:300], op=op)
    if body.get("id") != request_id:
        raise ProtocolError(
            f"{where} carries id {body.get('id')!r}: every request is answered in order", op=op
        )
    if ("ok" in body) == ("error" in body):
        raise ProtocolError(f"{where} must hold exactly one of 'ok' and 'error'", op=op)
    if "error" in body:
        try:
            raise error_from_json(body["error"], "error")
        except WireError as exc:
            raise ProtocolError(f"{where}: {exc}", op=op) from None
    return body["ok"]


def shape_error(op: str, request_id: int, exc: WireError | ScopecheckError | Exception) -> Any:
    """The :class:`ProtocolError` for a result of the wrong shape."""
    return ProtocolError(f"response to {op} (request {request_id}): result {exc}", op=op)
