"""A correct backend written to an older page of the process protocol, for the one-failure
checks: ``scopecheck serve``'s server over the file-backed example, except that every usage
row it answers still carries the ``timestamp`` field the protocol no longer has.  Its storage
is right; only its wire is not -- one protocol failure (PROC-2), never a crash rule.
"""

import os
import sys

import orjson

from scopecheck.examples.good_file_backend import make_backend
from scopecheck.process.protocol import loads_line
from scopecheck.process.server import Server, write_all


def _old(answer: bytes) -> bytes:
    """``answer`` with a ``timestamp`` in each usage row of a snapshot."""
    message = orjson.loads(answer)
    result = message.get("ok")
    if isinstance(result, dict) and isinstance(result.get("usage"), list):
        for row in result["usage"]:
            if isinstance(row, dict):
                row["timestamp"] = 0
        return orjson.dumps(message) + b"\n"
    return answer


out = os.dup(1)
os.dup2(2, 1)
server = Server(make_backend, "old-protocol")
for line in sys.stdin.buffer:
    write_all(out, _old(server.respond(loads_line(line))))
