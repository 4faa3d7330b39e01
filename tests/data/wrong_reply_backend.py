"""A backend process that answers one request wrongly, for the protocol-failure checks.

``python wrong_reply_backend.py [N]``: ``scopecheck serve``'s server over the file-backed
example, except that the ``N``-th commit this process receives (default 3) is answered with
the previous request's id, after saying so on stderr -- a backend bug the client must report
once, as a protocol error with that stderr line (PROC-2).
"""

import os
import sys

from scopecheck.examples.good_file_backend import make_backend
from scopecheck.process.protocol import loads_line
from scopecheck.process.server import Server, write_all

wrong = int(sys.argv[1]) if len(sys.argv) > 1 else 3
out = os.dup(1)
os.dup2(2, 1)
server = Server(make_backend, "wrong-reply")
commits = 0
for line in sys.stdin.buffer:
    request = loads_line(line)
    answer = server.respond(request)
    if request.get("op") == "commit":
        commits += 1
        if commits == wrong:
            print(f"wrong-reply: answering commit {commits} with id {request['id'] - 1}",
                  file=sys.stderr, flush=True)  # fmt: skip
            answer = answer.replace(
                b'{"id":%d,' % request["id"], b'{"id":%d,' % (request["id"] - 1)
            )
    write_all(out, answer)
