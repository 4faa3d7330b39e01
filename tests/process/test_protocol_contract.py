"""The process protocol as a contract a stranger can implement from the page (PROC-5..PROC-7).

``docs/protocol.md`` shows the wire, ``scopecheck/process/protocol-1.schema.json`` (package data)
describes every line, and these tests hold the Python side, the page and the examples to both:
the encoders emit exactly the schema's fields, every request the client sends and every
response ``scopecheck serve`` sends in a real run validate, the page's exchange is what the
client sends and the Node example answers, the page's record tables are the record types, and
the Node example writes a reply larger than a pipe to a non-blocking stdout whole.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import orjson
import pytest

import scopecheck
from scopecheck.backends.adapters import load
from scopecheck.crashsim.fuse_faults import FaultMount, FaultPlan, unavailable
from scopecheck.models import records, wire
from scopecheck.models.errors import CODES, ClosedError, CorruptError, UsageError
from scopecheck.models.fork import BranchFork, TreeFork
from scopecheck.process import server
from scopecheck.process.protocol import OPS, PROTOCOL_VERSION, SCHEMA_FILE, loads_line, schema
from scopecheck.run.fuzz import fuzz_backend
from scopecheck.run.profiles import get_profile
from scopecheck.run.validate import scratch_directory

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "protocol.md"
API_PAGE = ROOT / "docs" / "api.md"
WRAPPER = [sys.executable, str(ROOT / "tests" / "data" / "recording_wrapper.py")]
NODE = shutil.which("node")
NODE_BACKENDS = ["backend.js", "backend-promises.js"]
SQLITE_FACTORY = """
from scopecheck.impl.sqlite.repository import SqliteRepository


def make_backend(clock, *, root):
    return SqliteRepository(root, clock)
"""
JSONL_FACTORY = """
from scopecheck.impl.jsonl import JsonlRepository


def make_backend(clock, *, fs, root):
    return JsonlRepository(root, fs, clock, cwd="/scopecheck")
"""

# -- the schema and a validator that reads integers as the client does ----------------------------


def _strict_int(_: Any, found: object) -> bool:
    """JSON Schema counts 1.0 as an integer; the client does not (it reads ``1.0`` as a float
    and refuses it where an int belongs), so neither does this validator."""
    return isinstance(found, int) and not isinstance(found, bool)


_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_int),
)
SCHEMA = schema()
DEFS: dict[str, Any] = SCHEMA["$defs"]


def check(instance: Any, definition: str) -> None:
    """Validate ``instance`` against ``#/$defs/<definition>``; a mismatch names the place."""
    part = {k: v for k, v in SCHEMA.items() if k != "oneOf"} | {"$ref": f"#/$defs/{definition}"}
    found = _VALIDATOR(part).iter_errors(instance)
    errors = sorted(found, key=lambda e: list(e.absolute_path))
    assert not errors, f"{definition}: {errors[0].message} at {list(errors[0].absolute_path)}"


def properties(definition: str) -> set[str]:
    return set(DEFS[definition]["properties"])


@pytest.mark.rule("PROC-5")
def test_the_schema_ships_with_the_package_and_is_a_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert f"protocol-{PROTOCOL_VERSION}.schema.json" == SCHEMA_FILE
    assert SCHEMA["x-protocol-version"] == PROTOCOL_VERSION
    assert (Path(server.__file__).parent / SCHEMA_FILE).is_file()
    assert set(DEFS["error"]["properties"]["code"]["enum"]) == CODES


@pytest.mark.rule("PROC-5")
def test_the_schema_has_each_op_with_the_fields_the_client_sends() -> None:
    """The op table of ``scopecheck/process/protocol.py`` and the schema name the same ops,
    each request with the same fields, and each op has a result."""
    requests = {d.removeprefix("request_") for d in DEFS if d.startswith("request_")}
    results = {d.removeprefix("result_") for d in DEFS if d.startswith("result_")}
    assert requests == results == set(OPS)
    for op, fields in OPS.items():
        assert properties(f"request_{op}") == {"id", "op", "now", *fields}, op
        assert set(DEFS[f"request_{op}"]["required"]) == {"id", "op", "now", *fields}, op


