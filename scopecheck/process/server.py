"""``scopecheck serve PATH_OR_MODULE:FACTORY``: a Python factory behind the process protocol.

The child a process world starts for a Python backend: it reads requests from stdin, runs them
on the factory's repository and writes each response with **one** ``write`` system call on the
original stdout, so a syscall trace shows exactly when each acknowledgement left the process
(PROC-4).  Anything the backend prints goes to stderr instead; stdout carries protocol lines
only.

The factory gets the ``root`` the hello request names (``make_backend(clock, *, root)``; an
``fs`` factory gets the real :class:`~scopecheck.impl.fs.OsFileSystem`), and its clock returns
the ``now`` of the request being served, so every timestamp is the client's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO, TypeGuard

import orjson

from scopecheck.backends.factory import factory_kind
from scopecheck.models import wire
from scopecheck.models.errors import ScopecheckError, UsageError
from scopecheck.models.records import Committed
from scopecheck.process.protocol import OPS, PROTOCOL_VERSION, encode_response, loads_line


class Server:
    """Serves one repository; ``handle(request) -> response object``."""

    def __init__(self, factory: Any, name: str) -> None:
        self._factory = factory
        self._name = name
        self._now = 0
        self._repo: Any = None
        self._handles: dict[int, Any] = {}
        self._next_handle = 1

    def clock(self) -> int:
        return self._now

    def respond(self, request: object) -> bytes:
        """The response line to one request (PROC-6): a line without an integer ``id`` is
        answered with id null and ``invalid_payload``, and so is ``true``, which Python
        counts as an int (and ``1.0``, which orjson reads as a float)."""
        if not isinstance(request, dict) or not is_integer(request.get("id")):
            return encode_response(
                None,
                error=_error("invalid_payload", "a request is one JSON object with an integer id"),
            )
        request_id = request["id"]
        op = request.get("op")
        if op not in OPS:
            return encode_response(request_id, error=_error("invalid_payload", f"no op {op!r}"))
        if is_integer(request.get("now")):
            self._now = request["now"]
        try:
            result = getattr(self, f"op_{op}")(request)
        except ScopecheckError as exc:
            return encode_response(request_id, error=wire.error_to_json(exc))
        except wire.NotEncodable as exc:  # what the backend returned, not the request
            return encode_response(request_id, error=_error("corrupt", _not_carried(op, exc)))
        except wire.WireError as exc:
            return encode_response(request_id, error=_error("invalid_payload", str(exc)))
        except Exception as exc:  # a bug in the backend: reported, and the server goes on
            message = f"the backend raised {exc!r} in {op}"
            details = {"traceback": traceback.format_exc()[-4000:]}
            return encode_response(
                request_id, error={"code": "protocol_error", "message": message, "details": details}
            )
        return encode_response(request_id, ok=result)

    # -- repository ----------------------------------------------------------------------

    def op_hello(self, request: dict[str, Any]) -> Any:
        """(Re)start over ``root``: a hello after the first closes every handle and the
        repository, then opens a new one there -- how one process checks many crash images."""
        if request.get("protocol") != PROTOCOL_VERSION:
            raise UsageError("invalid_payload", f"this server speaks protocol {PROTOCOL_VERSION}")
        self._drop()
        root = request.get("root")
        kind = factory_kind(self._factory)
        if kind == "plain":
            self._repo = self._factory(self.clock)
        elif kind == "root":
            self._repo = self._factory(self.clock, root=root)
        else:
            from scopecheck.impl.fs import OsFileSystem

            self._repo = self._factory(self.clock, fs=OsFileSystem(), root=root)
        fork = callable(getattr(self._repo, "fork", None))
        return {"protocol": PROTOCOL_VERSION, "name": self._name, "fork": fork}

    def _drop(self) -> None:
        for storage in self._handles.values():
            with contextlib.suppress(Exception):
                storage.close()
        self._handles.clear()
        if self._repo is not None:
            with contextlib.suppress(Exception):
                self._repo.close()
            self._repo = None

    def _handle_of(self, storage: Any) -> dict[str, Any]:
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = storage
        return {"handle": handle, "parent_session_id": getattr(storage, "parent_session_id", None)}

    def op_create(self, request: dict[str, Any]) -> Any:
        return self._handle_of(self._repo.create(request["session"]))

    def op_open(self, request: dict[str, Any]) -> Any:
        return self._handle_of(self._repo.open(request["session"]))

    def op_list(self, request: dict[str, Any]) -> Any:
        found = list(self._repo.list())
        if not all(isinstance(session_id, str) for session_id in found):
            raise wire.NotEncodable("list", "expected Session ids (strings)")
        return found

    def op_delete(self, request: dict[str, Any]) -> Any:
        self._repo.delete(request["session"])

    def op_fork(self, request: dict[str, Any]) -> Any:
        return self._repo.fork(request["source"], wire.fork_options_from_json(request["options"]))

    def op_close_repository(self, request: dict[str, Any]) -> Any:
        if self._repo is not None:
            self._repo.close()

    # -- storage -------------------------------------------------------------------------

    def _storage(self, request: dict[str, Any]) -> Any:
        handle = request.get("handle")
        # ``true`` and ``1.0`` are equal to 1 as dict keys, but are not the handle 1 (PROC-6)
        storage = self._handles.get(handle) if is_integer(handle) else None
        if storage is None:
            raise UsageError("invalid_payload", f"no handle {request.get('handle')!r}")
        return storage

    def op_commit(self, request: dict[str, Any]) -> Any:
        writes = [wire.write_from_json(w, f"writes[{i}]") for i, w in enumerate(request["writes"])]
        done: tuple[Committed, ...] = self._storage(request).commit(writes)
        return [wire.committed_to_json(c) for c in done]

    def op_get_value(self, request: dict[str, Any]) -> Any:
        found = self._storage(request).get_value(wire.value_address_from_json(request["address"]))
        return None if found is None else wire.value_record_to_json(found)

    def op_scan_values(self, request: dict[str, Any]) -> Any:
        scope = request.get("scope")
        rows = self._storage(request).scan_values(
            request["namespace"],
            request.get("prefix", ""),
            None if scope is None else wire.scope_from_json("scope", scope),
        )
        return [[key, wire.value_record_to_json(record)] for key, record in rows]

    def op_read_list(self, request: dict[str, Any]) -> Any:
        page = self._storage(request).read_list(
            wire.list_address_from_json(request["address"]),
            cursor=request.get("cursor"),
            order=request.get("order", "asc"),
            limit=request.get("limit"),
            stop_at_tag=request.get("stop_at_tag"),
        )
        return [wire.element_to_json(e) for e in page]

    def op_get_entry(self, request: dict[str, Any]) -> Any:
        found = self._storage(request).get_entry(request["entry_id"])
        return None if found is None else wire.entry_to_json(found)

    def op_get_usage(self, request: dict[str, Any]) -> Any:
        found = self._storage(request).get_usage(request["usage_id"])
        return None if found is None else wire.usage_to_json(found)

    def op_stats(self, request: dict[str, Any]) -> Any:
        return wire.stats_to_json(self._storage(request).stats())

    def op_snapshot(self, request: dict[str, Any]) -> Any:
        return wire.snapshot_to_json(self._storage(request).snapshot())

    def op_close(self, request: dict[str, Any]) -> Any:
        self._storage(request).close()


def _not_carried(op: str, exc: wire.NotEncodable) -> str:
    """Why a result of ``op`` is answered ``corrupt``: the backend returned something no
    contract record holds -- what a store does when it reads back a damaged file (a NULL
    where a payload was, a number for an id) -- so it is judged as the store's state, never
    as the backend speaking the protocol wrongly, which the user's Python code does not do."""
    return (
        f"{op}() returned {exc}: not what the contract's records hold (read back corrupt?), so "
        "scopecheck serve cannot pass it on"
    )


def is_integer(value: object) -> TypeGuard[int]:
    """A JSON integer as the protocol reads one: an int, and not a bool (Python's ``True`` is
    the int 1) -- orjson reads ``1.0`` and ``1e0`` as floats, so those are not ints either."""
    return isinstance(value, int) and not isinstance(value, bool)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "details": {}}


def write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd``: one system call unless the kernel takes less."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]


def serve(factory: Any, name: str, stdin: BinaryIO, out_fd: int) -> None:
    """Answer requests from ``stdin`` until it closes; responses go to ``out_fd``."""
    server = Server(factory, name)
    for line in stdin:
        try:
            request = loads_line(line)
        except orjson.JSONDecodeError:
            write_all(out_fd, encode_response(None, error=_error("invalid_payload", "not JSON")))
            continue
        write_all(out_fd, server.respond(request))


def main(spec: str, load: Callable[[str], tuple[str, Any]]) -> None:
    """Run ``spec``'s factory behind the protocol on this process's stdin and stdout."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the backend prints goes to stderr; stdout is the protocol's
    sys.stdout = sys.stderr
    name, factory = load(spec)
    serve(factory, name, sys.stdin.buffer, out_fd)
