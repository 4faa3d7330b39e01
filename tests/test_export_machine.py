"""The bundle of a machine failure (INSTALL-26): the failing example as the process-protocol
requests it made, the reference model's answers, and a ``reproduce.py`` that sends them with
Python alone.

The failures are real: planted bugs in the file example, found by the storage machine -- a
retirement that forgets the scope's lists (``examples/broken_backend.py``'s mistake, over
files), and a reopen that forgets a Session's last commit, which only a restart, a second
backend process, shows.  The fixes are real backends too: the good file example behind
``scopecheck serve``, and the Node example.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from scopecheck.backends.adapters import load_backend
from scopecheck.models.errors import UsageError
from scopecheck.run.export_machine import write_machine_bundle
from scopecheck.run.fuzz import fuzz_backend
from scopecheck.run.profiles import get_profile
from scopecheck.run.reproduce_requests import Unjudged, difference, parse_answer

ROOT = Path(__file__).resolve().parents[1]
HERE = str(ROOT)
SERVE = f"{shlex.quote(sys.executable)} -m scopecheck serve"
GOOD_FILE = f"{SERVE} examples/good_file_backend.py:make_backend"
NODE = "node examples/node/backend.js"
FILES = {"bundle.json", "requests.jsonl", "expected.json", "actual.json", "reproduce.py",
         "trace.txt", "README.md"}  # fmt: skip

LEAKY_RETIRE = """
from typing import Any

from scopecheck import RetireScope
from scopecheck.examples.good_file_backend import FileRepository, FileStorage


class LeakyStorage(FileStorage):
    def _apply(self, data: dict[str, Any], x: Any, seq: int, now: int) -> None:
        if isinstance(x, RetireScope):  # deletes the scope's values but leaves its lists
            for key in [k for k in data["values"] if k[0] == x.retired.id]:
                del data["values"][key]
            return
        super()._apply(data, x, seq, now)


class LeakyRepository(FileRepository):
    storage_class = LeakyStorage


def make_backend(clock: Any, *, fs: Any, root: str) -> LeakyRepository:
    return LeakyRepository(clock, fs, root)
"""

FORGETFUL_REOPEN = """
from typing import Any

from scopecheck.examples.good_file_backend import FileRepository


class ForgetfulRepository(FileRepository):
    def load(self, session_id: str) -> dict[str, Any]:
        path = self.path(session_id)
        lines = self.fs.read_bytes(path).splitlines(keepends=True)
        if len(lines) > 1:  # reads back all but the last acknowledged commit
            self.fs.write_file(path, b"".join(lines[:-1]))
        return super().load(session_id)


def make_backend(clock: Any, *, fs: Any, root: str) -> ForgetfulRepository:
    return ForgetfulRepository(clock, fs, root)
