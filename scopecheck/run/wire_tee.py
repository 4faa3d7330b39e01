#!/usr/bin/env python3
"""Run a backend command and log every protocol line it reads and writes, in one file.

    python wire_tee.py LOG CWD -- COMMAND ...

The recorder a machine-failure bundle is made with (:mod:`scopecheck.run.export_machine`): the
client starts this script where it would start the backend, so what the log holds is the
process protocol exactly as on the wire (docs/protocol.md), each line tagged with a token of
this process (its id and a random part: a pid may be reused within one replay).  Every
process of a replay -- the probe, each world's, each restart's, PROC-3 -- appends to the same
``LOG``, one ``os.write`` per record on an ``O_APPEND`` descriptor, and a request is logged
before the backend gets it and an answer before the client does: the client waits for each
answer before its next request, so the log's order is the order of the exchange across
processes.  A backend's bytes that are not UTF-8 are kept as the lone
surrogates of ``surrogateescape``, escaped, so the log is JSON lines whatever it said.

Closing this script's stdin closes the backend's; it exits with the backend's status.  It
needs the standard library alone: it runs as a file, never imported, so it starts without
scopecheck's imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import uuid
from typing import IO


def log_line(fd: int, pid: str, direction: str, line: bytes) -> None:
    """Append one record: ``{"pid", "dir": "request" or "answer", "line"}``."""
    text = line.decode("utf-8", "surrogateescape")
    record = json.dumps({"pid": pid, "dir": direction, "line": text}, ensure_ascii=True)
    os.write(fd, (record + "\n").encode("ascii"))


def forward_requests(fd: int, pid: str, source: IO[bytes], child: subprocess.Popen[bytes]) -> None:
    """Pass every line of ``source`` on to the backend, logged first; then close its stdin."""
    assert child.stdin is not None
    for line in source:
        log_line(fd, pid, "request", line)
        try:
            child.stdin.write(line)
            child.stdin.flush()
        except (BrokenPipeError, ValueError):
            break
    with contextlib.suppress(BrokenPipeError):
        child.stdin.close()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: wire_tee.py LOG CWD -- COMMAND ...\n")
        return 2
    log, cwd, command = argv[0], argv[1], argv[3:]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        child = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command!r} in {cwd}: {exc}\n")
        return 127
    assert child.stdout is not None
    pid = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # a pid may be reused within one replay
    threading.Thread(
        target=forward_requests, args=(fd, pid, sys.stdin.buffer, child), daemon=True
    ).start()
    out = sys.stdout.buffer
    for line in child.stdout:
        log_line(fd, pid, "answer", line)
        try:
            out.write(line)
            out.flush()
        except (BrokenPipeError, ValueError):
            break
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
