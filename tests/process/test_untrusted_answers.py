"""What a backend process answers after a crash is judged, never trusted (CRASH-FS-13): a
payload read back corrupt crosses the protocol byte for byte and fails a crash rule; a served
Python backend's record the protocol cannot carry is read as corrupt (CRASH-FS-1), a foreign
process's line outside the protocol is PROC-2; a 24 MiB answer is read whole and quoted cut;
and the sqlite3 example in every journal mode and ``synchronous`` setting ends ``validate``
with a verdict."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.examples.good_backend import make_backend as memory_backend
from scopecheck.models import wire
from scopecheck.models.errors import CorruptError, ProtocolError
from scopecheck.models.records import ValueRecord
from scopecheck.process.client import MESSAGE_LIMIT, BackendProcess, ProcessRepository
from scopecheck.process.protocol import decode_response, encode_response
from scopecheck.process.server import Server

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SQLITE3 = f"{ROOT}/examples/sqlite3_backend.py"
KINDS = ("corrupt_json", "wrong_types", "list_for_dict", "huge", "invalid_utf8", "lone_surrogate")
CELLS = [
    f"{j}_{s}" for j in ("delete", "truncate", "wal") for s in ("off", "normal", "full", "extra")
]


def _garbled() -> Any:
    spec = importlib.util.spec_from_file_location("garbled_backend", DATA / "garbled_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def proxy(kind: str) -> list[str]:
    return [sys.executable, str(DATA / "garbling_proxy.py"), kind]


# -- the wire ------------------------------------------------------------------------------


@pytest.mark.rule("PROC-1", "CRASH-FS-13")
@given(st.binary(max_size=200))
def test_any_payload_bytes_cross_the_protocol_unchanged(raw: bytes) -> None:
    """Bytes that are not UTF-8 -- a value a damaged store reads back -- reach the client as
    they were, so the client compares what the store holds, not a repaired copy."""
    line = encode_response(1, ok=wire.value_record_to_json(ValueRecord(3, raw)))
    assert wire.value_record_from_json(decode_response(line[:-1], 1, "get_value")).value_json == raw


@pytest.mark.rule("PROC-1", "CRASH-FS-13")
def test_a_foreign_lone_surrogate_arrives_as_bytes_no_payload_holds() -> None:
    line = b'{"id":1,"ok":{"seq":1,"value":"\\"\\ud800\\""}}'
    record = wire.value_record_from_json(decode_response(line, 1, "get_value"))
    assert record.value_json == b'"\xed\xa0\x80"'


@pytest.mark.rule("CRASH-FS-13", "CRASH-FS-1")
@pytest.mark.parametrize(
    ("kind", "where"),
    [("wrong_types", "snapshot.entries[0]: expected an EntryRecord, got int 5"),
     ("list_for_dict", "snapshot.stats: expected a Stats, got list [1, 2]")],
)  # fmt: skip
def test_serve_answers_a_record_it_cannot_carry_as_corrupt(kind: str, where: str) -> None:
    """A Python backend whose snapshot holds a number for an entry or a list for the stats:
    ``scopecheck serve`` answers ``corrupt`` naming where -- the store's state, judged as
    such -- not ``protocol_error``."""
    garbling = _garbled().Garbling

    class Repo:
        def __init__(self, clock: Any) -> None:
            self.inner = memory_backend(clock)

        def create(self, sid: str) -> Any:
            return garbling(self.inner.create(sid), kind)

    server = Server(Repo, "garbled")
    server.respond({"id": 1, "op": "hello", "protocol": 1, "root": "/nowhere"})
    server.respond({"id": 2, "op": "create", "session": "s"})
    line = server.respond({"id": 3, "op": "snapshot", "handle": 1})
    with pytest.raises(CorruptError, match=where.replace("[", r"\[").replace("]", r"\]")):
        decode_response(line[:-1], 3, "snapshot")


# -- a real backend process answering garbage ------------------------------------------------


def _over_a_hot_journal(tmp_path: Path, kind: str) -> tuple[BackendProcess, Any]:
    """The garbling proxy over a root holding a hot journal, and the Session it created."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "old.db-journal").write_bytes(b"hot")
    process = BackendProcess(proxy(kind), str(root), lambda: 0)
    return process, ProcessRepository(process).create("s")


