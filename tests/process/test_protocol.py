"""The backend process protocol (PROC-*): the wire form of every value, the framing, and a
Python factory served in a child with real restarts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scopecheck.machines.strategies as sx
from scopecheck.models import wire
from scopecheck.models.errors import ClosedError, CorruptError, ProtocolError, UsageError
from scopecheck.models.fork import BranchFork, TreeFork
from scopecheck.process.client import ProcessWorld
from scopecheck.process.protocol import decode_response, encode_response

ROOT = Path(__file__).resolve().parents[2]
SERVE = [
    sys.executable,
    "-m",
    "scopecheck",
    "serve",
    f"{ROOT}/examples/sqlite3_backend.py:make_backend",
]
BAD = [sys.executable, str(ROOT / "tests" / "data" / "bad_protocol_backend.py")]


@pytest.mark.rule("PROC-1")
@settings(max_examples=300, deadline=None)
@given(
    write=st.one_of(
        sx.session_writes, sx.ephemeral_transactions().filter(bool).map(lambda tx: tx[-1])
    )
)
def test_every_write_survives_its_wire_form(write: Any) -> None:
    assert wire.write_from_json(wire.write_to_json(write)) == write


@pytest.mark.rule("PROC-1")
def test_a_non_write_travels_as_such_and_comes_back_as_a_non_write() -> None:
    sent = wire.write_to_json(object())
    assert sent["kind"] == "not_a_write"
    assert isinstance(wire.write_from_json(sent), str)


@pytest.mark.rule("PROC-1")
def test_fork_options_and_errors_survive_their_wire_form() -> None:
    for options in (
        TreeFork(),
        TreeFork(id="d"),
        BranchFork("main", entry_id="e1", position="before"),
    ):
        assert wire.fork_options_from_json(wire.fork_options_to_json(options)) == options
    for error in (UsageError("not_found", "no s", session="s"), ClosedError(),
                  CorruptError("corrupt", "line 3", line=3)):  # fmt: skip
        back = wire.error_from_json(wire.error_to_json(error))
        assert type(back) is type(error) and back.code == error.code
        assert back.details == error.details


@pytest.mark.rule("PROC-2")
@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": 8, "ok": 1}', "carries id 8"),
        (b'{"id": 7}', "exactly one of"),
        (b'{"id": 7, "ok": 1, "error": {}}', "exactly one of"),
        (b'{"id": 7, "error": {"code": "nonsense", "message": "?"}}', "unknown error code"),
        (b'{"id": 7, "error": {"message": "?"}}', "missing 'code'"),
    ],
)
def test_a_response_outside_the_protocol_is_a_protocol_error(line: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        decode_response(line, 7, "commit")


@pytest.mark.rule("PROC-2")
def test_an_error_response_raises_the_error_it_names() -> None:
    line = encode_response(3, error=wire.error_to_json(UsageError("already_open", "open")))
    with pytest.raises(UsageError) as info:
        decode_response(line.strip(), 3, "open")
    assert info.value.code == "already_open"


@pytest.mark.rule("PROC-3")
def test_a_served_factory_restarts_in_a_new_process_over_the_same_directory() -> None:
    from scopecheck import set_value, value

    world = ProcessWorld(SERVE, lambda: 1_700_000_000_000)
    try:
        repo = world.repository()
        first = repo.process.pid
        storage = repo.create("s")
        (done,) = storage.commit([set_value(value("app", "k"), 1.0)])
        assert done.seq == 1 and done.timestamp == 1_700_000_000_000
        repo = world.restart()
        assert repo.process.pid != first
        again = repo.open("s")
        record = again.get_value(value("app", "k"))
        assert record is not None and record.value_json == b"1"  # 1.0 as JavaScript writes it
        assert [c.seq for c in again.commit([set_value(value("app", "j"), 2)])] == [2]
    finally:
        world.cleanup()
    assert not Path(world.root).exists()


@pytest.mark.rule("PROC-1", "PROC-2")
@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("garbage", "not JSON"),
        ("wrong-id", "answered in order"),
        ("exit", "exited \\(status 3\\)"),
        ("nonsense", "unknown error code"),
    ],
)
def test_a_backend_that_speaks_wrongly_is_a_protocol_error(mode: str, why: str) -> None:
    world = ProcessWorld([*BAD, mode], lambda: 0)
    try:
        with pytest.raises(ProtocolError, match=why):
            world.repository().create("s")
    finally:
        world.cleanup()


@pytest.mark.rule("PROC-1")
def test_a_backend_of_another_protocol_version_is_refused_at_hello() -> None:
    with pytest.raises(ProtocolError, match="protocol 1"):
        ProcessWorld([*BAD, "version"], lambda: 0)


PRINTING_FACTORY = """
from scopecheck.impl.memory import MemoryRepository


def make_backend(clock):
    print("a backend that talks on stdout")
    return MemoryRepository(clock)
"""


@pytest.mark.rule("PROC-4")
def test_each_response_leaves_in_one_write_and_backend_prints_go_to_stderr(
    tmp_path: Path,
) -> None:
    """Under strace, every write on the child's stdout is exactly one whole response line and
    there is one per request; what the backend prints arrives on stderr."""
    import re
    import shutil

    from scopecheck import set_value, value

    if shutil.which("strace") is None:  # .ci/run installs it
        pytest.fail("strace is not installed (Debian package strace)")
    (tmp_path / "printing.py").write_text(PRINTING_FACTORY)
    log = tmp_path / "trace"
    command = [
        "strace", "-f", "-qq", "-s", "100000", "-e", "trace=write", "-o", str(log),
        sys.executable, "-m", "scopecheck", "serve", f"{tmp_path}/printing.py:make_backend",
    ]  # fmt: skip
    world = ProcessWorld(command, lambda: 5)
    try:
        storage = world.repository().create("s")
        storage.commit([set_value(value("app", "k"), 1)])
        assert storage.get_value(value("app", "k")) is not None
        storage.close()
    finally:
        world.cleanup()
    calls = re.findall(r'write\((\d+), "((?:[^"\\]|\\.)*)", \d+\) = \d+', log.read_text())
    responses = [(fd, text) for fd, text in calls if text.startswith('{\\"id\\":')]
    assert len(responses) == 6  # hello, create, commit, get_value, close, the final close
    assert len({fd for fd, _ in responses}) == 1 and responses[0][0] != "2"  # the protocol fd
    for _, text in responses:
        assert text.endswith("\\n") and "\\n" not in text[:-2], text  # one whole line per call
    stderr = "".join(text for fd, text in calls if fd == "2")
    assert "a backend that talks on stdout" in stderr
    assert [text for fd, text in calls if fd == responses[0][0]] == [t for _, t in responses]