def _one_of_each_write() -> list[Any]:
    scope = scopecheck.ephemeral_scope("op-1")
    return [
        scopecheck.set_value(scopecheck.value("app", "k"), 1.0),
        scopecheck.delete_value(scopecheck.value("app", "k", scope)),
        scopecheck.append_list(scopecheck.value_list("app", "l"), {"a": 1}, tag="base"),
        scopecheck.delete_list(scopecheck.value_list("app", "l", scope)),
        scopecheck.insert_entry("e1", None, "message", {"role": "user"}),
        scopecheck.insert_usage("u1", scopecheck.usage_value(3, 4), "e1"),
        scopecheck.retire_scope(scope),
        object(),
    ]


@pytest.mark.rule("PROC-5", "WRITE-1")
def test_each_write_on_the_wire_has_exactly_the_schemas_fields() -> None:
    """Writes are flat: ``kind`` beside the write's own fields, no nested address.  A field
    added to or dropped from the encoder without the schema changing fails here."""
    sent = [wire.write_to_json(w) for w in _one_of_each_write()]
    kinds = {d.removeprefix("write_") for d in DEFS if d.startswith("write_")}
    assert {w["kind"] for w in sent} == kinds
    for found in sent:
        assert set(found) == properties(f"write_{found['kind']}"), found["kind"]
        check(found, "write")


def _records() -> dict[str, tuple[Any, tuple[str, ...] | None]]:
    """One encoded value of each record kind with the field tuple its decoder accepts."""
    entry = records.EntryRecord("e1", None, "message", b"{}", 1, 1700000000000)
    usage = records.UsageRecord("u1", b'{"input":1}', "e1", False, None, 2)
    value = records.ValueRecord(3, b"1.0")
    element = records.ListElement(4, b'"x"', "base")
    stats = records.Stats(1, records.UsageTotals(input=1, cost_total=0.5))
    snapshot = records.Snapshot(
        (entry,), (usage,), ((("op", "ns", "k"), value),), (((None, "ns", "l"), (element,)),), stats
    )
    return {
        "entry_record": (wire.entry_to_json(entry), wire.ENTRY_FIELDS),
        "usage_record": (wire.usage_to_json(usage), wire.USAGE_FIELDS),
        "value_record": (wire.value_record_to_json(value), wire.VALUE_FIELDS),
        "list_element": (wire.element_to_json(element), wire.ELEMENT_FIELDS),
        "stats": (wire.stats_to_json(stats), wire.STATS_FIELDS),
        "usage_totals": (wire.stats_to_json(stats)["usage"], None),
        "snapshot": (wire.snapshot_to_json(snapshot), wire.SNAPSHOT_FIELDS),
        "committed": (
            wire.committed_to_json(records.Committed(5, 1700000000000, None)),
            wire.COMMITTED_FIELDS,
        ),
        "error": (wire.error_to_json(UsageError("not_found", "no s", session="s")), None),
        "fork_tree": (wire.fork_options_to_json(TreeFork(id="d")), None),
        "fork_branch": (wire.fork_options_to_json(BranchFork("main", entry_id="e1")), None),
        "address": (wire.address_to_json(scopecheck.value("app", "k")), None),
    }


@pytest.mark.rule("PROC-5", "WRITE-9")
@pytest.mark.parametrize("definition", sorted(_records()))
def test_each_record_on_the_wire_has_exactly_the_schemas_fields(definition: str) -> None:
    """What the encoders write, what the decoders accept and what the schema says are one
    field set (a usage record has no timestamp, WRITE-9)."""
    found, decoded = _records()[definition]
    assert set(found) == properties(definition)
    check(found, definition)
    if decoded is not None:
        assert set(decoded) == properties(definition)
        assert list(found) == list(decoded)  # written in the order the page lists them


DECODERS: dict[str, Callable[[Any], Any]] = {
    "entry_record": wire.entry_from_json,
    "usage_record": wire.usage_from_json,
    "value_record": wire.value_record_from_json,
    "list_element": wire.element_from_json,
    "stats": wire.stats_from_json,
    "snapshot": wire.snapshot_from_json,
    "committed": wire.committed_from_json,
}


