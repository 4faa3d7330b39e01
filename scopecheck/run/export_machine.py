"""A standalone bundle of one machine failure: the failing example as the process-protocol
requests it made, with the reference model's answer to each.

A machine failure (``kind`` ``machine``) is a Hypothesis choice sequence that makes the
machine disagree with the model (:mod:`scopecheck.run.replay`).  The people who fix the
backend need that disagreement without scopecheck, Hypothesis or the model: a list of
requests to send, the answer each must get, and one command that sends them (INSTALL-24).
So the export replays the example (as ``scopecheck replay`` does, up to its tries) against
the backend *through the process protocol* -- a process backend's own command, a Python
factory behind ``scopecheck serve`` -- and records every line each backend process read and
wrote (:mod:`scopecheck.run.wire_tee`).  The failing try's requests are then sent to the
reference model behind the same server a Python backend is served by
(:class:`~scopecheck.process.server.Server` over :class:`ModelRepository`): the expected
answers are the model's, never another backend's.  The bundle:

* ``requests.jsonl``: the failing try's requests in the order they were sent, each with the
  backend process that got it -- a restart is a new process over the same root (PROC-3) --
  which recorded root a ``hello`` names, and which ``create`` or ``open`` gave the handle a
  request names (the handle's number is the backend's choice);
* ``expected.json``: the model's answer to each (a result in the protocol's JSON form, an
  error by its code) and the index of the first answer that differs;
* ``actual.json``: what the backend answered when the bundle was made;
* ``reproduce.py`` (:mod:`scopecheck.run.reproduce_requests`, copied) with ``bundle.json``,
  the backend's command: it sends the requests and stops at the first difference; exit 1
  while one shows, 0 once none does, 2 when the backend cannot be judged.  What it compares
  is what the contract fixes, no more -- an error's code but not its message, a result but
  not the handle's number or ``hello``'s name (its docstring lists it all);
* ``trace.txt``: the requests and answers as lines, the first difference marked;
* ``README.md``: the failing program as the replay prints it, the rule and the error, the
  command that found it, how to run ``reproduce.py``.

What cannot be bundled is refused, saying why, before anything is written: a backend that
has no command of its own (a bundled backend or planted bug, which runs in scopecheck's
process), a factory without ``root`` (its Sessions live in the Python process, so a restart,
a new process, could not read them back: PROC-3), a failure of scopecheck's own code
(INSTALL-19), a backend that broke the protocol (PROC-2: nothing to compare), an example
that did not fail again through the protocol, and a failure that shows in no answer (a file
left on disk, HYGIENE-*).  A fork whose destination the backend chose (FORK-1) is kept: the
model forks into the id the backend gave, and ``reproduce.py`` follows the ids the backend
it runs gives instead.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.backends.adapters import EXEC_CWD_ENV, EXEC_PREFIX, anchored
from scopecheck.backends.factory import factory_kind, load_factory
from scopecheck.backends.registry import Backend, is_user_spec
from scopecheck.models.errors import UsageError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.reference import ReferenceRepository, ReferenceSession
from scopecheck.process.protocol import dumps_line, loads_line
from scopecheck.process.server import Server, is_integer
from scopecheck.run import reproduce_requests, wire_tee
from scopecheck.run.bundle import (
    FORMAT,
    Exported,
    add_script,
    closing_sections,
    run_script,
    shown_command,
    write_folder,
)
from scopecheck.run.replay import REPLAY_TRIES, MachineReplay, replay_machine
from scopecheck.run.reproduce_requests import HANDLE_OPS, Unjudged, difference, parse_answer

#: The name the model's server gives itself at ``hello``.
MODEL_NAME = "reference-model"
#: The destination the model forks into when the backend chose one and refused the fork.
FORK_PLACEHOLDER = "fork-model"
#: Characters of a request or an answer in ``trace.txt``.
TRACE_WIDTH = 400


def _refused(why: str) -> UsageError:
    return UsageError("invalid_payload", f"no bundle of this machine failure: {why}")


# -- the model behind the protocol -------------------------------------------------------------


class ModelStorage:
    """One open Session of the reference model as a ``Storage``: a commit is timestamped with
    the clock of the request being served (the client's ``now``), as a backend's is; every
    read is the model's own (``ReferenceSession`` has the ``Storage`` reads already)."""

    def __init__(self, model: ReferenceRepository, session: ReferenceSession, clock: Any) -> None:
        self._model = model
        self._session = session
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def commit(self, writes: Sequence[Any]) -> Any:
        return self._session.commit(writes, self._clock())

    def close(self) -> None:
        """Close the handle; the Session may then be opened again (REPO-4), as the machine's
        model allows once the backend's handle is closed."""
        if self._model.open_handles.get(self._session.session_id) is self._session:
            self._model.close_session(self._session.session_id)
        else:
            self._session.close()


class ModelRepository:
    """The reference model of one root as a ``Repository``: every process told ``hello``
    over the same root sees the same Sessions (a restart reads back what was committed,
    PROC-3), and ``close`` closes the handles it gave, as ``close_repository`` must."""

    def __init__(self, model: ReferenceRepository, clock: Any) -> None:
        self._model = model
        self._clock = clock
        self._given: list[ModelStorage] = []

    def _storage(self, session: ReferenceSession) -> ModelStorage:
        storage = ModelStorage(self._model, session, self._clock)
        self._given.append(storage)
        return storage

    def create(self, session_id: str) -> ModelStorage:
        return self._storage(self._model.create(session_id))

    def open(self, session_id: str) -> ModelStorage:
        return self._storage(self._model.open(session_id))

    def list(self) -> list[str]:
        return self._model.list()

    def delete(self, session_id: str) -> None:
        self._model.delete(session_id)

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """A fork into the destination the request names (:func:`model_answers` names the
        one the backend chose)."""
        return self._model.fork(source_id, options, options.id or FORK_PLACEHOLDER)

    def close(self) -> None:
        for storage in self._given:
            storage.close()
        self._given.clear()


def model_server(models: dict[str, ReferenceRepository]) -> Server:
    """A protocol server over the reference model; ``models`` holds one model per root, so
    the servers of one run -- one per recorded process -- share each root's Sessions."""

    def make(clock: Any, *, root: str) -> ModelRepository:
        return ModelRepository(models.setdefault(root, ReferenceRepository()), clock)

    return Server(make, MODEL_NAME)


# -- the backend's command ---------------------------------------------------------------------


def backend_command(record: Mapping[str, Any]) -> tuple[list[str], str]:
    """The command that serves the record's backend over the process protocol, and where it
    runs: an ``exec:`` backend's own, or ``python -m scopecheck serve SPEC`` for a Python
    factory that takes ``root``; a ``UsageError`` saying why for anything else."""
    spec = record.get("spec") or record.get("backend")
    cwd = os.getcwd()
    if not isinstance(spec, str):
        raise _refused("the record names no backend")
    if spec.startswith(EXEC_PREFIX):
        try:
            command = shlex.split(spec.removeprefix(EXEC_PREFIX))
        except ValueError as exc:
            raise _refused(f"cannot split the command of {spec!r}: {exc}") from None
        if not command:
            raise _refused(f"{spec!r} names no command")
        return command, os.environ.get(EXEC_CWD_ENV) or cwd
    if not is_user_spec(spec):
        raise _refused(
            f"{spec!r} is scopecheck's own backend (bundled or a planted bug): it runs inside "
            "scopecheck's process and has no command to send requests to; replay it instead"
        )
    _, factory = load_factory(spec)
    if isinstance(factory, Backend) or not callable(factory):
        raise _refused(
            f"{spec} is not a factory `scopecheck serve` can serve (it serves "
            "make_backend(clock, *, root) or (clock, *, fs, root)); replay it instead"
        )
    if factory_kind(factory) == "plain":
        raise _refused(
            f"{spec} takes no root: its Sessions live in the Python process, and a restart "
            "(a new process over the same root, PROC-3) could not read them back, so "
            "`scopecheck serve` cannot stand for it; give make_backend a root to keep them "
            "under, or replay it instead"
        )
    return [sys.executable, "-m", "scopecheck", "serve", anchored(spec, cwd)], cwd


def _check_record(record: Mapping[str, Any]) -> None:
    if record.get("kind") != "machine" or "seed" not in record:
        raise _refused("not a machine reproducer (kind machine, with its seed)")
    if record.get("origin") == "scopecheck":
        raise _refused("scopecheck's own code raised it (INSTALL-19): not the backend's failure")
    if str(record.get("error", "")).startswith("ProtocolError"):
        raise _refused(
            "the backend broke the protocol (PROC-2), so there are no answers to compare with "
            "the model's; replay it to see the exchange"
        )


# -- the recorded exchange ---------------------------------------------------------------------


@attrs.frozen
class Exchange:
    """One request as a backend process (``pid``, the recorder's token for it) read it, and
    the line it answered (``None``: no answer)."""

    pid: str
    request: bytes
    answer: bytes | None


def read_wire_log(path: Path) -> list[Exchange]:
    """The exchanges of a :mod:`~scopecheck.run.wire_tee` log, in the order the requests
    were sent; each answer is paired with its process's oldest unanswered request."""
    requests: list[tuple[str, bytes]] = []
    answers: dict[int, bytes] = {}
    waiting: dict[str, deque[int]] = {}
    for raw in path.read_bytes().splitlines():
        item = json.loads(raw)
        line = str(item["line"]).encode("utf-8", "surrogateescape").rstrip(b"\n")
        pid = str(item["pid"])
        if item["dir"] == "request":
            waiting.setdefault(pid, deque()).append(len(requests))
            requests.append((pid, line))
        elif waiting.get(pid):
            answers[waiting[pid].popleft()] = line
    return [Exchange(pid, line, answers.get(i)) for i, (pid, line) in enumerate(requests)]


def failing_try(exchanges: list[Exchange]) -> list[Exchange]:
    """The exchanges of the last world the replay made -- the try that failed -- from the
    first ``hello`` over its root on; earlier tries and the probe are left out."""
    hellos = [(i, loads_line(e.request)) for i, e in enumerate(exchanges)]
    roots = [(i, r.get("root")) for i, r in hellos if r.get("op") == "hello"]
    if not roots:
        raise _refused("the replay sent the backend no hello")
    last = roots[-1][1]
    return exchanges[next(i for i, root in roots if root == last) :]


@attrs.frozen
class Recorded:
    """The failing try as the bundle keeps it: ``items`` (``requests.jsonl``'s lines), the
    backend's ``actual`` answers as it gave them, and the same answers as compared."""

    items: list[dict[str, Any]]
    actual: list[dict[str, Any]]
    compared: list[dict[str, Any] | None]


def recorded(exchanges: list[Exchange]) -> Recorded:
    """Number the processes and roots by first appearance, note which ``create`` or ``open``
    gave each handle a request names, and read each answer (``None`` in ``compared``: not a
    response to that request).  A request is kept as it will be sent: its id counted from 1
    in its process (the probe's requests are left out), its root a placeholder."""
    processes: dict[str, int] = {}
    roots: dict[str, int] = {}
    givers: dict[str, dict[int, int]] = {}
    counts: dict[int, int] = {}
    items: list[dict[str, Any]] = []
    actual: list[dict[str, Any]] = []
    compared: list[dict[str, Any] | None] = []
    for index, exchange in enumerate(exchanges):
        request = loads_line(exchange.request)
        op = request.get("op")
        number = processes.setdefault(exchange.pid, len(processes) + 1)
        item: dict[str, Any] = {"process": number, "root": None, "handle_from": None}
        if op == "hello":
            item["root"] = roots.setdefault(str(request.get("root")), len(roots) + 1)
            givers[exchange.pid] = {}
        sent = {**request, "id": counts.get(number, 0) + 1}  # ids count from 1 per process
        counts[number] = sent["id"]
        if item["root"] is not None:
            sent["root"] = f"<root {item['root']}>"  # each run makes a fresh one
        handle = request.get("handle")
        if is_integer(handle):
            item["handle_from"] = givers.get(exchange.pid, {}).get(handle)
        if op == "fork" and (request.get("options") or {}).get("id") is None:
            item["chooses_id"] = True  # the backend names the destination (FORK-1)
        item["request"] = sent
        items.append(item)
        actual.append(_as_answered(exchange.answer))
        try:
            answer = (
                None if exchange.answer is None else parse_answer(exchange.answer, request["id"])
            )
        except Unjudged:
            answer = None
        compared.append(answer)
        result = None if answer is None else answer.get("ok")
        if op in HANDLE_OPS and isinstance(result, dict) and is_integer(result.get("handle")):
            givers.setdefault(exchange.pid, {})[result["handle"]] = index
    return Recorded(items, actual, compared)


def _as_answered(line: bytes | None) -> dict[str, Any]:
    """An answer for ``actual.json``: the response without its id, or the line as text."""
    if line is None:
        return {"no_answer": True}
    try:
        body = reproduce_requests.loads(line)
    except ValueError:
        return {"not_json": line.decode("utf-8", "replace")}
    if isinstance(body, dict):
        return {key: value for key, value in body.items() if key != "id"}
    return {"not_an_object": body}


def model_answers(
    items: list[dict[str, Any]], compared: list[dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """The reference model's answer to each request, served the way a Python backend is:
    one server per recorded process, one model per root, handles the model's own.  A fork
    whose destination the backend chose forks the model into the id the backend gave (as
    the fork machine does: which id is the backend's choice), or, refused by the backend,
    into a placeholder, so the model says whether it should have been refused."""
    models: dict[str, ReferenceRepository] = {}
    servers: dict[int, Server] = {}
    handles: dict[int, Any] = {}
    answers: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        request = dict(item["request"])
        if item["handle_from"] in handles:
            request["handle"] = handles[item["handle_from"]]
        if item.get("chooses_id") and isinstance(request.get("options"), dict):
            given = (compared[index] or {}).get("ok")
            chosen = given if isinstance(given, str) else FORK_PLACEHOLDER
            request["options"] = {**request["options"], "id": chosen}
        server = servers.get(item["process"])
        if server is None:
            server = servers[item["process"]] = model_server(models)
        try:
            answer = parse_answer(server.respond(request), request["id"])
        except Unjudged as exc:  # the model's server is scopecheck's own code
            raise RuntimeError(f"the model could not answer {request.get('op')}: {exc}") from None
        result = answer.get("ok")
        if request.get("op") in HANDLE_OPS and isinstance(result, dict):
            handles[index] = result["handle"]
        answers.append(answer)
    return answers


def first_difference(
    items: list[dict[str, Any]],
    expected: list[dict[str, Any]],
    compared: list[dict[str, Any] | None],
) -> int | None:
    """The index of the first answer that is not the model's (one that was no response
    counts), else ``None``."""
    for index, (item, want, got) in enumerate(zip(items, expected, compared, strict=True)):
        if got is None or difference(str(item["request"].get("op")), want, got) is not None:
            return index
    return None


# -- writing the bundle ------------------------------------------------------------------------


def _json(value: Any) -> bytes:
    """Indented JSON; a lone surrogate (a Session id the checks send on purpose) escaped."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"
    except TypeError:
        return json.dumps(value, indent=2, ensure_ascii=True).encode() + b"\n"


def _cut(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= TRACE_WIDTH else f"{text[:TRACE_WIDTH]}... ({len(text)} chars)"


def _answered(answer: Mapping[str, Any]) -> str:
    """An answer of ``actual.json`` as a trace line: ``ok RESULT``, ``error CODE: message``,
    or what came instead of a response."""
    if "ok" in answer and "error" not in answer:
        return f"ok {_line(answer['ok'])}"
    error = answer.get("error")
    if isinstance(error, dict) and "ok" not in answer:
        return f"error {error.get('code')}: {error.get('message')}"
    return f"not a response: {_line(answer)}"


def _line(value: Any) -> str:
    return _cut(dumps_line(value).rstrip(b"\n"))


def trace_text(
    items: list[dict[str, Any]],
    actual: list[dict[str, Any]],
    expected: list[dict[str, Any]],
    differs: int,
) -> str:
    """Every request as it is sent and the backend's answer, one line each, per process as
    it took its turn; the first difference marked, with the model's answer beside it."""
    lines = [
        "# The failing example as the backend process protocol carries it: -> a request "
        "(as reproduce.py sends it), <- the backend's answer when the bundle was made.",
        "# Each process is a new backend process; a restart is a new one over the same root.",
        "",
    ]
    current = None
    for index, (item, answer) in enumerate(zip(items, actual, strict=True)):
        if item["process"] != current:
            current = item["process"]
            lines.append(f"process {current}:")
        mark = ">>" if index == differs else "  "
        lines.append(f"{mark} {index + 1:>4} -> {_line(item['request'])}")
        lines.append(f"{mark}      <- {_answered(answer)}")
        if index == differs:
            model = _cut(reproduce_requests.answer_text(expected[index]))
            lines.append(f">>         the first difference: the model answers {model}")
    return "\n".join(lines) + "\n"


def readme(
    record: Mapping[str, Any],
    replayed: MachineReplay,
    bundle: Mapping[str, Any],
    differs: int,
    found_by: str,
    status: int,
    output: str,
) -> str:
    rules = ", ".join(record.get("rules") or ()) or "a machine check"
    error = str(record.get("error", "")).strip()
    lines = [
        f"# {rules}: {error.splitlines()[0] if error else 'a machine failure'}",
        "",
        "The stateful machine ran this example against the backend and the reference model, "
        "and they disagreed. The bundle holds the example as the process-protocol requests "
        "it made, what the backend answered and what the model answers, and a script that "
        "sends the requests again -- no scopecheck needed.",
        "",
        "## The failing example",
        "",
        "As `scopecheck replay` prints it (the steps, then the error):",
        "",
        "```",
        replayed.text.strip(),
        "```",
        "",
        f"The record's error: `{error.splitlines()[0] if error else ''}`; the rules: {rules}.",
        "",
        f"Over the protocol the example is {bundle['requests']} requests to "
        f"{bundle['processes']} backend process{'' if bundle['processes'] == 1 else 'es'} "
        f"(a restart starts a new one over the same root); answer {differs + 1} is the first "
        "that differs from the model's (`trace.txt` marks it).",
        "",
        "## Files",
        "",
        "- `requests.jsonl`: the requests in the order they were sent, each with its process",
        "- `expected.json`: the reference model's answer to each (results in the protocol's "
        "JSON form, errors by code); `actual.json`: what the backend answered when this "
        "bundle was made",
        "- `trace.txt`: the requests and answers as lines, the first difference marked",
        "- `reproduce.py`, `bundle.json`: send the requests again to the backend's command",
        "",
    ]
    reproduce = [
        "```",
        "python reproduce.py            # exit 1 while an answer differs, 0 once none does",
        "python reproduce.py --command 'CMD' --cwd DIR   # the same requests, another build",
        "```",
        "",
        "It needs only Python's standard library and the backend's own command "
        f"(`{shown_command(bundle['command'])}`, run in `{bundle['cwd']}` -- or give "
        "`--cwd`). Each process gets a fresh temporary root; exit 2 means the backend could "
        "not be asked (it did not start, did not answer within 60 s, or broke the protocol).",
        "",
        "It compares what the contract fixes: an error by its code (the message is the "
        "backend's), a result exactly in its JSON form (a cost by value), `hello` by protocol "
        "version, `create` and `open` by `parent_session_id` (the handle's number is the "
        "backend's choice; later requests name the handle this run's backend gave).",
    ]
    lines += closing_sections(reproduce, status, output, found_by)
    return "\n".join(lines)


def record_through_protocol(
    record: Mapping[str, Any], command: list[str], cwd: str, tries: int
) -> tuple[MachineReplay, list[Exchange]]:
    """Replay ``record``'s example with its backend behind the recorder, up to ``tries``
    times until it fails (:func:`~scopecheck.run.replay.replay_machine`); what the replay
    said, and every exchange of every process, in order."""
    scratch = tempfile.mkdtemp(prefix="scopecheck-export-")
    try:
        log = Path(scratch) / "wire.jsonl"
        recorder = [sys.executable, wire_tee.__file__, str(log), cwd, "--", *command]
        served = {**record, "spec": EXEC_PREFIX + shlex.join(recorder)}
        replayed = replay_machine(served, tries=tries)
        exchanges = read_wire_log(log) if log.exists() else []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return replayed, exchanges


def export_machine(record: Mapping[str, Any], target: Path, found_by: str) -> Exported:
    """Write the bundle of the machine failure ``record`` to the new folder ``target`` (the
    example replays until it fails again, so the failure is confirmed when it is written)."""
    return write_folder(
        target, lambda work: write_machine_bundle(record, work, found_by), failed_again=True
    )


def write_machine_bundle(record: Mapping[str, Any], work: Path, found_by: str) -> tuple[int, str]:
    """Fill the empty folder ``work`` with the bundle of the machine failure ``record`` (see
    the module docstring) and run its ``reproduce.py`` once: its exit status and output.

    Everything that can refuse runs before the first file is written: a refusal
    (``UsageError`` ``invalid_payload``, with the reason) leaves ``work`` empty."""
    _check_record(record)
    command, cwd = backend_command(record)
    replayed, exchanges = record_through_protocol(record, command, cwd, REPLAY_TRIES)
    if not replayed.reproduced:
        served = not str(record.get("spec") or "").startswith(EXEC_PREFIX)
        raise _refused(
            "served through the process protocol the example did not fail again ("
            f"{(replayed.text.splitlines() or ['no output'])[-1]})"
            + (
                ". Found in-process, it may restart at any step, where a backend process "
                "restarts at most once per 32 steps (PROC-9) and draws other steps: find it "
                "with --exec 'scopecheck serve SPEC' to bundle it"
                if served
                else ""
            )
        )
    if any(line.startswith("ProtocolError: ") for line in replayed.text.splitlines()):
        raise _refused("served through the process protocol the backend broke it (PROC-2)")
    kept = failing_try(exchanges)
    found = recorded(kept)
    expected = model_answers(found.items, found.compared)
    differs = first_difference(found.items, expected, found.compared)
    if differs is None:
        raise _refused(
            f"the backend answered every request as the model does; the failure "
            f"({', '.join(record.get('rules') or ()) or 'its check'}) is in something the "
            "answers do not carry -- files left under the root, timing -- which only a "
            "replay shows"
        )
    bundle = {
        "kind": "machine",
        "command": command,
        "cwd": cwd,
        "backend": record.get("backend"),
        "machine": record.get("machine", "storage"),
        "processes": len({item["process"] for item in found.items}),
        "requests": len(found.items),
    }
    (work / "requests.jsonl").write_bytes(b"".join(dumps_line(item) for item in found.items))
    (work / "expected.json").write_bytes(
        _json(
            {
                "format": FORMAT,
                "rules": list(record.get("rules") or ()),
                "error": record.get("error"),
                "first_difference": differs + 1,
                "answers": expected,
            }
        )
    )
    (work / "actual.json").write_bytes(
        _json({"first_difference": differs + 1, "answers": found.actual})
    )
    (work / "trace.txt").write_text(trace_text(found.items, found.actual, expected, differs))
    add_script(work, reproduce_requests.__file__, bundle)
    status, output = run_script(work)
    (work / "README.md").write_text(
        readme(record, replayed, bundle, differs, found_by, status, output)
    )
    return status, output
