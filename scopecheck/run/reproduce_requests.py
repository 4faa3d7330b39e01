#!/usr/bin/env python3
"""Send this bundle's recorded requests to the backend and compare every answer with the
reference model's, stopping at the first difference.

    python reproduce.py                      # exit 1 while a difference shows, 0 once none does
    python reproduce.py --command 'node backend.js' --cwd ~/src/store   # another build of it

It needs Python 3.8 or newer and nothing else: it speaks the backend process protocol
(scopecheck's docs/protocol.md) to the backend's own command, which ``bundle.json`` holds (for
a Python factory that command is ``python -m scopecheck serve SPEC``, so only then the
backend's environment needs scopecheck).  ``requests.jsonl`` holds the requests of the failing
example in the order they were sent, each tagged with the backend process that got it: a
restart is a new process over the same root (PROC-3), and every process here is a new one,
given the same requests, over a fresh temporary root per recorded root, removed on every exit.

What is compared is what the contract fixes (``expected.json`` holds the model's answers):

* an error by its stable ``code`` alone; its ``message`` and ``details`` are the backend's own
  words (ERR-1);
* a result exactly in its JSON form -- every field, no field more, lists in order, ``true``
  never ``1``, an integer never ``1.0`` (PROC-2) -- except a cost, any JSON number, compared by
  value (``0`` is ``0.0``);
* ``hello``: the protocol version only; the name and whether it forks are the backend's;
* ``create`` and ``open``: ``parent_session_id`` exactly and that the handle is an integer --
  which integer is the backend's choice, so a later request naming a handle names the one
  this run's backend gave for the same ``create`` or ``open``;
* a ``fork`` without a destination id: the id is the backend's choice (FORK-1), so a later
  request naming it names the one this run's backend gave, and an answer holding it (a
  ``list``, a ``parent_session_id``) is compared with it read as the recorded one -- a
  ``list`` still in code-point order as this backend named its Sessions.

Exit status: 1 an answer differs from the model's (the request, the expected and the actual
answer are printed), 0 every answer matches, 2 it could not be judged (the backend did not
start, did not answer in time, or broke the protocol -- the message says which).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
#: Seconds to wait for one answer, and for a backend to exit once its stdin is closed.
ANSWER_TIMEOUT = 60.0
EXIT_TIMEOUT = 10.0
#: Characters of a request or an answer printed.
SHOWN = 1500
#: Digits of the longest integer an answer may hold: a longer one is not a protocol integer,
#: and refusing it keeps reading an answer linear in its length (CPython converts long digit
#: strings in quadratic time).
MAX_DIGITS = 400
#: Lines of the backends' stderr shown when the backend cannot be judged.
STDERR_LINES = 20
#: The ops whose result names a handle the backend chose.
HANDLE_OPS = ("create", "open")


class Unjudged(Exception):
    """The backend could not be asked: it did not start, exited, did not answer in time, or
    answered outside the protocol (exit 2)."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def loads(data: bytes) -> Any:
    """One JSON value from outside, in time linear in its length: a long integer, ``NaN`` or
    ``Infinity`` or nesting deeper than Python recurses is refused (``ValueError``)."""
    try:
        return json.loads(data, parse_int=_integer, parse_constant=_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def shown(value: Any) -> str:
    """A JSON value as one line, cut at :data:`SHOWN` characters."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text if len(text) <= SHOWN else text[:SHOWN] + f"... ({len(text)} characters)"


def parse_answer(line: bytes, request_id: int) -> dict[str, Any]:
    """The answer ``line`` to request ``request_id`` as ``{"ok": RESULT}`` or ``{"error":
    CODE}``; :class:`Unjudged` when it is not a response to that request (PROC-2): not JSON,
    not an object, another id, both or neither of ``ok`` and ``error``, an error without a
    string ``code``, or ``protocol_error`` -- the backend saying it raised an exception it did
    not mean to."""
    text = line.decode("utf-8", "replace").rstrip("\n")
    cut = text[:200] + ("..." if len(text) > 200 else "")
    try:
        body = loads(line)
    except ValueError as exc:
        raise Unjudged(f"the answer is not JSON ({exc}): {cut!r}") from None
    if not isinstance(body, dict):
        raise Unjudged(f"the answer is not a JSON object: {cut!r}")
    found = body.get("id")
    if type(found) is not int or found != request_id:
        raise Unjudged(f"the answer carries id {shown(found)}, not {request_id}: {cut!r}")
    if ("ok" in body) == ("error" in body):
        raise Unjudged(f"the answer holds {'both' if 'ok' in body else 'neither'} of ok and error")
    if "ok" in body:
        return {"ok": body["ok"]}
    error = body["error"]
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, str):
        raise Unjudged(f"the error answered has no string code: {cut!r}")
    if code == "protocol_error":
        message = error.get("message")
        raise Unjudged(
            f"the backend answered protocol_error (its own exception): {message!r}"[:SHOWN]
        )
    return {"error": code}


def same_json(expected: Any, actual: Any, key: str = "") -> bool:
    """``actual`` is ``expected`` in its JSON form (see the module docstring): types kept
    apart (``true`` is no ``1``, ``1.0`` no integer), a cost -- a float the model gave, or a
    ``cost_`` field -- compared by value.  Recursion goes only as deep as both values are
    lists or objects, so as deep as the model's answer."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, float) or key.startswith("cost_"):
            return expected == actual
        return type(actual) is int and expected == actual
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same_json(expected[i], actual[i]) for i in range(len(expected)))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and set(actual) == set(expected)
            and all(same_json(expected[k], actual[k], k) for k in expected)
        )
    if expected is None or isinstance(expected, str):
        return type(actual) is type(expected) and actual == expected
    return False