@pytest.mark.rule("PROC-2", "WRITE-9")
@pytest.mark.parametrize("definition", sorted(DECODERS))
def test_a_record_with_a_field_too_many_or_too_few_is_a_wire_error(definition: str) -> None:
    """A usage record with a ``timestamp`` (or any record with a field the contract has no
    place for) is the backend speaking the protocol wrongly, as is a missing field."""
    found, _ = _records()[definition]
    DECODERS[definition](found)
    with pytest.raises(wire.WireError, match="unexpected field"):
        DECODERS[definition]({**found, "timestamp" if "timestamp" not in found else "at": 1})
    for name in found:
        with pytest.raises(wire.WireError, match=f"missing '{name}'"):
            DECODERS[definition]({k: v for k, v in found.items() if k != name})


def test_an_error_object_keeps_its_class_through_the_schema() -> None:
    for error in (UsageError("not_found", "no s"), ClosedError(), CorruptError("corrupt", "x")):
        check(wire.error_to_json(error), "error")


# -- real traffic ---------------------------------------------------------------------------------


def _exchanges(log_dir: Path) -> list[list[tuple[bytes, bytes]]]:
    """Each recorded process's (request, response) line pairs, in the order of their first
    request's ``now`` (spares start ahead of need, so start order is not use order); a
    spare that was never used has none and is left out."""
    out = []
    for sent in sorted(log_dir.glob("*.in")):
        requests = sent.read_bytes().splitlines()
        responses = sent.with_suffix(".out").read_bytes().splitlines()
        assert len(responses) == len(requests), sent.name
        if requests:
            out.append(list(zip(requests, responses, strict=True)))
    return sorted(out, key=lambda pairs: loads_line(pairs[0][0])["now"])


def check_traffic(log_dir: Path) -> set[str]:
    """Every recorded request and response validates, each result against its op's result
    schema; the ops seen."""
    seen = set()
    for exchange in _exchanges(log_dir):
        for sent, answer in exchange:
            request, response = loads_line(sent), loads_line(answer)
            check(request, "request")
            check(response, "response")
            assert response["id"] == request["id"]
            if "ok" in response:
                check(response["ok"], f"result_{request['op']}")
            seen.add(request["op"])
    return seen


class Clock:
    """``now`` for each request: a fixed time the script moves on before each commit."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def run_script(spec: str) -> None:
    """The exchange ``docs/protocol.md`` shows: the probe ``load`` makes, then one world --
    create, commits of every kind (one refused), each read, use after close, a restart,
    delete."""
    from scopecheck import (
        append_list,
        ephemeral_scope,
        insert_entry,
        insert_usage,
        retire_scope,
        set_value,
        usage_value,
        value,
        value_list,
    )

    loaded = load(spec)
    clock = Clock()
    world = loaded.backend.new_world(clock)
    try:
        repo = world.repository()
        storage = repo.create("s")
        op = ephemeral_scope("op-1")
        storage.commit(
            [
                insert_entry("e1", None, "message", {"role": "user"}),
                insert_usage("u1", usage_value(3, 4, cost_total=0.5), "e1"),
                set_value(value("app", "mode"), 1.0),
                append_list(value_list("app", "log"), "start", tag="base"),
            ]
        )
        clock.now += 1000
        storage.commit([set_value(value("pi.frames", "f1", op), {"n": 1})])
        with pytest.raises(UsageError):
            storage.commit([retire_scope(op), set_value(value("pi.frames", "f2", op), 2)])
        clock.now += 1000
        storage.commit([retire_scope(op)])
        storage.get_value(value("app", "mode"))
        storage.scan_values("app")
        storage.read_list(value_list("app", "log"), limit=10)
        with pytest.raises(UsageError):
            storage.read_list(value_list("app", "log"), order="sideways")  # type: ignore[arg-type]
        storage.get_entry("e1")
        storage.get_usage("u1")
        storage.snapshot()
        with pytest.raises(UsageError):
            repo.create("\ud800")
        storage.close()
        with pytest.raises(ClosedError):
            storage.get_entry("e1")
        repo = world.restart()
        again = repo.open("s")
        again.stats()
        again.close()
        repo.delete("s")
        repo.list()
    finally:
        world.cleanup()


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Path, Callable[[str], str]]]:
    """A log directory and ``exec:`` spec maker that records a command's traffic there."""
    logs = tmp_path / "traffic"
    logs.mkdir()

    def spec(command: str) -> str:
        return "exec:" + shlex.join([*WRAPPER, str(logs), "--", *shlex.split(command)])

    with scratch_directory():
        yield logs, spec


