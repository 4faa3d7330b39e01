"""The client side of the process protocol: a backend in a child process, seen as a Repository.

:class:`BackendProcess` starts the command, says hello with the root directory, and sends one
request at a time, waiting for its answer (with a timeout: a backend that hangs is a protocol
error, PROC-2).  :class:`ProcessRepository` and :class:`ProcessStorage` implement the
``Repository`` and ``Storage`` protocols over it, so every machine, the conformance suite and
``validate`` run unchanged.  :class:`ProcessWorld` owns a directory and the child: a restart
stops the child and starts a new one over the same directory (PROC-3) -- a real restart.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from scopecheck.models import wire
from scopecheck.models.errors import ProtocolError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.records import (
    Committed,
    EntryRecord,
    ListElement,
    Order,
    Snapshot,
    Stats,
    UsageRecord,
    ValueRecord,
)
from scopecheck.models.scope import Scope
from scopecheck.process.protocol import PROTOCOL_VERSION, decode_response, encode_request

#: Seconds a backend may take to answer one request.
REQUEST_TIMEOUT = 60.0
#: Seconds a backend may take to exit after its stdin closes, before it is killed.
EXIT_TIMEOUT = 10.0


class BackendProcess:
    """One running backend: ``request(op, **fields)`` returns the result or raises."""

    def __init__(
        self,
        command: Sequence[str],
        root: str,
        clock: Any,
        *,
        env: dict[str, str] | None = None,
        stderr: IO[bytes] | None = None,
        timeout: float = REQUEST_TIMEOUT,
        cwd: str | None = None,
    ) -> None:
        self.command = list(command)
        self.root = root
        self._clock = clock
        self._timeout = timeout
        self._next_id = 0
        self._lock = threading.Lock()
        self._owns_stderr = stderr is None
        self._stderr = stderr if stderr is not None else tempfile.TemporaryFile()  # noqa: SIM115
        self._buffer = b""
        try:
            self._child = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=cwd,
                env=env,
            )
        except OSError as exc:
            raise ProtocolError(f"cannot start {shlex.join(self.command)}: {exc}") from None
        hello = self.request("hello", protocol=PROTOCOL_VERSION, root=root)
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL_VERSION:
            self.stop()
            raise ProtocolError(
                f"{shlex.join(self.command)} answered hello with {hello!r}: scopecheck speaks "
                f"protocol {PROTOCOL_VERSION} (PROC-1)"
            )
        self.name = str(hello.get("name") or os.path.basename(self.command[-1]))
        self.fork = bool(hello.get("fork", False))

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def last_request_id(self) -> int:
        """The id of the last request sent (ids count up from 1 in each process)."""
        return self._next_id

    def stderr_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read()[-limit:].decode("utf-8", "replace")
        return ""

    def _died(self, op: str) -> ProtocolError:
        try:  # its stdout closed: it is exiting, give it a moment to be reaped
            status: int | None = self._child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        tail = self.stderr_tail().strip()
        said = f"; its stderr ends: {tail}" if tail else ""
        return ProtocolError(
            f"the backend process exited (status {status}) during {op}{said}", op=op
        )

    def _read_line(self, op: str) -> bytes:
        stdout = self._child.stdout
        assert stdout is not None
        deadline = time.monotonic() + self._timeout
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProtocolError(
                        f"the backend did not answer {op} within {self._timeout:g}s", op=op
                    )
                if not selector.select(left):
                    continue
                chunk = os.read(stdout.fileno(), 1 << 16)
                if not chunk:
                    raise self._died(op)
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(self, op: str, **fields: Any) -> Any:
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            line = encode_request(request_id, op, self._clock(), **fields)
            stdin = self._child.stdin
            assert stdin is not None
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, ValueError):
                raise self._died(op) from None
            return decode_response(self._read_line(op), request_id, op)

    def stop(self) -> int | None:
        """Close stdin (the backend's cue to exit), wait, kill if it lingers; its status."""
        with contextlib.suppress(OSError, ValueError):
            if self._child.stdin is not None:
                self._child.stdin.close()
        try:
            return self._child.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._child.kill()
            return self._child.wait()
        finally:
            with contextlib.suppress(OSError, ValueError):
                if self._child.stdout is not None:
                    self._child.stdout.close()
                if self._owns_stderr:
                    self._stderr.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._child.kill()
        self.stop()


def _shape(op: str, call: Any) -> Any:
    """Run a result decoder; a :class:`~scopecheck.models.wire.WireError` is the backend's."""
    try:
        return call()
    except (wire.WireError, TypeError, KeyError, AttributeError) as exc:
        raise ProtocolError(f"the result of {op} has the wrong shape: {exc}", op=op) from None


class ProcessStorage:
    """One open Session in the backend process (the ``Storage`` protocol)."""

    def __init__(self, process: BackendProcess, session_id: str, opened: Any) -> None:
        self._process = process
        self._session_id = session_id
        self._handle = _shape("open", lambda: int(opened["handle"]))
        self.parent_session_id: str | None = opened.get("parent_session_id")

    @property
    def session_id(self) -> str:
        return self._session_id

    def _ask(self, op: str, **fields: Any) -> Any:
        return self._process.request(op, handle=self._handle, **fields)

    def commit(self, writes: Sequence[Any]) -> tuple[Committed, ...]:
        items = list(writes) if isinstance(writes, (list, tuple)) else writes
        sent = [wire.write_to_json(w) for w in items] if isinstance(items, list) else items
        result = self._ask("commit", writes=sent)

        def decode() -> tuple[Committed, ...]:
            if not isinstance(result, list) or len(result) != len(sent):
                raise wire.WireError("commit", f"expected {len(sent)} committed writes")
            return tuple(
                Committed(*wire.committed_from_json(c, f"commit[{i}]"), w)
                for i, (c, w) in enumerate(zip(result, items, strict=True))
            )

        return _shape("commit", decode)  # type: ignore[no-any-return]

    def get_value(self, address: Any) -> ValueRecord | None:
        found = self._ask("get_value", address=wire.address_to_json(address))
        return (
            None
            if found is None
            else _shape("get_value", lambda: wire.value_record_from_json(found))
        )

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        rows = self._ask(
            "scan_values", namespace=namespace, prefix=prefix, scope=wire.scope_to_json(scope)
        )
        return _shape(  # type: ignore[no-any-return]
            "scan_values",
            lambda: tuple((str(k), wire.value_record_from_json(r)) for k, r in rows),
        )

    def read_list(
        self,
        address: Any,
        *,
        cursor: int | None = None,
        order: Order = "asc",
        limit: int | None = None,
        stop_at_tag: str | None = None,
    ) -> tuple[ListElement, ...]:
        page = self._ask(
            "read_list",
            address=wire.address_to_json(address),
            cursor=cursor,
            order=order,
            limit=limit,
            stop_at_tag=stop_at_tag,
        )
        return _shape(  # type: ignore[no-any-return]
            "read_list", lambda: tuple(wire.element_from_json(e) for e in page)
        )

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        found = self._ask("get_entry", entry_id=entry_id)
        return None if found is None else _shape("get_entry", lambda: wire.entry_from_json(found))

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        found = self._ask("get_usage", usage_id=usage_id)
        return None if found is None else _shape("get_usage", lambda: wire.usage_from_json(found))

    def stats(self) -> Stats:
        found = self._ask("stats")
        return _shape("stats", lambda: wire.stats_from_json(found))  # type: ignore[no-any-return]

    def snapshot(self) -> Snapshot:
        found = self._ask("snapshot")
        return _shape("snapshot", lambda: wire.snapshot_from_json(found))  # type: ignore[no-any-return]

    def close(self) -> None:
        self._ask("close")


class ProcessRepository:
    """The backend process's repository (the ``Repository`` protocol)."""

    def __init__(self, process: BackendProcess) -> None:
        self.process = process

    @property
    def supports_fork(self) -> bool:
        """Whether the backend said at hello that it forks."""
        return bool(self.process.fork)

    def create(self, session_id: str) -> ProcessStorage:
        return ProcessStorage(
            self.process, session_id, self.process.request("create", session=session_id)
        )

    def open(self, session_id: str) -> ProcessStorage:
        return ProcessStorage(
            self.process, session_id, self.process.request("open", session=session_id)
        )

    def list(self) -> list[str]:
        found = self.process.request("list")
        return _shape("list", lambda: [str(s) for s in found])  # type: ignore[no-any-return]

    def delete(self, session_id: str) -> None:
        self.process.request("delete", session=session_id)

    def fork(self, source_id: str, options: ForkOptions) -> str:
        found = self.process.request(
            "fork", source=source_id, options=wire.fork_options_to_json(options)
        )
        if not isinstance(found, str):
            raise ProtocolError(f"the result of fork is {found!r}, not a Session id", op="fork")
        return found

    def close(self) -> None:
        self.process.request("close_repository")


class ProcessWorld:
    """A world over a backend command: a fresh directory (under ``$SCOPECHECK_SCRATCH`` if
    set), one child at a time over it (run in ``cwd``, the directory the command was given
    in, so relative paths in it mean what the user typed), a restart that stops the child and starts
    a new one, and a cleanup that stops the child and removes the directory."""

    def __init__(
        self, command: Sequence[str], clock: Any, counts: Any = None, cwd: str | None = None
    ) -> None:
        self._command = list(command)
        self._cwd = cwd
        self._clock = clock
        self.counts = counts
        if counts is not None:
            counts.worlds += 1
        scratch = os.environ.get("SCOPECHECK_SCRATCH") or None
        self.root = tempfile.mkdtemp(prefix="scopecheck-process-", dir=scratch)
        try:
            self._repo = self._start()
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def disk_root(self) -> str:
        """The directory the child keeps its files in: HYGIENE checks."""
        return self.root

    def _start(self) -> ProcessRepository:
        return ProcessRepository(
            BackendProcess(self._command, self.root, self._clock, cwd=self._cwd)
        )

    def repository(self) -> ProcessRepository:
        return self._repo

    def restart(self) -> ProcessRepository:
        """Stop the child (its open handles die with it) and start a new one (PROC-3)."""
        with contextlib.suppress(ProtocolError):
            self._repo.close()
        self._repo.process.stop()
        if self.counts is not None:
            self.counts.restarts += 1
        self._repo = self._start()
        return self._repo

    def cleanup(self) -> None:
        try:
            with contextlib.suppress(ProtocolError):
                self._repo.close()
            self._repo.process.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