def difference(op: str, expected: dict[str, Any], actual: dict[str, Any]) -> str | None:
    """Why the answer ``actual`` to an ``op`` request is not the model's ``expected`` (both
    ``{"ok": RESULT}`` or ``{"error": CODE}``), or ``None``: what is compared is the module
    docstring's list."""
    if "error" in expected or "error" in actual:
        if expected.get("error") == actual.get("error"):
            return None
        return "another outcome than the model's"
    want, got = expected.get("ok"), actual.get("ok")
    if op == "hello":
        version = got.get("protocol") if isinstance(got, dict) else None
        wanted = want.get("protocol") if isinstance(want, dict) else None
        return None if same_json(wanted, version) else "another protocol version"
    if op in HANDLE_OPS and isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return f"a {op} result has the fields handle and parent_session_id"
        if type(got.get("handle")) is not int:
            return "the handle is not an integer"
        parent = want.get("parent_session_id")
        if same_json(parent, got.get("parent_session_id")):
            return None
        return "another parent_session_id"
    return None if same_json(want, got) else "another result"


def as_recorded(op: str, answer: dict[str, Any], chosen: dict[str, str]) -> dict[str, Any]:
    """``answer`` with each Session id this backend chose for a fork as the one recorded
    (``chosen``: recorded -> this run's), so that it compares with the model's; a ``list``
    is then in the recorded ids' order, which the model's is."""
    if not chosen or "ok" not in answer:
        return answer
    back = {mine: recorded for recorded, mine in chosen.items()}

    def renamed(value: Any) -> Any:
        if isinstance(value, str):
            return back.get(value, value)
        if isinstance(value, list):
            return [renamed(item) for item in value]
        if isinstance(value, dict):
            return {key: renamed(item) for key, item in value.items()}
        return value

    result = renamed(answer["ok"])
    if op == "list" and isinstance(result, list) and all(isinstance(i, str) for i in result):
        result = sorted(result)
    return {"ok": result}


def unordered(op: str, answer: dict[str, Any]) -> str | None:
    """A ``list`` answer not in code-point order, as this backend named its Sessions."""
    result = answer.get("ok")
    if op == "list" and isinstance(result, list) and all(isinstance(i, str) for i in result):
        return None if result == sorted(result) else "a list not in code-point order"
    return None


def answer_text(answer: dict[str, Any]) -> str:
    """An answer as the comparison sees it: ``ok RESULT`` or ``error CODE``."""
    if "error" in answer:
        return f"error {answer['error']}"
    return f"ok {shown(answer.get('ok'))}"