@pytest.mark.rule("CRASH-FS-13", "PROC-7")
def test_a_24_mib_answer_is_read_whole(tmp_path: Path) -> None:
    process, storage = _over_a_hot_journal(tmp_path, "huge")
    try:
        key, record = storage.snapshot().values[-1]
        assert key == (None, "garbage", "k") and len(record.value_json) == (24 << 20) + 2
    finally:
        process.stop()


@pytest.mark.rule("CRASH-FS-13", "PROC-2")
@pytest.mark.parametrize(
    ("kind", "said"),
    [("wrong_types", "snapshot.entries[0]: expected an object, got int"),
     ("invalid_utf8", "is not JSON (str is not valid UTF-8")],
)  # fmt: skip
def test_a_foreign_answer_outside_the_protocol_is_a_bounded_protocol_error(
    tmp_path: Path, kind: str, said: str
) -> None:
    """A number for an entry, a byte that is not UTF-8 in a line: the backend speaks the
    protocol wrongly (PROC-2), and the error quotes the answer cut and escaped."""
    process, storage = _over_a_hot_journal(tmp_path, kind)
    try:
        with pytest.raises(ProtocolError) as raised:
            storage.snapshot()
        message = raised.value.message
        assert said in message and len(message) < MESSAGE_LIMIT + 4000
        message.encode("utf-8")
        if kind == "invalid_utf8":
            assert '"value":"\\xff"' in message
    finally:
        process.kill()


# -- validate, end to end --------------------------------------------------------------------