@pytest.mark.rule("PROC-5", "PROC-1")
def test_real_traffic_through_scopecheck_serve_validates_against_the_schema(
    recorded: tuple[Path, Callable[[str], str]], tmp_path: Path
) -> None:
    """Two examples of the machine and the page's script (which reaches every op but fork),
    then a fork of each scope, through ``scopecheck serve`` of a SQLite factory: every request
    the client sent and every response the server wrote is a line of the schema."""
    logs, spec = recorded
    (tmp_path / "factory.py").write_text(SQLITE_FACTORY)
    served = spec(f"{sys.executable} -m scopecheck serve {tmp_path / 'factory.py'}:make_backend")
    run_script(served)
    loaded = load(served)
    assert loaded.backend.close is not None
    try:
        world = loaded.backend.new_world(Clock())
        try:
            repo = world.repository()
            repo.create("src").close()
            repo.fork("src", TreeFork(id="copy"))
            with pytest.raises(UsageError):
                repo.fork("src", BranchFork("main"))
            repo.delete("copy")
        finally:
            world.cleanup()
        report = fuzz_backend(  # one round of two examples: every world and restart is a process
            attrs.evolve(loaded.backend, crash=None),
            budget=0.01,
            examples_per_round=2,
            seed=0,
            settings=get_profile("ci"),
            failures_dir=tmp_path / "failures",
            profile="ci",
            spec=served,
        )
    finally:
        loaded.backend.close()  # the pool's processes
    assert report.failures == 0 and report.steps > 0
    assert check_traffic(logs) == set(OPS)


def example_command(request: pytest.FixtureRequest, name: str) -> str:
    """The command of an example backend: a Node.js file, or ``go`` for the built Go one."""
    if name == "go":
        return shlex.quote(str(request.getfixturevalue("go_backend")))
    assert NODE is not None, "the Node.js examples need node on PATH (.ci/run installs it)"
    return f"node {ROOT / 'examples' / 'node' / name}"


@pytest.mark.rule("PROC-5", "PROC-6")
@pytest.mark.parametrize("name", [*NODE_BACKENDS, "go"])
def test_the_examples_answer_the_script_within_the_schema(
    name: str, request: pytest.FixtureRequest, recorded: tuple[Path, Callable[[str], str]]
) -> None:
    logs, spec = recorded
    run_script(spec(example_command(request, name)))
    assert check_traffic(logs) == set(OPS) - {"fork"}


