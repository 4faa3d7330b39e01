"""A backend process that speaks the protocol wrongly after its hello, for the protocol checks.

``python bad_protocol_backend.py MODE``: ``garbage`` answers with a line that is not JSON,
``wrong-id`` with another request's id, ``exit`` exits in the middle of a request, ``version``
claims protocol 99 in its hello.
"""

import json
import sys

mode = sys.argv[1]
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "hello":
        version = 99 if mode == "version" else 1
        answer = {"id": request["id"], "ok": {"protocol": version, "name": "bad", "fork": False}}
        print(json.dumps(answer), flush=True)
        continue
    if mode == "garbage":
        print("this is not json", flush=True)
    elif mode == "wrong-id":
        print(json.dumps({"id": request["id"] + 41, "ok": None}), flush=True)
    elif mode == "exit":
        sys.exit(3)
    else:
        print(
            json.dumps({"id": request["id"], "error": {"code": "nonsense", "message": "?"}}),
            flush=True,
        )
