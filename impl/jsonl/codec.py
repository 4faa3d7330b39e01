"""The format-4 line codec: headers and transaction lines (REFERENCE §1, 000 §6.1–§6.2).

One physical line per transaction: a transaction of one write is that write's JSON object, two
or more writes are one JSON array (JSONL-3).  Key names and order follow REFERENCE §1 plus the
Step 1 additions: ``scopeId`` on scoped value/list records (sidecars only), ``tag`` on list
appends, and the main-log retirement record ``{kind:"scope", op:"retire", seq, scopeId}``.
Usage rows carry no timestamp, as upstream writes them (an older file's ``timestamp`` on a usage
row is read and ignored).

Payloads are spliced in as the exact canonical bytes the write froze, and decoding re-encodes
them with orjson, which gives back the same bytes (JSONL-4); so a value read after reopen is byte
for byte the value committed.

Decoding reads what the upstream reader reads (JSONL-23): a transaction array of any length, seq
gaps inside a transaction, unknown keys on a main-log value, list or usage record and in the
header are accepted, and each such non-canonical form is noted (``notes``) for ``scopecheck
inspect``; header keys are kept, so a rewrite preserves them.  Everything else stays strict: an
unknown kind, a missing or mistyped field, a scoped record in the main log, any deviation in a
sidecar (scopecheck's own format) make the line corrupt.  :class:`BadRecord` carries the reason;
the loader adds the file and the 1-based line (JSONL-6).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import orjson

from scopecheck.impl.stats import MESSAGE_TYPE, usage_problem
from scopecheck.models.payload import canonical_bytes
from scopecheck.models.records import Committed, ListElement
from scopecheck.models.writes import (
    RESERVED_ENTRY_KEYS,
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)

FORMAT_VERSION = 4
STORAGE_VERSION = 1

_dumps = orjson.dumps
_Fragment = orjson.Fragment


class BadRecord(Exception):
    """A line or record that is not valid format-4 content (the loader turns it into
    ``CorruptError(corrupt)`` with the file and line)."""


# -- headers -------------------------------------------------------------------------------


def encode_header(
    session_id: str,
    created_at: int,
    cwd: str,
    *,
    parent_session_id: str | None = None,
    next_seq: int | None = None,
) -> bytes:
    """The main-file header line (no newline).  ``nextSeq`` only on whole-file rewrites."""
    header: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "kind": "header",
        "id": session_id,
        "storageVersion": STORAGE_VERSION,
        "createdAt": created_at,
        "cwd": cwd,
    }
    if parent_session_id is not None:
        header["parentSessionId"] = parent_session_id
    if next_seq is not None:
        header["nextSeq"] = next_seq
    return _dumps(header)


#: The header keys upstream defines; any other key is kept as it is and noted (JSONL-24).
_HEADER_KEYS = frozenset(
    {
        "v",
        "kind",
        "id",
        "storageVersion",
        "createdAt",
        "cwd",
        "parentSessionId",
        "legacyParentSessionPath",
        "nextSeq",
    }
)


def unknown_header_keys(header: dict[str, Any]) -> list[str]:
    """Header keys upstream does not define (kept on rewrite, reported by inspect)."""
    return sorted(set(header) - _HEADER_KEYS)


def decode_header(line: bytes, session_id: str) -> dict[str, Any]:
    """Check a main header line: exact kind/version, identity ``session_id`` (JSONL-5)."""
    obj = _loads(line)
    if not isinstance(obj, dict):
        raise BadRecord("missing header: line 1 is not a header object")
    if obj.get("type") == "session":
        raise BadRecord("legacy v3 session file: not supported yet (see spec JSONL gaps)")
    if obj.get("kind") != "header":
        raise BadRecord('missing header: line 1 has no kind "header"')
    if obj.get("v") != FORMAT_VERSION or obj.get("storageVersion") != STORAGE_VERSION:
        raise BadRecord(
            f"unsupported header version v={obj.get('v')!r} "
            f"storageVersion={obj.get('storageVersion')!r} (expected 4 and 1)"
        )
    if obj.get("id") != session_id:
        raise BadRecord(f"header names session {obj.get('id')!r}, expected {session_id!r}")
    if not _is_int(obj.get("createdAt")) or not isinstance(obj.get("cwd"), str):
        raise BadRecord("header createdAt must be an int and cwd a str")
    if "nextSeq" in obj and (not _is_int(obj["nextSeq"]) or obj["nextSeq"] < 1):
        raise BadRecord("header nextSeq must be a positive int")
    for key in ("parentSessionId", "legacyParentSessionPath"):
        if key in obj and not isinstance(obj[key], str):
            raise BadRecord(f"header {key} must be a str")
    return obj


def encode_scope_header(session_id: str, scope_id: str) -> bytes:
    """The exact sidecar header of 000 §6.1 (no newline)."""
    return _dumps(
        {
            "v": FORMAT_VERSION,
            "kind": "scope_header",
            "sessionId": session_id,
            "scopeId": scope_id,
            "storageVersion": STORAGE_VERSION,
        }
    )


def decode_scope_header(line: bytes, session_id: str, scope_id: str) -> dict[str, Any]:
    """Validate a sidecar header: exact keys and identity (JSONL-5, 000 §6.1)."""
    obj = _loads(line)
    if not isinstance(obj, dict) or obj.get("kind") != "scope_header":
        raise BadRecord("missing scope header: line 1 is not a scope_header object")
    if set(obj) != {"v", "kind", "sessionId", "scopeId", "storageVersion"}:
        raise BadRecord(
            f"scope header has keys {sorted(obj)}, expected exactly v, kind, "
            "sessionId, scopeId, storageVersion"
        )
    if obj["v"] != FORMAT_VERSION or obj["storageVersion"] != STORAGE_VERSION:
        raise BadRecord("unsupported scope header version (expected v 4, storageVersion 1)")
    if obj["sessionId"] != session_id:
        raise BadRecord(f"scope header names session {obj['sessionId']!r}, expected {session_id!r}")
    if obj["scopeId"] != scope_id:
        raise BadRecord(
            f"scope header names scope {obj['scopeId']!r}, but the file name says {scope_id!r}"
        )
    return obj


# -- transactions: encoding ----------------------------------------------------------------


def encode_write(item: Committed) -> bytes:
    """One committed write as its JSON object (no newline)."""
    write, seq = item.write, item.seq
    if isinstance(write, InsertEntry):
        head = _dumps(
            {"kind": "entry", "id": write.id, "parentId": write.parent_id, "type": write.type}
        )
        payload = write.payload_json
        middle = b"," + payload[1:-1] if payload != b"{}" else b""
        return head[:-1] + middle + b',"seq":%d,"timestamp":%d}' % (seq, item.timestamp)
    if isinstance(write, InsertUsage):
        row: dict[str, Any] = {
            "kind": "usage",
            "id": write.id,
            "usage": _Fragment(write.usage_json),
        }
        if write.entry_id is not None:
            row["entryId"] = write.entry_id
        row["adjustment"] = write.adjustment
        if write.details_json is not None:
            row["details"] = _Fragment(write.details_json)
        row["seq"] = seq
        return _dumps(row)
    if isinstance(write, RetireScope):
        return _dumps({"kind": "scope", "op": "retire", "seq": seq, "scopeId": write.retired.id})
    if isinstance(write, (SetValue, DeleteValue)):
        obj: dict[str, Any] = {
            "kind": "value",
            "op": "set" if isinstance(write, SetValue) else "delete",
            "seq": seq,
            "namespace": write.address.namespace,
            "key": write.address.key,
        }
        if isinstance(write, SetValue):
            obj["value"] = _Fragment(write.value_json)
    elif isinstance(write, (AppendList, DeleteList)):
        obj = {
            "kind": "list",
            "op": "append" if isinstance(write, AppendList) else "delete",
            "seq": seq,
            "namespace": write.address.namespace,
            "key": write.address.key,
        }
        if isinstance(write, AppendList):
            obj["value"] = _Fragment(write.element_json)
            if write.tag is not None:
                obj["tag"] = write.tag
    else:  # pragma: no cover - check_shape admits only the write types above
        raise AssertionError(write)
    scope_id = write.address.scope_id
    if scope_id is not None:
        obj["scopeId"] = scope_id
    return _dumps(obj)


def encode_transaction(items: Sequence[Committed]) -> bytes:
    """One transaction as one line *with* its newline: an object, or an array for ≥ 2 writes."""
    if len(items) == 1:
        return encode_write(items[0]) + b"\n"
    return b"[" + b",".join(encode_write(item) for item in items) + b"]\n"


# -- transactions: decoding ----------------------------------------------------------------


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not JSON: {exc}") from None


def _is_int(value: object) -> bool:
    return type(value) is int


def decode_transaction(line: bytes) -> list[dict[str, Any]]:
    """Parse one transaction line into its records (not yet checked: see :func:`check_record`)."""
    return transaction_records(_loads(line))


def transaction_records(obj: Any) -> list[dict[str, Any]]:
    """The records of one parsed transaction line: an object, or an array of objects (a writer
    makes it of two or more; upstream's reader also takes one, or none: JSONL-23)."""
    if type(obj) is dict:
        return [obj]
    if type(obj) is list:
        for item in obj:
            if type(item) is not dict:
                raise BadRecord("a transaction array may hold only write objects")
        return obj
    raise BadRecord("a transaction line must be a JSON object or array")


_BASE = ("kind", "op", "seq", "namespace", "key")


def _shapes(op_keys: tuple[str, ...], scoped: bool, tagged: bool) -> tuple[frozenset[str], ...]:
    keys = frozenset(_BASE + op_keys + (("scopeId",) if scoped else ()))
    return (keys, keys | {"tag"}) if tagged else (keys,)


#: The exact key sets a value/list record may have, by (kind, op), for main and sidecar.
_MAIN_SHAPES = {
    ("value", "set"): _shapes(("value",), False, False),
    ("value", "delete"): _shapes((), False, False),
    ("list", "append"): _shapes(("value",), False, True),
    ("list", "delete"): _shapes((), False, False),
}
_SIDE_SHAPES = {
    ("value", "set"): _shapes(("value",), True, False),
    ("value", "delete"): _shapes((), True, False),
    ("list", "append"): _shapes(("value",), True, True),
    ("list", "delete"): _shapes((), True, False),
}
_USAGE_REQUIRED = frozenset({"kind", "id", "usage", "adjustment", "seq"})
_USAGE_ALLOWED = _USAGE_REQUIRED | {"entryId", "details"}
_RETIRE_KEYS = frozenset({"kind", "op", "seq", "scopeId"})


def check_record(
    rec: dict[str, Any], sidecar_scope: str | None, notes: list[str] | None = None
) -> int:
    """Validate one record's shape; returns its seq.

    ``sidecar_scope`` is ``None`` for the main log (no scoped value/list records, JSONL-2) or
    the sidecar's scope ID (only value/list records of exactly that scope, 000 §6.1).  The
    common shapes are checked with one key-set comparison each, since open runs this on every
    record.  In the main log a value, list or usage record may carry keys upstream's reader
    ignores: accepted, and said in ``notes`` (JSONL-23).
    """
    seq = rec.get("seq")
    if type(seq) is not int or seq < 1:
        raise BadRecord(f"record seq must be a positive int (got {seq!r})")
    kind = rec.get("kind")
    if kind == "value" or kind == "list":
        op = rec.get("op")
        table = _MAIN_SHAPES if sidecar_scope is None else _SIDE_SHAPES
        shapes = table.get((kind, op)) if type(op) is str else None
        if shapes is None:
            if sidecar_scope is None and "scopeId" in rec:
                raise BadRecord("a scoped value/list record may not appear in the main log")
            raise BadRecord(f"unknown {kind} op {op!r}")
        if rec.keys() not in shapes:
            if sidecar_scope is None and "scopeId" in rec:
                raise BadRecord("a scoped value/list record may not appear in the main log")
            allowed = shapes[-1]
            if sidecar_scope is not None or not shapes[0] <= rec.keys():
                raise BadRecord(
                    f"{kind} {op} record has keys {sorted(rec)}, expected {sorted(shapes[0])}"
                    + (" (+ tag)" if len(shapes) > 1 else "")
                )
            if notes is not None:
                notes.append(f"{kind} {op} record with unknown keys {sorted(rec.keys() - allowed)}")
        if type(rec["namespace"]) is not str or type(rec["key"]) is not str:
            raise BadRecord(f"{kind} record namespace and key must be str")
        if sidecar_scope is not None and rec["scopeId"] != sidecar_scope:
            raise BadRecord(
                f"record scopeId {rec['scopeId']!r} does not match the sidecar's {sidecar_scope!r}"
            )
        if "tag" in rec:
            tag = rec["tag"]
            if type(tag) is not str or not tag:
                raise BadRecord("list tag must be a non-empty str")
        return seq
    if kind == "entry":
        if sidecar_scope is not None:
            raise BadRecord("an entry record may not appear in a scope sidecar")
        pid = rec.get("parentId", 0)
        if (
            type(rec.get("id")) is not str
            or not (pid is None or type(pid) is str)
            or type(rec.get("type")) is not str
            or type(rec.get("timestamp")) is not int
        ):
            raise BadRecord("entry record needs str id, str|null parentId, str type, int timestamp")
        return seq
    if kind == "usage":
        if sidecar_scope is not None:
            raise BadRecord("a usage record may not appear in a scope sidecar")
        present = rec.keys()
        if not present >= _USAGE_REQUIRED:
            raise BadRecord(f"usage record has keys {sorted(present)}")
        if not present <= _USAGE_ALLOWED and notes is not None:
            notes.append(f"usage record with unknown keys {sorted(present - _USAGE_ALLOWED)}")
        if (
            type(rec["id"]) is not str
            or type(rec["usage"]) is not dict
            or type(rec["adjustment"]) is not bool
            or ("entryId" in rec and type(rec["entryId"]) is not str)
        ):
            raise BadRecord("usage record field types are wrong")
        problem = usage_problem(rec["usage"])
        if problem is not None:
            raise BadRecord(f"usage record: {problem}")
        return seq
    if kind == "scope":
        if sidecar_scope is not None:
            raise BadRecord("a retirement record may not appear in a scope sidecar")
        if rec.get("op") != "retire" or rec.keys() != _RETIRE_KEYS:
            raise BadRecord("scope record must be exactly {kind, op: retire, seq, scopeId}")
        if type(rec["scopeId"]) is not str or not rec["scopeId"]:
            raise BadRecord("retirement scopeId must be a non-empty str")
        return seq
    raise BadRecord(f"unknown record kind {kind!r}")


def entry_payload_json(rec: dict[str, Any]) -> bytes:
    """The entry payload bytes: every key but the record's own, in line order."""
    return canonical_bytes({k: v for k, v in rec.items() if k not in RESERVED_ENTRY_KEYS})


# -- transactions: indexing for open ---------------------------------------------------------

#: Replay operations (:func:`index_transaction`).  Each is a tuple led by its code:
#:
#: ``(OP_ENTRY | OP_MESSAGE, id, src, i)``, ``(OP_USAGE, id, src, i, usage)``,
#: ``(OP_SET, address, src, i)``, ``(OP_DELETE, address)``,
#: ``(OP_APPEND, address, ListElement)``, ``(OP_CLEAR, address)``, ``(OP_RETIRE, scopeId, seq)``
#:
#: where ``address`` is ``(scope_id, namespace, key)`` and ``src, i`` locate the record without
#: holding it decoded: ``src`` is the transaction's line (``i`` its index in the array, ``-1``
#: for a one-write line) or an already decoded record dict (legacy import).  See
#: :func:`op_record`.
OP_ENTRY, OP_MESSAGE, OP_USAGE, OP_SET, OP_DELETE, OP_APPEND, OP_CLEAR, OP_RETIRE = range(8)


def op_record(op: tuple[Any, ...], decoded: dict[int, Any] | None = None) -> dict[str, Any]:
    """The record an entry, usage or value-set operation stands for, decoded again from its
    line (records are built on first read, :mod:`scopecheck.impl.jsonl.lazy`).  ``decoded`` (keyed
    by the line object's ``id``, valid while the caller holds the operations) lets a caller
    that builds many records decode each line once."""
    src, index = op[2], op[3]
    if type(src) is dict:
        return src
    if decoded is None:
        obj = orjson.loads(src)
    else:
        obj = decoded.get(id(src))
        if obj is None:
            obj = decoded[id(src)] = orjson.loads(src)
    record: dict[str, Any] = obj if index < 0 else obj[index]
    return record


def record_op(rec: dict[str, Any], scope: str | None, src: Any, index: int) -> tuple[Any, ...]:
    """The replay operation of one record already accepted by :func:`check_record`."""
    kind = rec["kind"]
    if kind == "entry":
        code = OP_MESSAGE if rec["type"] == MESSAGE_TYPE else OP_ENTRY
        return (code, rec["id"], src, index)
    if kind == "usage":
        return (OP_USAGE, rec["id"], src, index, rec["usage"])
    if kind == "scope":
        return (OP_RETIRE, rec["scopeId"], rec["seq"])
    address = (scope, rec["namespace"], rec["key"])
    if kind == "value":
        return (OP_SET, address, src, index) if rec["op"] == "set" else (OP_DELETE, address)
    if rec["op"] == "append":
        element = ListElement(rec["seq"], canonical_bytes(rec["value"]), rec.get("tag"))
        return (OP_APPEND, address, element)
    return (OP_CLEAR, address)


def index_transaction(
    obj: Any,
    line: bytes,
    sidecar_scope: str | None,
    *,
    lean: bool = False,
    notes: list[str] | None = None,
) -> tuple[int, int, list[tuple[Any, ...]]]:
    """Validate one parsed transaction line and return ``(first seq, last seq, operations)``.

    Exactly as strict as :func:`transaction_records` plus :func:`check_record` on every record
    plus consecutive seqs (JSONL-6): :func:`fast_ops` recognises the shapes a writer produces
    inline, and a line it does not fully recognise goes through the documented checks, which
    raise :class:`BadRecord` with the reason (or accept it, and :func:`record_op` indexes it).
    Why not just keep the decoded records: open speed (JSONL-7).  A decoded record costs far
    more memory traffic than its replay operation, and most records are superseded or never
    read; the lazy maps decode the line again on first read.

    ``lean`` (the JSONL fork) checks exactly the same but returns operations for the records
    other than entries only, each with its seq appended as its last item, and list appends
    without their element.
    """
    if type(obj) is dict:
        fast = fast_ops((obj,), line, -1, sidecar_scope, lean)
    elif type(obj) is list and len(obj) > 1:
        fast = fast_ops(obj, line, 0, sidecar_scope, lean)
    else:
        fast = None
    if fast is not None:
        return fast
    records = transaction_records(obj)
    if type(obj) is list and len(obj) < 2:
        if sidecar_scope is not None:
            raise BadRecord("a transaction array must hold at least two writes")
        if notes is not None:
            notes.append(f"a transaction array of {len(obj)} write{'s' if not obj else ''}")
        if not obj:
            return 0, 0, []
    seqs = [check_record(rec, sidecar_scope, notes) for rec in records]
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise BadRecord(f"seqs inside one transaction must increase ({seqs})")
    if any(b != a + 1 for a, b in itertools.pairwise(seqs)):
        if sidecar_scope is not None:
            raise BadRecord(f"seqs inside one transaction must be consecutive ({seqs})")
        if notes is not None:
            notes.append(f"a seq gap inside one transaction ({seqs})")
    single = type(obj) is dict
    ops = [
        record_op(rec, sidecar_scope, line, -1 if single else index)
        for index, rec in enumerate(records)
    ]
    if lean:
        ops = [(*op, seq) for op, seq in zip(ops, seqs, strict=True) if op[0] > OP_MESSAGE]
    return seqs[0], seqs[-1], ops


def fast_ops(
    records: Any, line: bytes, where: int, scope: str | None, lean: bool
) -> tuple[int, int, list[tuple[Any, ...]]] | None:
    """The operations of a line whose every record has a shape :func:`check_record` accepts,
    checked inline; ``None`` as soon as anything differs (the caller then runs the full
    checks).  ``where`` is ``-1`` for a one-write line, else ``0`` (array indexes follow).

    A record holding exactly *n* keys, all *n* of them required ones, has exactly the required
    key set, so ``len`` plus the subscripts the indexing needs anyway replace set comparisons.
    A record that is no dict fails its first subscript (``TypeError``).
    """
    ops: list[tuple[Any, ...]] = []
    add = ops.append
    main = scope is None
    extra = 0 if main else 1  # sidecar value/list records also carry scopeId
    first = previous = 0
    try:
        for rec in records:
            seq = rec["seq"]
            if type(seq) is not int or (seq != previous + 1 if where > 0 else seq < 1):
                return None
            kind = rec["kind"]
            if kind == "entry":
                ident, parent, type_ = rec["id"], rec["parentId"], rec["type"]
                if (
                    not main
                    or type(ident) is not str
                    or type(type_) is not str
                    or type(rec["timestamp"]) is not int
                    or (parent is not None and type(parent) is not str)
                ):
                    return None
                if not lean:
                    add((OP_MESSAGE if type_ == MESSAGE_TYPE else OP_ENTRY, ident, line, where))
            elif kind == "value" or kind == "list":
                namespace, key, verb = rec["namespace"], rec["key"], rec["op"]
                if (
                    type(namespace) is not str
                    or type(key) is not str
                    or (not main and rec["scopeId"] != scope)
                ):
                    return None
                address = (scope, namespace, key)
                size = len(rec)
                if verb == "delete":
                    if size != 5 + extra:
                        return None
                    code = OP_DELETE if kind == "value" else OP_CLEAR
                    add((code, address, seq) if lean else (code, address))
                elif "value" not in rec:
                    return None
                elif kind == "value":
                    if verb != "set" or size != 6 + extra:
                        return None
                    add(
                        (OP_SET, address, line, where, seq)
                        if lean
                        else (OP_SET, address, line, where)
                    )
                else:
                    if verb != "append":
                        return None
                    if size == 6 + extra:
                        tag = None
                    else:
                        tag = rec["tag"]
                        if size != 7 + extra or type(tag) is not str or not tag:
                            return None
                    if lean:
                        add((OP_APPEND, address, None, seq))
                    else:
                        element = ListElement(seq, canonical_bytes(rec["value"]), tag)
                        add((OP_APPEND, address, element))
            elif kind == "usage":
                usage_value = rec["usage"]
                optional = ("entryId" in rec) + ("details" in rec)
                if (
                    not main
                    or len(rec) != 5 + optional
                    or type(rec["id"]) is not str
                    or type(usage_value) is not dict
                    or type(rec["adjustment"]) is not bool
                    or ("entryId" in rec and type(rec["entryId"]) is not str)
                    or usage_problem(usage_value) is not None
                ):
                    return None
                op = (OP_USAGE, rec["id"], line, where, usage_value)
                add((*op, seq) if lean else op)
            elif kind == "scope":
                scope_id = rec["scopeId"]
                if (
                    not main
                    or len(rec) != 4
                    or rec["op"] != "retire"
                    or type(scope_id) is not str
                    or not scope_id
                ):
                    return None
                add((OP_RETIRE, scope_id, seq, seq) if lean else (OP_RETIRE, scope_id, seq))
            else:
                return None
            if where < 0:
                return seq, seq, ops
            if where == 0:
                first = seq
            previous = seq
            where += 1
    except (KeyError, TypeError):
        return None
    return first, previous, ops