def _lines(command: list[str], lines: list[bytes]) -> list[Any]:
    """The responses of a backend to ``lines`` (its stdin then closes); each validates."""
    run = subprocess.run(command, input=b"".join(line + b"\n" for line in lines),
                         capture_output=True, timeout=60, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    answers = [loads_line(line) for line in run.stdout.splitlines()]
    for answer in answers:
        check(answer, "response")
    return answers


def backend_command(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> list[str]:
    """The argv of an example backend, or of ``scopecheck serve`` of a SQLite factory."""
    if name == "serve":
        (tmp_path / "factory.py").write_text(SQLITE_FACTORY)
        return [sys.executable, "-m", "scopecheck", "serve", f"{tmp_path}/factory.py:make_backend"]
    return shlex.split(example_command(request, name))


@pytest.mark.rule("PROC-6", "LIFE-2", "TX-5")
@pytest.mark.parametrize("name", [*NODE_BACKENDS, "go", "serve"])
def test_what_is_not_a_request_an_unknown_op_or_handle_and_a_closed_handle_answer(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A line that is not a request is answered with id null and ``invalid_payload`` and the
    backend reads on; an unknown op or handle is ``invalid_payload``; a closed handle answers
    ``closed`` before any check of what the request carries; TX-5's first check is the items'."""
    command = backend_command(request, name, tmp_path)
    hello = {"id": 1, "op": "hello", "now": 0, "protocol": 1, "root": str(tmp_path / "root")}
    mixed = [{"kind": "retire", "scope": "a"}, {"kind": "entry", "id": "e", "parent_id": "no",
             "type": "m", "payload": "{}"}, {"kind": "not_a_write", "repr": "3"}]  # fmt: skip
    sent = [
        b"not json",
        orjson.dumps(hello),
        b'{"id":2,"op":"frobnicate","now":0}',
        b'{"id":3,"op":"snapshot","now":0,"handle":99}',
        b'{"id":4,"op":"create","now":0,"session":"s"}',
        orjson.dumps({"id": 5, "op": "commit", "now": 0, "handle": 1, "writes": mixed}),
        b'{"id":6,"op":"close","now":0,"handle":1}',
        orjson.dumps({"id": 7, "op": "commit", "now": 0, "handle": 1, "writes": mixed}),
        b'{"id":8,"op":"read_list","now":0,"handle":1,"address":{"scope":null,"namespace":"a",'
        b'"key":"k"},"cursor":-1,"order":"up","limit":0,"stop_at_tag":""}',
        b'{"id":9,"op":"scan_values","now":0,"handle":1,"namespace":null,"prefix":"","scope":null}',
        b'{"id":10,"op":"close","now":0,"handle":1}',
    ]
    answers = _lines(command, sent)
    codes = [(a["id"], a["error"]["code"] if "error" in a else "ok") for a in answers]
    assert codes == [
        (None, "invalid_payload"), (1, "ok"), (2, "invalid_payload"), (3, "invalid_payload"),
        (4, "ok"), (5, "invalid_transaction"), (6, "ok"), (7, "closed"), (8, "closed"),
        (9, "closed"), (10, "ok"),
    ]  # fmt: skip


@pytest.mark.rule("PROC-6")
@pytest.mark.parametrize("name", [*NODE_BACKENDS, "go", "serve"])
def test_an_id_or_handle_that_is_not_a_json_integer_is_not_one(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``true`` is not the id 1 (Python counts a bool as an int), nor is ``"1"``, ``1.5`` or a
    missing id: each such line is answered with id null and ``invalid_payload``, and the backend
    reads on; a handle ``true`` is not the handle 1 either.  ``1.0`` and ``1e0`` are floats
    to Python and Go; JavaScript's ``JSON.parse`` reads them as 1 and cannot tell, so the Node
    examples are not asked (the page says so, and scopecheck never sends one)."""
    command = backend_command(request, name, tmp_path)
    root = str(tmp_path / "root")
    hello = {"op": "hello", "now": 0, "protocol": 1, "root": root}
    floats = name not in NODE_BACKENDS  # 1.0 and 1e0: not integers where a parser can tell
    float_ids = [b'{"id":2.0,"op":"list","now":0}', b'{"id":2e0,"op":"list","now":0}']
    sent = [
        orjson.dumps({"id": True, **hello}),
        orjson.dumps({"id": 1, **hello}),
        b'{"id":true,"op":"list","now":0}',
        b'{"id":false,"op":"list","now":0}',
        b'{"id":"2","op":"list","now":0}',
        b'{"id":2.5,"op":"list","now":0}',
        b'{"op":"list","now":0}',
        b'{"id":null,"op":"list","now":0}',
        b'{"id":[2],"op":"list","now":0}',
        *(float_ids if floats else []),
        b'{"id":2,"op":"create","now":0,"session":"s"}',
        b'{"id":3,"op":"list","now":0}',
        b'{"id":4,"op":"stats","now":0,"handle":true}',
        *([b'{"id":5,"op":"stats","now":0,"handle":1.0}'] if floats else []),
        b'{"id":6,"op":"stats","now":0,"handle":"1"}',
        b'{"id":7,"op":"close","now":0,"handle":1}',
    ]
    answers = _lines(command, sent)
    codes = [(a["id"], a["error"]["code"] if "error" in a else "ok") for a in answers]
    bad_ids = 8 + 2 * floats
    assert codes == [
        (None, "invalid_payload"),
        (1, "ok"),
        *[(None, "invalid_payload")] * (bad_ids - 1),
        (2, "ok"),
        (3, "ok"),
        (4, "invalid_payload"),
        *([(5, "invalid_payload")] if floats else []),
        (6, "invalid_payload"),
        (7, "ok"),
    ]
    assert answers[bad_ids + 2]["ok"] == ["s"]  # read on: the lines refused changed nothing
    assert all(type(a["id"]) is int for a in answers if a["id"] is not None)


# -- where a backend's own `unusable` sits among a commit's checks --------------------------------

#: The codes of the commit checks on the page, row by row, in their order.
COMMIT_CHECKS = ["invalid_transaction", "invalid_transaction", "unusable",
                 "duplicate_id unknown_reference", ""]  # fmt: skip


def commit_check_codes() -> list[str]:
    """The backticked codes of each ``commit`` row of the page's table of checks."""
    section = PAGE.read_text(encoding="utf-8").split("## What a backend checks itself", 1)[1]
    rows: list[str] = []
    inside = False
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3:
            continue
        if cells[0]:
            inside = cells[0] == "`commit`"
        if inside:
            rows.append(" ".join(re.findall(r"`([a-z_]+)`", cells[2])))
    return rows


@pytest.mark.rule("PROC-6", "TX-5")
def test_the_page_places_unusable_after_the_one_scope_rule_and_before_ids() -> None:
    assert commit_check_codes() == COMMIT_CHECKS


@pytest.mark.rule("PROC-6", "TX-5", "JSONL-12", "CRASH-FS-10")
@pytest.mark.parametrize("name", [*NODE_BACKENDS, "go", "jsonl"])
def test_unusable_is_checked_where_the_page_says(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A handle whose commit's fsync failed (a FUSE mount fails it with EIO) refuses writes as
    ``unusable``, in the commit's order of checks that ``docs/protocol.md`` gives: after
    ``closed`` and the item and one-scope checks (TX-1..TX-3), before ids and references and
    before an empty commit's ``[]``.  The Node and Go examples answer as scopecheck's JSONL
    backend (through ``scopecheck serve``) does; a Session opened again works, and the failed
    commit consumed no seq."""
    why = unavailable()
    assert why is None, f"this test needs FUSE ({why}); .ci/run installs fuse3"
    if name == "jsonl":
        (tmp_path / "factory.py").write_text(JSONL_FACTORY)
        command = [
            sys.executable,
            "-m",
            "scopecheck",
            "serve",
            f"{tmp_path}/factory.py:make_backend",
        ]
        # published through a temp file: the first fsync of the log is the first commit's
        log, second_commit = "s.jsonl", 2
    else:
        command = backend_command(request, name, tmp_path)
        log, second_commit = "s.log", 3  # create fsyncs the new file once
    backing, mountpoint = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    entry = {"kind": "entry", "id": "e1", "parent_id": None, "type": "message", "payload": "{}"}
    value = {"kind": "set", "scope": None, "namespace": "app", "key": "k", "value": "1"}
    mixed = [{"kind": "retire", "scope": "op-1"}, {**value, "scope": "op-1"}]
    not_a_write = [value, {"kind": "not_a_write", "repr": "3"}]
    unknown_parent = [{**entry, "id": "e2", "parent_id": "nope"}]
    script: list[tuple[str, dict[str, Any], str]] = [
        ("hello", {"protocol": 1, "root": str(mountpoint)}, "ok"),
        ("create", {"session": "s"}, "ok"),
        ("commit", {"handle": 1, "writes": [entry]}, "ok"),
        ("commit", {"handle": 1, "writes": [value]}, "io_error"),  # its fsync fails
        ("commit", {"handle": 1, "writes": mixed}, "invalid_transaction"),  # TX-2 first
        ("commit", {"handle": 1, "writes": not_a_write}, "invalid_transaction"),  # TX-1 first
        ("commit", {"handle": 1, "writes": [entry]}, "unusable"),  # before duplicate_id
        ("commit", {"handle": 1, "writes": unknown_parent}, "unusable"),  # before the reference
        ("commit", {"handle": 1, "writes": []}, "unusable"),  # before the empty commit's []
        ("commit", {"handle": 1, "writes": [value]}, "unusable"),
        ("get_entry", {"handle": 1, "entry_id": "e1"}, "ok"),  # reads go on
        ("close", {"handle": 1}, "ok"),
        ("commit", {"handle": 1, "writes": [entry]}, "closed"),  # closed before unusable
        ("open", {"session": "s"}, "ok"),
        ("commit", {"handle": 2, "writes": [entry]}, "duplicate_id"),
        ("commit", {"handle": 2, "writes": [value]}, "ok"),
        ("close", {"handle": 2}, "ok"),
    ]
    now = 1_700_000_000_000
    sent = [orjson.dumps({"id": n, "op": op, "now": now, **fields})
            for n, (op, fields, _) in enumerate(script, 1)]  # fmt: skip
    mount = FaultMount(backing, mountpoint, FaultPlan("fsync", log, second_commit, "EIO"))
    with mount:
        answers = _lines(command, sent)
    fired = mount.fired
    mount.cleanup()
    codes = [a["error"]["code"] if "error" in a else "ok" for a in answers]
    assert list(zip(range(1, len(script) + 1), codes, strict=True)) == [
        (n, code) for n, (_, _, code) in enumerate(script, 1)
    ], [a.get("error", {}).get("message") for a in answers]
    assert fired is not None and fired.ordinal == second_commit
    assert answers[-2]["ok"] == [{"seq": 2, "timestamp": now}]


# -- the page -------------------------------------------------------------------------------------

EXCHANGE = re.compile(r"<!-- exchange -->\n```text\n(.*?)```", re.S)


def page_exchange() -> list[list[tuple[bytes, bytes]]]:
    """The exchange on ``docs/protocol.md``: ``→`` request and ``←`` response lines, each
    process's lines after a ``#`` comment line naming it."""
    (block,) = EXCHANGE.findall(PAGE.read_text(encoding="utf-8"))
    processes: list[list[tuple[bytes, bytes]]] = []
    sent: bytes | None = None
    for line in block.splitlines():
        if line.startswith("#"):
            processes.append([])
        elif line.startswith("→ "):
            sent = line[2:].encode()
        elif line.startswith("← "):
            assert sent is not None
            processes[-1].append((sent, line[2:].encode()))
            sent = None
        else:
            assert not line.strip(), f"an exchange line is '→ ', '← ' or '# ': {line!r}"
    return processes


def _without_root(line: bytes) -> Any:
    found = loads_line(line)
    if found.get("op") == "hello":
        found["root"] = "ROOT"
    if "error" in found:
        found["error"]["message"] = "MESSAGE"
    return found


@pytest.mark.rule("PROC-5", "PROC-6")
def test_the_exchange_on_the_page_is_the_wire(
    recorded: tuple[Path, Callable[[str], str]],
) -> None:
    """The page's requests are the client's, byte for byte but the root; its responses are
    the Node example's but the error messages; and every line validates."""
    assert NODE is not None, "the Node.js example needs node on PATH (.ci/run installs it)"
    logs, spec = recorded
    run_script(spec(f"node {ROOT / 'examples' / 'node' / 'backend.js'}"))
    real = _exchanges(logs)
    shown = page_exchange()
    assert [len(p) for p in shown] == [len(p) for p in real]
    for on_page, on_wire in zip(shown, real, strict=True):
        for (page_sent, page_answer), (sent, answer) in zip(on_page, on_wire, strict=True):
            check(loads_line(page_sent), "request")
            check(loads_line(page_answer), "response")
            assert _without_root(page_sent) == _without_root(sent)
            assert _without_root(page_answer) == _without_root(answer)
            if b'"root"' not in sent:
                assert page_sent == sent  # exactly the bytes on the wire


def _table(text: str, heading: str) -> dict[str, list[str]]:
    """``| record | fields |`` rows under ``heading``: the backticked field names of each."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = re.findall(r"`([a-z_]+)`", cells[1])
    return rows


RECORD_TYPES = {
    "value_record": records.ValueRecord,
    "list_element": records.ListElement,
    "entry_record": records.EntryRecord,
    "usage_record": records.UsageRecord,
}
#: A record type's attribute and its wire field where the two differ: payloads are JSON text on
#: the wire (``value``) and JSON bytes in Python (``value_json``).
WIRE_NAME = {"value_json": "value", "payload_json": "payload", "usage_json": "usage",
             "details_json": "details"}  # fmt: skip


@pytest.mark.rule("PROC-5", "WRITE-9")
def test_the_pages_record_fields_are_the_record_types_and_the_schemas() -> None:
    """``docs/protocol.md``'s record table lists each record's fields as the attrs types in
    ``scopecheck/models/records.py`` have them and as the schema does, and ``docs/api.md``
    says the same of entries and usage rows (a usage row has no timestamp, WRITE-9)."""
    table = _table(PAGE.read_text(encoding="utf-8"), "### Records")
    assert set(table) == {*RECORD_TYPES, "stats", "usage_totals", "snapshot"}
    for name, kind in RECORD_TYPES.items():
        fields = [WIRE_NAME.get(f.name, f.name) for f in attrs.fields(kind)]
        assert table[name] == fields, name
        assert set(fields) == properties(name)
    assert table["usage_totals"] == [f.name for f in attrs.fields(records.UsageTotals)]
    assert table["stats"] == [f.name for f in attrs.fields(records.Stats)]
    assert table["snapshot"] == [f.name for f in attrs.fields(records.Snapshot)]
    for name in ("usage_totals", "stats", "snapshot"):
        assert set(table[name]) == properties(name)
    api = API_PAGE.read_text(encoding="utf-8").split("## Records", 1)[1].split("\n## ", 1)[0]
    shown = dict(re.findall(r"^\| `([A-Za-z]+)\(([^)]*)\)` \|", api, re.M))
    assert {"EntryRecord", "UsageRecord", "ValueRecord", "ListElement"} <= set(shown)
    for name, fields in shown.items():
        kind = getattr(records, name)
        assert fields.split(", ") == [f.name for f in attrs.fields(kind)], name


# -- large replies on a non-blocking stdout -------------------------------------------------------


def _ask(child: subprocess.Popen[bytes], out: int, request: dict[str, Any], wait: float = 0) -> Any:
    """Send one request; after ``wait`` seconds (the backend meanwhile fills the pipe and
    meets EAGAIN), read the whole response line."""
    assert child.stdin is not None
    child.stdin.write(orjson.dumps(request) + b"\n")
    child.stdin.flush()
    time.sleep(wait)
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        deadline = time.monotonic() + 60
        while not data.endswith(b"\n"):
            assert selector.select(deadline - time.monotonic()), "no whole reply within 60 s"
            chunk = os.read(out, 1 << 16)
            assert chunk, f"the backend exited: {child.stderr.read() if child.stderr else b''!r}"
            data += chunk
    return orjson.loads(data)


@pytest.mark.rule("PROC-7")
@pytest.mark.parametrize("name", NODE_BACKENDS)
def test_the_node_examples_write_a_reply_over_a_mib_to_a_non_blocking_stdout_whole(
    name: str, tmp_path: Path
) -> None:
    """A snapshot of a Session holding a 1.5 MiB value, written to a pipe set O_NONBLOCK (as
    a parent such as tsx leaves it) that the reader drains only later: the backend meets a
    full pipe (EAGAIN) many times, waits and writes the rest, and the reply arrives whole."""
    assert NODE is not None, "the Node.js examples need node on PATH (.ci/run installs it)"
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the open file description the child's stdout shares
    try:
        child = subprocess.Popen(
            ["node", str(ROOT / "examples" / "node" / name)],
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    big = "x" * (3 << 19)
    try:
        now = {"now": 1_700_000_000_000}
        assert "ok" in _ask(child, read_end, {"id": 1, "op": "hello", **now, "protocol": 1,
                                              "root": str(tmp_path)})  # fmt: skip
        handle = _ask(child, read_end, {"id": 2, "op": "create", **now, "session": "s"})["ok"]
        write = {"kind": "set", "scope": None, "namespace": "app", "key": "k",
                 "value": orjson.dumps(big).decode()}  # fmt: skip
        commit = {"id": 3, "op": "commit", **now, **handle, "writes": [write]}
        commit.pop("parent_session_id")
        assert _ask(child, read_end, commit) == {"id": 3, "ok": [{"seq": 1, **{"timestamp":
                                                 now["now"]}}]}  # fmt: skip
        snapshot = _ask(child, read_end, {"id": 4, "op": "snapshot", **now,
                                          "handle": handle["handle"]}, wait=0.5)  # fmt: skip
        assert snapshot["id"] == 4
        (row,) = snapshot["ok"]["values"]
        assert row == [None, "app", "k", {"seq": 1, "value": orjson.dumps(big).decode()}]
        assert _ask(child, read_end, {"id": 5, "op": "list", **now}) == {"id": 5, "ok": ["s"]}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        status = child.wait(timeout=30)
        os.close(read_end)
    assert status == 0, child.stderr.read() if child.stderr else b""