"""


def machine_failure(folder: Path, source: str, *, served: bool = False) -> dict[str, Any]:
    """The first reproducer the storage machine saves for the factory ``source`` (one round
    of ten examples, seed 0), found in-process as ``scopecheck validate FILE:make_backend``
    finds it, or, ``served``, in backend processes as ``scopecheck validate --exec
    'scopecheck serve FILE:make_backend'`` does."""
    (folder / "planted.py").write_text(source)
    spec = f"{folder / 'planted.py'}:make_backend"
    if served:
        spec = f"exec:{SERVE} {spec}"
    backend = attrs.evolve(load_backend(spec), crash=None)
    try:
        report = fuzz_backend(
            backend, budget=60, seed=0, settings=get_profile("ci"), profile="ci", spec=spec,
            failures_dir=folder / "failures", examples=10,
        )  # fmt: skip
    finally:
        if backend.close is not None:
            backend.close()
    assert report.reproducers, "the planted bug was not found"
    record: dict[str, Any] = orjson.loads(Path(report.reproducers[0]).read_bytes())
    assert record["kind"] == "machine" and record["reproduce"] is not None
    return record


def bundle_of(record: dict[str, Any], folder: Path) -> tuple[Path, int, str]:
    """``scopecheck replay FILE --export DIR``, as its user runs it: the bundle, the exit
    status and what it printed."""
    saved = folder / "machine.json"
    saved.write_bytes(orjson.dumps(record))
    work = folder / "bundle"
    done = subprocess.run(
        [sys.executable, "-m", "scopecheck", "replay", str(saved), "--export", str(work)],
        capture_output=True, text=True, timeout=600, cwd=HERE,
    )  # fmt: skip
    return work, done.returncode, done.stdout + done.stderr


def reproduce(python: str, bundle: Path, tmp: Path, *args: str) -> tuple[int, str]:
    """Run the bundle's script as its user would, from elsewhere, with ``TMPDIR`` at ``tmp``
    (where its roots go, so that what it leaves is seen)."""
    done = subprocess.run(
        [python, str(bundle / "reproduce.py"), *args], capture_output=True, text=True,
        timeout=300, cwd=tmp, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def leaky(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, int, str]:
    folder = tmp_path_factory.mktemp("leaky")
    record = machine_failure(folder, LEAKY_RETIRE)
    return record, *bundle_of(record, folder)


@pytest.mark.rule("INSTALL-26", "RETIRE-3")
def test_a_machine_failure_s_bundle_shows_the_difference_with_python_alone_until_the_fix(
    leaky: tuple[dict[str, Any], Path, int, str], bare_python: str, tmp_path: Path
) -> None:
    """The bundle of a lists-leaking retirement holds the requests, the model's answers and
    the backend's; its script, run by a Python that cannot import scopecheck, shows the
    difference (exit 1) until the command is a correct backend (exit 0), in Python or Node,
    and leaves no root behind."""
    record, bundle, status, output = leaky
    assert status == 1, output
    assert {path.name for path in bundle.iterdir()} == FILES
    assert "the failure shows" in output and "snapshot" in output, output
    meta = orjson.loads((bundle / "bundle.json").read_bytes())
    assert meta["kind"] == "machine" and meta["command"][-2] == "serve", meta
    expected = orjson.loads((bundle / "expected.json").read_bytes())
    actual = orjson.loads((bundle / "actual.json").read_bytes())
    differs = expected["first_difference"] - 1
    assert expected["rules"] == record["rules"] and actual["first_difference"] == differs + 1
    model, backend = expected["answers"][differs]["ok"], actual["answers"][differs]["ok"]
    assert model["lists"] != backend["lists"] and model["values"] == backend["values"]
    requests = (bundle / "requests.jsonl").read_bytes().splitlines()
    assert len(requests) == len(expected["answers"]) == len(actual["answers"]) == meta["requests"]
    assert orjson.loads(requests[0])["request"]["op"] == "hello"
    trace = (bundle / "trace.txt").read_text()
    assert f">> {differs + 1:>4} -> " in trace and "the first difference" in trace, trace
    readme = (bundle / "README.md").read_text()
    assert "scopecheck replay " in readme and "retire" in readme, readme

    assert reproduce(bare_python, bundle, tmp_path)[0] == 1
    fixed, said = reproduce(bare_python, bundle, tmp_path, "--command", GOOD_FILE, "--cwd", HERE)
    assert fixed == 0 and "no difference" in said, said
    if shutil.which("node") is not None:
        fixed, said = reproduce(bare_python, bundle, tmp_path, "--command", NODE, "--cwd", HERE)
        assert fixed == 0, said
    broken, said = reproduce(bare_python, bundle, tmp_path, "--command", "cat")
    assert broken == 2 and "could not judge" in said, said
    assert list(tmp_path.iterdir()) == [], "reproduce.py left a root behind"


@pytest.mark.rule("INSTALL-26", "PROC-3")
def test_a_failure_after_a_restart_is_replayed_over_two_processes_and_one_root(
    tmp_path: Path, bare_python: str
) -> None:
    """A reopen that forgets the last commit shows only in a second backend process over
    the same root (found with the backend in processes, where a restart is one): the bundle
    keeps the processes apart, over one root, and its script shows it again."""
    record = machine_failure(tmp_path, FORGETFUL_REOPEN, served=True)
    bundle, status, output = bundle_of(record, tmp_path)
    assert status == 1, output
    items = [orjson.loads(line) for line in (bundle / "requests.jsonl").read_bytes().splitlines()]
    hellos = [item for item in items if item["request"]["op"] == "hello"]
    assert len({item["process"] for item in items}) >= 2, items
    assert len(hellos) >= 2 and {item["root"] for item in hellos} == {1}, hellos
    assert reproduce(bare_python, bundle, tmp_path)[0] == 1
    fixed, said = reproduce(bare_python, bundle, tmp_path, "--command", GOOD_FILE, "--cwd", HERE)
    assert fixed == 0, said


@pytest.mark.rule("INSTALL-26")
@pytest.mark.parametrize(
    ("backend", "spec", "why"),
    [
        ("broken_backend", "examples/broken_backend.py:make_backend", "takes no root"),
        ("memory", None, "has no command"),
        ("jsonl", None, "has no command"),
    ],
)
def test_a_backend_the_export_cannot_serve_is_refused_with_the_reason(
    backend: str, spec: str | None, why: str, tmp_path: Path
) -> None:
    """A factory without root (its Sessions die with a restart's process) and a bundled
    backend (no command of its own) are refused, saying why, and nothing is written."""
    record = {"kind": "machine", "machine": "storage", "backend": backend, "spec": spec,
              "seed": 0, "profile": "ci", "error": "MismatchError: x", "rules": ["RETIRE-3"],
              "program": "", "reproduce": None}  # fmt: skip
    work = tmp_path / "bundle"
    work.mkdir()
    previous = os.getcwd()
    os.chdir(ROOT)
    try:
        with pytest.raises(UsageError) as refused:
            write_machine_bundle(record, work, "scopecheck validate")
    finally:
        os.chdir(previous)
    assert refused.value.code == "invalid_payload" and why in refused.value.message
    assert list(work.iterdir()) == []


MODEL_ANSWERS = [
    {"ok": {"protocol": 1, "name": "reference-model", "fork": True}},
    {"ok": {"handle": 1, "parent_session_id": None}},
    {"ok": [{"seq": 1, "timestamp": 1}]},
    {"ok": {"message_count": 0, "usage": {"input": 0, "cost_total": 0.0}}},
    {"ok": None},
    {"error": "closed"},
]


def _dumps(value: Any) -> bytes:
    """JSON as any backend may write it: integers of any size included (orjson refuses those
    past 64 bits, a backend in another language need not)."""
    return json.dumps(value).encode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
ANSWER_LINES = st.one_of(
    st.binary(),
    JSON_VALUES.map(_dumps),
    st.builds(
        lambda ident, body: _dumps({"id": ident, **body}),
        st.sampled_from([1, 2, True, 1.0, "1", None]),
        st.dictionaries(st.sampled_from(["ok", "error", "code"]), JSON_VALUES, max_size=3),
    ),
)


@pytest.mark.rule("INSTALL-26", "PROC-2")
@given(line=ANSWER_LINES, op=st.sampled_from(["hello", "create", "commit", "stats", "close"]),
       want=st.sampled_from(MODEL_ANSWERS))  # fmt: skip
@example(line=b"[" * 100_000, op="commit", want=MODEL_ANSWERS[2])
@example(line=b'{"id":1,"ok":' + b"7" * 1_000_000 + b"}", op="commit", want=MODEL_ANSWERS[2])
@example(line=b'{"id":1,"ok":NaN}', op="stats", want=MODEL_ANSWERS[3])
@example(line=b'{"id":1,"error":{"code":"protocol_error"}}', op="close", want=MODEL_ANSWERS[4])
@example(line=b'{"id":true,"ok":null}', op="close", want=MODEL_ANSWERS[4])
@example(line=b'{"id":1,"ok":{"handle":true,"parent_session_id":null}}', op="create",
         want=MODEL_ANSWERS[1])  # fmt: skip
def test_any_answer_line_is_a_clean_difference_or_unjudged_never_a_traceback(
    line: bytes, op: str, want: dict[str, Any]
) -> None:
    """Whatever a backend writes, reproduce.py's reading of it either refuses it as outside
    the protocol (exit 2) or compares it, saying in one line why it differs (exit 1)."""
    try:
        answer = parse_answer(line, 1)
    except Unjudged as exc:
        assert str(exc)
        return
    assert set(answer) in ({"ok"}, {"error"})
    found = difference(op, want, answer)
    assert found is None or (isinstance(found, str) and "\n" not in found)


@pytest.mark.rule("INSTALL-26")
def test_what_the_contract_leaves_to_the_backend_is_not_compared() -> None:
    """An error's message, hello's name and a handle's number are the backend's; a cost is
    compared by value, an integer field by type too, ``true`` never as ``1``."""
    assert parse_answer(b'{"id":3,"error":{"code":"closed","message":"x","details":{}}}', 3) == {
        "error": "closed"
    }
    assert difference("hello", MODEL_ANSWERS[0], {"ok": {"protocol": 1, "name": "n"}}) is None
    handle = {"ok": {"handle": 9, "parent_session_id": None}}
    assert difference("create", MODEL_ANSWERS[1], handle) is None
    costs = {"ok": {"message_count": 0, "usage": {"input": 0, "cost_total": 0}}}
    assert difference("stats", MODEL_ANSWERS[3], costs) is None
    floats = {"ok": {"message_count": 0.0, "usage": {"input": 0, "cost_total": 0}}}
    assert difference("stats", MODEL_ANSWERS[3], floats) is not None
    assert difference("commit", MODEL_ANSWERS[2], {"ok": [{"seq": True, "timestamp": 1}]})
    assert difference("close", MODEL_ANSWERS[4], {"error": "io_error"}) is not None


FORKS = ROOT / "tests" / "data" / "fork_backends.py"


@pytest.mark.rule("INSTALL-26", "FORK-1", "FORK-7")
def test_a_fork_machine_failure_bundles_forks_into_ids_the_backend_chose(
    tmp_path: Path, bare_python: str
) -> None:
    """The fork machine over a backend that writes operation state into every fork's
    destination (FORK-7), served as a process: its forks name no destination, so the
    backend chooses it, and the bundle's script follows the ids this run's backend gives --
    exit 1 for the leak, 0 for the correct backend, which may name its forks otherwise."""
    spec = f"exec:{SERVE} {FORKS}:make_rooted_leaky_fork"
    backend = attrs.evolve(load_backend(spec), crash=None)
    try:
        report = fuzz_backend(
            backend, budget=60, seed=0, settings=get_profile("ci"), profile="ci", spec=spec,
            failures_dir=tmp_path / "failures", examples=10, machine_kind="fork",
        )  # fmt: skip
    finally:
        if backend.close is not None:
            backend.close()
    assert report.reproducers, "the planted fork bug was not found"
    records = [orjson.loads(Path(path).read_bytes()) for path in report.reproducers]
    # options that are no ForkOptions are refused on the Python side, never sent (FORK-1)
    assert not [r for r in records if r.get("origin") == "scopecheck"], records
    record: dict[str, Any] = records[0]
    assert "FORK-7" in record["rules"], record["rules"]
    bundle, status, output = bundle_of(record, tmp_path)
    assert status == 1, output
    items = [orjson.loads(line) for line in (bundle / "requests.jsonl").read_bytes().splitlines()]
    forks = [item for item in items if item["request"]["op"] == "fork"]
    assert forks and any(item.get("chooses_id") for item in forks), forks
    assert reproduce(bare_python, bundle, tmp_path)[0] == 1
    fixed, said = reproduce(
        bare_python, bundle, tmp_path, "--command",
        f"{SERVE} {FORKS}:make_rooted_backend", "--cwd", HERE,
    )  # fmt: skip
    assert fixed == 0, said