def validate(
    spec: list[str], cwd: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    run = subprocess.run(
        [sys.executable, "-m", "scopecheck", "validate", *spec, "--seed", "1", "--json",
         "--failures-dir", str(cwd / "failures"), *args],
        capture_output=True, text=True, timeout=3000, check=False, cwd=cwd,
        env={**os.environ, "TMPDIR": str(cwd)},
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr[-4000:]
    assert run.returncode in (0, 1), (run.returncode, run.stderr[-4000:])
    return run.returncode, json.loads(run.stdout)


@pytest.mark.rule("CRASH-FS-13", "CRASH-FS-1")
def test_sqlite3_with_synchronous_off_ends_failed_with_crash_rules(tmp_path: Path) -> None:
    """The sqlite3 example with ``synchronous=OFF`` reads back damaged pages after a power
    loss -- values that are not JSON, NULLs where payloads were: ``validate`` ends FAILED with
    the crash rules those break, and every other phase still runs."""
    status, verdict = validate([f"{SQLITE3}:make_backend_delete_off"], tmp_path, "--examples", "1")
    assert status == 1 and verdict["outcome"] == "failed"
    rules = {f["rule"] for f in verdict["failures"]}
    assert rules and all(rule.startswith("CRASH-FS-") for rule in rules), rules
    assert verdict["phases"]["crash exploration"]["status"] == "failed"
    assert {verdict["phases"][p]["status"] for p in ("machine", "restarts")} == {"ran"}


@pytest.mark.rule("CRASH-FS-13")
@pytest.mark.parametrize("as_json", [True, pytest.param(False, marks=pytest.mark.long)])
def test_an_error_message_with_a_lone_surrogate_is_printed_escaped(
    tmp_path: Path, as_json: bool
) -> None:
    """A backend error whose message holds a lone surrogate fails the machine, and the
    verdict -- summary or JSON -- prints it as ``\\ud800``."""
    spec = f"{DATA}/garbled_backend.py:make_raises_lone_surrogate"
    if as_json:
        status, verdict = validate([spec], tmp_path, "--examples", "2")
        errors = [f["error"] for f in verdict["failures"]]
    else:
        run = subprocess.run(
            [sys.executable, "-m", "scopecheck", "validate", spec, "--seed", "1",
             "--examples", "2", "--failures-dir", str(tmp_path / "failures")],
            capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip
        assert "Traceback" not in run.stderr, run.stderr[-4000:]
        status, errors = run.returncode, run.stdout.splitlines()
    assert status == 1
    assert any("the store said \\ud800 and more" in error for error in errors), errors


@pytest.mark.long
@pytest.mark.rule("CRASH-FS-13")
@pytest.mark.parametrize("cell", CELLS)
def test_sqlite3_in_every_journal_mode_and_synchronous_setting_ends_with_a_verdict(
    cell: str, tmp_path: Path
) -> None:
    """Each of the twelve settings ends ``validate`` with a verdict, no traceback; what the
    verdicts are is calibration's (not pinned here)."""
    _, verdict = validate([f"{SQLITE3}:make_backend_{cell}"], tmp_path, "--examples", "2")
    assert verdict["outcome"] in ("passed", "failed")
    for failure in verdict["failures"]:
        assert failure["rule"], failure


@pytest.mark.long
@pytest.mark.rule("CRASH-FS-13", "CRASH-FS-1", "CRASH-FS-2", "CRASH-FS-6")
@pytest.mark.parametrize("kind", KINDS)
def test_a_served_backend_reading_back_garbage_fails_crash_rules(kind: str, tmp_path: Path) -> None:
    """The sqlite3 example reading back garbage over a hot journal, served by ``scopecheck
    serve``: failed under the crash rules (a record the protocol cannot carry as corrupt,
    CRASH-FS-1), never PROC-2; every phase runs; the reproducers say what was read back."""
    _, verdict = validate([f"{DATA}/garbled_backend.py:make_{kind}"], tmp_path, "--examples", "1")
    rules = {f["rule"] for f in verdict["failures"]}
    crash = (
        {"CRASH-FS-1"} if kind in ("wrong_types", "list_for_dict") else {"CRASH-FS-2", "CRASH-FS-6"}
    )
    assert crash <= rules <= crash | {"CRASH-FS-9", "CRASH-FS-11"}, rules
    assert all(
        p["status"] != "skipped" or "fork" in p["detail"] for p in verdict["phases"].values()
    )
    said = {
        "corrupt_json": "<not JSON (unexpected character",
        "wrong_types": "expected an EntryRecord, got int 5",
        "list_for_dict": "expected a Stats, got list [1, 2]",
        "huge": "<25,165,826 bytes: ",
        "invalid_utf8": "\\\\xff\\\\xfe\\\\x80 not UTF-8",
        "lone_surrogate": "e\\\\ud800",
    }[kind]
    texts = [path.read_text() for path in (tmp_path / "failures").glob("*.json")]
    assert any(said in text for text in texts), said
    assert max(len(text) for text in texts) < 1_000_000


@pytest.mark.long
@pytest.mark.rule("CRASH-FS-13", "PROC-2", "CRASH-FS-2")
@pytest.mark.parametrize("kind", KINDS)
def test_a_foreign_process_answering_garbage_is_judged(kind: str) -> None:
    """The garbling proxy, a process backend not served by scopecheck: payloads it answers
    that the protocol carries are judged by the crash rules; answers outside the protocol
    are PROC-2 and nothing else; either way the exploration ends with its failures."""
    from scopecheck.process.syscall_crash import SyscallSource

    found = SyscallSource("garbling", tuple(proxy(kind)), str(ROOT)).explore(8, seed=1)
    rules = {f.rule for f in found.failures}
    if kind in ("wrong_types", "list_for_dict", "invalid_utf8"):
        # and only PROC-2: a fault run's reopen after it gets a new child, never the broken
        # one's stale "broke the protocol before hello" as CRASH-FS-11
        assert rules == {"PROC-2"}, rules
    else:
        assert rules & {"CRASH-FS-2", "CRASH-FS-6"}, rules
    for failure in found.failures:
        failure.details().encode("utf-8")
        json.dumps(failure.to_json())
