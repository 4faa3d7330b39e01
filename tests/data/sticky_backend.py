"""A backend process that keeps its first root's state across a later ``hello`` -- a bug the
warm process path must report (PROC-8), never hide.

``python sticky_backend.py``: ``scopecheck serve``'s server over the file-backed example,
except that a later ``hello`` answers as usual but stays at the first root with its repository.
"""

import os
import sys

from scopecheck.examples.good_file_backend import make_backend
from scopecheck.process.protocol import loads_line
from scopecheck.process.server import Server, write_all


class Sticky(Server):
    def op_hello(self, request):  # type: ignore[no-untyped-def]
        if self._repo is None:
            return super().op_hello(request)
        return {"protocol": 1, "name": "sticky", "fork": False}

    def op_close_repository(self, request):  # type: ignore[no-untyped-def]
        return None  # keeps every Session open and in memory


out = os.dup(1)
os.dup2(2, 1)
server = Sticky(make_backend, "sticky")
for line in sys.stdin.buffer:
    write_all(out, server.respond(loads_line(line)))
