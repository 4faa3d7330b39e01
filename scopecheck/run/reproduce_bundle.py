#!/usr/bin/env python3
"""Reopen a copy of this bundle's image with the backend and show the failure, if it is
still there.

    python reproduce.py                      # exit 1 while it shows, 0 once it does not
    python reproduce.py --command 'node backend.js' --cwd ~/src/store   # another build of it

It needs Python 3.8 or newer and nothing else: it speaks the backend process protocol
(scopecheck's docs/protocol.md) to the backend's own command.  For a Python factory that
command is ``python -m scopecheck serve SPEC``, run by the Python that made the bundle (its
``bundle.json`` says which; ``--python`` gives another), so only the backend's environment
needs scopecheck, never the Python running this script.  Every run reopens a fresh copy of
``image/``: the bundle itself is never changed.

What it checks is what scopecheck's crash checks ask of a reopen (``expected.json`` holds the
model's states): the backend opens the copy and lists and opens the Session without an error;
the Session is one of the states the model allows at the crash point (every acknowledged
step present, none partly visible); then, where ``expected.json`` asks for it, the first commit
gets a sequence number no acknowledged write used, and reopening once more gives the same
state with that commit.  A crash during recovery first reopens ``image-before-recovery/``: the
state that uninterrupted recovery gives is the one the interrupted one must give too.

The image is what a crash left, or what a run with an I/O fault or a kill left (or a power
loss of it); for those ``expected.json`` holds the states the model allows after that run, and
nothing is committed after the reopen.

Exit status: 1 the failure shows, 0 it does not, 2 it could not be judged (the backend did
not start, or broke the protocol, or the failure is in what a run answered rather than in a
file it left -- the message says which).
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
from typing import Any

HERE = Path(__file__).resolve().parent
#: Seconds to wait for one answer, and for the backend to exit once its stdin is closed.
ANSWER_TIMEOUT = 60.0
EXIT_TIMEOUT = 10.0
#: The clock the requests carry (Unix ms): after every commit of the workload.
NOW = 1800000000000
#: The write of the first commit after recovery (CRASH-FS-3, CRASH-FS-4).
PROBE = {
    "kind": "set",
    "scope": None,
    "namespace": "reproduce",
    "key": "probe",
    "value": '"after recovery"',
}


class Unjudged(Exception):
    """The backend could not be asked: it did not start, answered outside the protocol, or
    did not answer in time.  Nothing is said about the loss (exit 2)."""


class Refused(Exception):
    """The backend answered a request with an error: the reopen failed."""

    def __init__(self, op: str, error: Any) -> None:
        super().__init__(f"{op} answered {error.get('code')}: {error.get('message')}")
        self.error = error


class Backend:
    """One backend process speaking protocol 1 over its stdin and stdout."""

    def __init__(self, command: list[str], cwd: str, log: Any) -> None:
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

    def call(self, op: str, **fields: Any) -> Any:
        request_id, self.next_id = self.next_id, self.next_id + 1
        line = json.dumps({"id": request_id, "op": op, "now": NOW, **fields}) + "\n"
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line.encode())
            self.process.stdin.flush()
            answer = self.lines.get(timeout=ANSWER_TIMEOUT)
        except (OSError, queue.Empty):
            raise Unjudged(
                f"the backend did not answer {op} within {ANSWER_TIMEOUT:.0f} s"
            ) from None
        if not answer:
            raise Unjudged(f"the backend exited instead of answering {op}")
        try:
            response = json.loads(answer)
        except ValueError:
            raise Unjudged(f"the backend answered {op} with a line that is not JSON") from None
        if not isinstance(response, dict) or response.get("id") != request_id:
            raise Unjudged(f"the backend answered {op} with {answer[:200]!r}")
        if "error" in response:
            raise Refused(op, response["error"] or {})
        return response.get("ok")

    def close(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=EXIT_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def read_session(bundle: dict[str, Any], root: str, log: Any) -> dict[str, Any]:
    """Reopen ``root`` in a new backend process and read the Session: ``{"present": bool,
    "state": snapshot or None, "error": text or None}``; with ``probe``, commit the probe and
    read it back after a second reopen."""
    session = bundle["session"]
    found: dict[str, Any] = {"present": False, "state": None, "error": None}
    backend = Backend(bundle["command"], bundle["cwd"], log)
    try:
        backend.call("hello", protocol=1, root=root)
        found["present"] = session in (backend.call("list") or [])
        if not found["present"]:
            backend.call("close_repository")
            return found
        handle = backend.call("open", session=session)["handle"]
        found["state"] = backend.call("snapshot", handle=handle)
        if bundle.get("probe"):
            found["committed"] = backend.call("commit", handle=handle, writes=[PROBE])
            found["after_commit"] = backend.call("snapshot", handle=handle)
            backend.call("close", handle=handle)
        backend.call("close_repository")
    except Refused as exc:
        found["error"] = str(exc)
    finally:
        backend.close()
    if bundle.get("probe") and "after_commit" in found:
        again = Backend(bundle["command"], bundle["cwd"], log)
        try:
            again.call("hello", protocol=1, root=root)
            handle = again.call("open", session=session)["handle"]
            found["reopened"] = again.call("snapshot", handle=handle)
            again.call("close_repository")
        except Refused as exc:
            found["error"] = f"the second reopen: {exc}"
        finally:
            again.close()
    return found


def difference(got: Any, want: Any) -> list[str]:
    """What differs between two snapshots, field by field, records by id or address."""
    if want is None or got is None:
        return [f"  the Session is {'absent' if got is None else 'present'}, the model's is "
                f"{'absent' if want is None else 'present'}"]  # fmt: skip
    lines: list[str] = []
    for field in ("entries", "usage", "values", "lists"):

        def key(item: Any) -> str:
            return json.dumps(item.get("id") if isinstance(item, dict) else item[:3])

        mine = {key(item): item for item in got.get(field) or []}
        theirs = {key(item): item for item in want.get(field) or []}
        for name in theirs.keys() - mine.keys():
            lines.append(f"  {field}: {name} is missing (the model has {json.dumps(theirs[name])})")
        for name in mine.keys() - theirs.keys():
            lines.append(f"  {field}: {name} should not be there ({json.dumps(mine[name])})")
        for name in mine.keys() & theirs.keys():
            if mine[name] != theirs[name]:
                lines.append(f"  {field}: {name} is {json.dumps(mine[name])}, the model's "
                             f"{json.dumps(theirs[name])}")  # fmt: skip
    if got.get("stats") != want.get("stats"):
        lines.append(f"  stats: {json.dumps(got.get('stats'))}, the model's "
                     f"{json.dumps(want.get('stats'))}")  # fmt: skip
    return sorted(lines) or ["  (no difference in the fields compared)"]


def judge(bundle: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The losses ``actual`` shows against ``expected`` (an empty list: none)."""
    allowed = expected["allowed"]
    if actual["error"] and actual["state"] is None:
        return [f"reopening the image failed: {actual['error']}"]
    if not actual["present"]:
        if None in allowed:
            return []
        return ["the Session is gone, though its create was acknowledged"]
    state = actual["state"]
    if state not in allowed:
        nearest = min((s for s in allowed if s is not None), default=None,
                      key=lambda s: len(difference(state, s)))  # fmt: skip
        return [
            f"the reopened Session is none of the {len(allowed)} states the model allows "
            f"(after {expected.get('after')}); against the nearest:",
            *difference(state, nearest),
        ]
    if actual["error"]:
        return [f"after recovery, {actual['error']}"]
    if bundle.get("probe") and "committed" in actual:
        floor = expected["next_seqs"][allowed.index(state)]
        first = (actual["committed"] or [{}])[0].get("seq")
        if not isinstance(first, int) or first < floor:
            return [
                f"the first commit after recovery got seq {first}, but the recovered state's "
                f"writes used every seq below {floor}: a sequence number is reused"
            ]
        if actual.get("reopened") != actual.get("after_commit"):
            return ["reopening once more gives another state than the one after the first "
                    "commit: recovery is not idempotent, or that commit was lost:",
                    *difference(actual.get("reopened"), actual.get("after_commit"))]  # fmt: skip
    return []


