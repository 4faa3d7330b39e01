"""A backend process that answers bad values once a reopen recovered a crash: the protocol
client's side of what a reopened store may give back.

``python garbling_proxy.py KIND``: ``scopecheck serve``'s server over the sqlite3 example,
except that over a root whose database has a hot journal when ``hello`` names it (a crash cut
a transaction short), its answer to ``snapshot`` is changed on the way out:

* ``corrupt_json``: one more value, whose text is not JSON;
* ``huge``: one more value of 24 MiB;
* ``lone_surrogate``: one more entry and value, holding the escape ``\\ud800``;
* ``wrong_types``: a number where an entry is expected (outside the protocol: PROC-2);
* ``list_for_dict``: a list where the stats object is expected (PROC-2);
* ``invalid_utf8``: a value string holding the raw byte 0xFF, which no JSON line may (PROC-2).
"""

import glob
import json
import os
import sys

from scopecheck.examples.sqlite3_backend import make_backend
from scopecheck.process.protocol import loads_line
from scopecheck.process.server import Server, write_all

KIND = sys.argv[1]
HUGE = 24 << 20


def garbled(answer: bytes) -> bytes:
    body = json.loads(answer)
    if "ok" not in body:
        return answer
    snapshot = body["ok"]
    extra = {"seq": 1, "value": '{"a": 1,,'}
    if KIND == "huge":
        extra["value"] = '"' + "x" * HUGE + '"'
    elif KIND == "lone_surrogate":
        extra["value"] = '"\ud800"'
        snapshot["entries"].append(
            {"id": "e\ud800", "parent_id": None, "type": "message", "payload": "{}", "seq": 1,
             "timestamp": 0}
        )  # fmt: skip
    elif KIND == "wrong_types":
        snapshot["entries"].append(5)
    elif KIND == "list_for_dict":
        snapshot["stats"] = [1, 2]
    elif KIND == "invalid_utf8":
        extra["value"] = "INVALID"
    snapshot["values"].append([None, "garbage", "k", extra])
    line = json.dumps(body, separators=(",", ":")).encode() + b"\n"
    return line.replace(b'"INVALID"', b'"\xff"') if KIND == "invalid_utf8" else line


out = os.dup(1)
os.dup2(2, 1)
server = Server(make_backend, "garbling-proxy")
hot = False
for line in sys.stdin.buffer:
    request = loads_line(line)
    if isinstance(request, dict) and request.get("op") == "hello":
        journals = glob.glob(os.path.join(str(request.get("root")), "*.db-journal"))
        hot = any(os.path.getsize(path) > 0 for path in journals)
    answer = server.respond(request)
    if hot and isinstance(request, dict) and request.get("op") == "snapshot":
        answer = garbled(answer)
    write_all(out, answer)