class Backend:
    """One backend process speaking protocol 1 over its stdin and stdout."""

    def __init__(self, command: list[str], cwd: str, log: IO[bytes]) -> None:
        try:
            self.process = subprocess.Popen(
                command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
        except OSError as exc:
            raise Unjudged(f"could not start {shlex.join(command)} in {cwd}: {exc}") from None
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def ask(self, request: dict[str, Any]) -> tuple[int, bytes]:
        """Send ``request`` under the next id (set in it); that id and the answer line."""
        request_id, self.next_id = self.next_id, self.next_id + 1
        request["id"] = request_id
        line = json.dumps(request, ensure_ascii=True) + "\n"
        op = request.get("op")
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line.encode("ascii"))
            self.process.stdin.flush()
            answer = self.lines.get(timeout=ANSWER_TIMEOUT)
        except (OSError, ValueError):
            raise Unjudged(f"the backend exited before it was sent {op}") from None
        except queue.Empty:
            raise Unjudged(
                f"the backend did not answer {op} within {ANSWER_TIMEOUT:.0f} s"
            ) from None
        if not answer:
            raise Unjudged(f"the backend exited instead of answering {op}")
        return request_id, answer

    def finish(self) -> None:
        """Close its stdin, the cue to exit; the wait is :meth:`stop`'s."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        self.finish()
        try:
            self.process.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=EXIT_TIMEOUT)


def read_requests(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(
    bundle: dict[str, Any], requests: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> int:
    """Send ``requests`` in order, each to its process (started at its first request, its
    stdin closed after its last), over fresh roots; print the first difference (1), or that
    none shows (0), or why the backend cannot be judged (2)."""
    last = {item["process"]: index for index, item in enumerate(requests)}
    scratch = tempfile.mkdtemp(prefix="reproduce-")
    processes: dict[int, Backend] = {}
    handles: dict[int, Any] = {}
    chosen: dict[str, str] = {}
    log_path = os.path.join(scratch, "stderr.txt")
    with open(log_path, "wb") as log:
        try:
            for index, item in enumerate(requests):
                number = item["process"]
                backend = processes.get(number)
                if backend is None:
                    backend = processes[number] = Backend(bundle["command"], bundle["cwd"], log)
                request = dict(item["request"])
                if item.get("root") is not None:
                    root = os.path.join(scratch, f"root-{item['root']}")
                    os.makedirs(root, exist_ok=True)
                    request["root"] = root
                if item.get("handle_from") in handles:
                    request["handle"] = handles[item["handle_from"]]
                for key in ("session", "source"):  # a destination this backend named
                    if isinstance(request.get(key), str) and request[key] in chosen:
                        request[key] = chosen[request[key]]
                request_id, line = backend.ask(request)
                answer = parse_answer(line, request_id)
                op = str(request.get("op"))
                result = answer.get("ok")
                if op in HANDLE_OPS and isinstance(result, dict) and "handle" in result:
                    handles[index] = result["handle"]
                want = expected[index].get("ok")
                if item.get("chooses_id") and isinstance(want, str) and isinstance(result, str):
                    chosen[want] = result  # which id is the backend's choice (FORK-1)
                problem = unordered(op, answer) or difference(
                    op, expected[index], as_recorded(op, answer, chosen)
                )
                if problem is not None:
                    print(f"the failure shows: answer {index + 1} of {len(requests)} (process "
                          f"{number}, request id {request_id}) is {problem}:")  # fmt: skip
                    print(f"  request:  {shown(request)}")
                    print(f"  expected: {answer_text(expected[index])}")
                    print(f"  actual:   {answer_text(answer)}")
                    return 1
                if last[number] == index:
                    backend.finish()
        except Unjudged as exc:
            print(f"could not judge: {exc}")
            log.flush()
            tail = Path(log_path).read_bytes().decode("utf-8", "replace").splitlines()
            if tail:
                print("the backends' stderr ends:")
                print("\n".join(f"    {line}" for line in tail[-STDERR_LINES:]))
            return 2
        finally:
            for backend in processes.values():
                backend.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"no difference: all {len(requests)} answers match the model's")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--command", help="the backend's command instead of the recorded one")
    parser.add_argument("--cwd", help="where to run it instead of the recorded directory")
    args = parser.parse_args(argv)
    bundle = json.loads((HERE / "bundle.json").read_text())
    expected = json.loads((HERE / "expected.json").read_text())
    requests = read_requests(HERE / "requests.jsonl")
    if args.command:
        bundle["command"] = shlex.split(args.command)
    if args.cwd:
        bundle["cwd"] = args.cwd
    elif not os.path.isdir(bundle["cwd"]):
        bundle["cwd"] = os.getcwd()
    processes = len({item["process"] for item in requests})
    print(f"sending {len(requests)} requests to {processes} backend process"
          f"{'' if processes == 1 else 'es'} of: {shlex.join(bundle['command'])}")  # fmt: skip
    print(f"  (in {bundle['cwd']}; the failure: {', '.join(expected['rules'])})")
    return run(bundle, requests, expected["answers"])


if __name__ == "__main__":
    sys.exit(main())