def reopen_copy(bundle: dict[str, Any], image: Path, log: Any) -> dict[str, Any]:
    scratch = tempfile.mkdtemp(prefix="reproduce-")
    try:
        root = os.path.join(scratch, "root")
        shutil.copytree(image, root, symlinks=True)
        return read_session(bundle, root, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def interpreter(bundle: dict[str, Any], given: str | None) -> str:
    """The Python that serves a Python backend (``{python}`` in the command): the one given,
    else the one that made the bundle (it has scopecheck and the backend's packages; this
    script itself needs neither), else this one."""
    if given:
        return given
    recorded = bundle.get("python")
    if isinstance(recorded, str) and os.path.exists(recorded):
        return recorded
    if recorded and "{python}" in bundle["command"]:
        print(f"the Python that made this bundle ({recorded}) is not here: the backend runs "
              f"under this one ({sys.executable}); give --python for another")  # fmt: skip
    return sys.executable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", help="the backend's command instead of the recorded one")
    parser.add_argument("--cwd", help="where to run it instead of the recorded directory")
    parser.add_argument(
        "--python",
        help="the Python that runs a Python backend (one with "
        "scopecheck and the backend's packages) instead of the recorded one",
    )
    parser.add_argument("--write-actual", metavar="FILE", help="write what the reopen gave")
    args = parser.parse_args(argv)
    bundle = json.loads((HERE / "bundle.json").read_text())
    if bundle.get("unjudged"):
        print(f"could not judge: {bundle['unjudged']}")
        return 2
    expected = json.loads((HERE / "expected.json").read_text())
    if args.command:
        bundle["command"] = shlex.split(args.command)
    python = interpreter(bundle, args.python)
    bundle["command"] = [python if part == "{python}" else part
                         for part in bundle["command"]]  # fmt: skip
    if args.cwd:
        bundle["cwd"] = args.cwd
    elif not os.path.isdir(bundle["cwd"]):
        bundle["cwd"] = os.getcwd()
    print(f"reopening a copy of {HERE / 'image'} with: {shlex.join(bundle['command'])}")
    print(f"  (in {bundle['cwd']}; the backend's stderr goes to {HERE / 'stderr.txt'})")
    with open(HERE / "stderr.txt", "wb") as log:
        try:
            if expected.get("narrow_by"):
                first = reopen_copy(bundle, HERE / expected["narrow_by"], log)
                same = [s for s in expected["allowed"] if s == first["state"]]
                if first["present"] and same:
                    print(f"{expected['narrow_by']}/ recovers, uninterrupted, to one allowed "
                          "state: the interrupted recovery must give that one")  # fmt: skip
                    expected = {**expected, "allowed": same}
            actual = reopen_copy(bundle, HERE / "image", log)
        except Unjudged as exc:
            print(f"could not judge: {exc}")
            return 2
    if args.write_actual:
        Path(args.write_actual).write_text(json.dumps(actual, indent=1) + "\n")
    problems = judge(bundle, expected, actual)
    if problems:
        print(f"the failure shows ({expected['rule']}):")
        print("\n".join(problems))
        return 1
    print("the failure no longer shows: the reopened Session is one the model allows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
