"""The client side of the process protocol: a backend in a child process, seen as a Repository.

:class:`BackendProcess` starts the command, says hello with a root directory, and sends one
request at a time, waiting for its answer (with a timeout: a backend that hangs is a protocol
error, PROC-2).  :class:`ProcessRepository` and :class:`ProcessStorage` implement the
``Repository`` and ``Storage`` protocols over it, so every machine, the conformance suite and
``validate`` run unchanged.

:class:`ProcessWorld` owns a fresh directory and the child serving it; a :class:`ProcessPool`
owns the children of one command.  One child serves many worlds one after the other: at the end
of a world it closes the repository and goes back to the pool, and the next world tells it
``hello`` over its own fresh root (PROC-8).  A child that served a root before must hold no
Session there, so it is asked ``list`` first: state kept across ``hello`` is the backend's
finding, never hidden.  A restart never reuses a child: the old one is stopped and one that has
served no root starts over the same directory (PROC-3) -- the pool keeps one such spare started
ahead of need, so its start-up overlaps the world's work.

A protocol error is the backend's, once: the first one a child raises names what was sent, what
came back and the end of the child's stderr, marks the child broken (it is killed, never reused)
and, in a world made for the machines and the conformance suite (``escalate``), is raised as a
:class:`ProtocolFailure` -- a ``BaseException`` no check catches as a storage error, so
Hypothesis neither shrinks nor replays it and no model rule is blamed for it (PROC-2).
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import IO, Any, ClassVar, Literal

import attrs

from scopecheck.crashsim import shown
from scopecheck.models import wire
from scopecheck.models.errors import ProtocolError
from scopecheck.models.fork import ForkOptions, check_fork_options
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
from scopecheck.run.watchdog import doing

#: Seconds a backend may take to answer one request.
REQUEST_TIMEOUT = 60.0
#: Seconds a backend may take to exit after its stdin closes, before it is killed.
EXIT_TIMEOUT = 10.0
#: Lines of a backend's stderr a protocol error shows.
STDERR_LINES = 20
#: Characters of a request or a response a protocol error shows.
SHOWN = 600
#: Characters of a protocol error's message (the backend's own words in it included).
MESSAGE_LIMIT = 8000
#: Characters of the name a backend gives itself at hello.
NAME_LIMIT = 100


class ProtocolFailure(BaseException):
    """A backend process broke the protocol inside a world (PROC-2): ``error`` says how.

    A ``BaseException`` on purpose: raised where the machines and the conformance cases call
    the backend, it passes every ``except Exception`` (a check that expects a storage error, a
    racing writer, Hypothesis's failure handling), so the world stops at the first protocol
    error and it is reported once, as itself."""

    def __init__(self, error: ProtocolError, rule: str = "PROC-2") -> None:
        super().__init__(error.message)
        self.error = error
        self.rule = rule

    def __str__(self) -> str:
        return self.error.message


class BackendRaised(ProtocolError):
    """``scopecheck serve`` reported that the Python backend it serves raised an exception
    without a code (``protocol_error`` with the backend's ``traceback``): the backend's own
    answer -- a recovery that raised reading back a damaged file, say -- judged by the rule of
    the call that raised it (CRASH-FS-1 for a reopen), not a child speaking the protocol
    wrongly.  The child goes on serving.  In a world that escalates (the machines, the
    conformance suite) it stays a :class:`ProtocolFailure`, as every protocol error there."""


@attrs.define
class StartCount:
    """Backend processes started by this Python process (``scopecheck bench process``)."""

    count: int = 0


STARTS = StartCount()


def _indent(text: str, lines: int = STDERR_LINES) -> str:
    return "\n".join(f"    {line}" for line in text.rstrip("\n").splitlines()[-lines:])


def _shown(data: bytes | None) -> str:
    """A line sent or answered, as a protocol error shows it: its first :data:`SHOWN` bytes,
    bytes that are not UTF-8 as ``\\xNN`` (:func:`~scopecheck.crashsim.shown.data`)."""
    if data is None:
        return "(nothing)"
    return shown.data(data[:-1] if data.endswith(b"\n") else data, SHOWN)


class BackendProcess:
    """One running backend: ``request(op, **fields)`` returns the result or raises.

    With a ``root`` it says hello there at once (how every caller but the pool starts one);
    without, it is a spare that has served nothing yet, told :meth:`hello` when needed."""

    def __init__(
        self,
        command: Sequence[str],
        root: str | None,
        clock: Any,
        *,
        env: dict[str, str] | None = None,
        stderr: IO[bytes] | None = None,
        timeout: float = REQUEST_TIMEOUT,
        cwd: str | None = None,
    ) -> None:
        self.command = list(command)
        self.root = root
        self.clock = clock
        self._timeout = timeout
        self._next_id = 0
        self._lock = threading.Lock()
        self._owns_stderr = stderr is None
        self._stderr = stderr if stderr is not None else tempfile.TemporaryFile()  # noqa: SIM115
        self._buffer = b""
        self._sent: bytes | None = None
        self._answer: bytes | None = None
        #: The first protocol error this child raised: it is broken from then on.
        self.failure: ProtocolError | None = None
        #: Raise :class:`ProtocolFailure` instead of the :class:`ProtocolError` (see the module).
        self.escalate = False
        #: How many roots it was told ``hello`` over.
        self.hellos = 0
        #: Every root it was told ``hello`` over.
        self.served: set[str] = set()
        self.name = os.path.basename(self.command[-1]) if self.command else "backend"
        self.fork = False
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
        STARTS.count += 1
        assert self._child.stdout is not None
        self._stdout_fd = self._child.stdout.fileno()
        self._poller = select.poll()  # one for the child's life: a request is a write and a read
        self._poller.register(self._stdout_fd, select.POLLIN)
        if root is not None:
            try:
                self.hello(root)
            except BaseException:
                # Nobody holds a process whose constructor raised: it is stopped here, or it
                # would live on (under strace, still writing its trace file) while the caller
                # starts the next one.
                self.stop()
                raise

    def hello(self, root: str) -> None:
        """Move the child to ``root`` (PROC-1, PROC-8): its first hello, or a later one."""
        hello = self.request("hello", protocol=PROTOCOL_VERSION, root=root)
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL_VERSION:
            self.kill()
            raise self.fail(
                f"{shlex.join(self.command)} answered hello with {hello!r}: scopecheck speaks "
                f"protocol {PROTOCOL_VERSION} (PROC-1)",
                "hello",
            )
        self.root = root
        self.hellos += 1
        self.served.add(root)
        name = hello.get("name")
        if not isinstance(name, str) or not name:
            name = os.path.basename(self.command[-1])
        self.name = shown.text(name, NAME_LIMIT)
        self.fork = bool(hello.get("fork", False))

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def exited(self) -> bool:
        """Whether the child has exited."""
        return self._child.poll() is not None

    @property
    def last_request_id(self) -> int:
        """The id of the last request sent (ids count up from 1 in each process)."""
        return self._next_id

    def stderr_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode("utf-8", "replace")
        return ""

    def stderr_lines(self, count: int = STDERR_LINES) -> list[str]:
        """The last ``count`` lines the child wrote to its stderr."""
        return self.stderr_tail(limit=200 * count).rstrip("\n").splitlines()[-count:]

    def fail(self, message: str, op: str, *, rule: str = "PROC-2") -> ProtocolError:
        """The protocol error ``message`` with what was last sent and answered and the end of
        the child's stderr (PROC-2); the first one marks the child broken.  Returned, or raised
        as a :class:`ProtocolFailure` when the child ``escalate``s."""
        lines = self.stderr_lines()
        said = _indent("\n".join(lines)) if lines else "    (nothing)"
        message = shown.text(message, MESSAGE_LIMIT)  # it may quote what the backend said
        error = ProtocolError(
            f"{message}\n  sent:   {_shown(self._sent)}\n  answer: {_shown(self._answer)}\n"
            f"  stderr of {shlex.join(self.command)} ends:\n{said}",
            op=op,
            rule=rule,
        )
        if self.failure is None:
            self.failure = error
        if self.escalate:
            raise ProtocolFailure(error, rule)
        return error

    def _died(self, op: str) -> ProtocolError:
        try:  # its stdout closed: it is exiting, give it a moment to be reaped
            status: int | None = self._child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        return ProtocolError(f"the backend process exited (status {status}) during {op}", op=op)

    def _read_line(self, op: str) -> bytes:
        """The next line of the child's stdout, in time linear in its length whatever its
        size (a reopened store may answer with tens of megabytes): chunks are kept apart and
        only the new one is searched for the newline."""
        deadline = time.monotonic() + self._timeout
        chunks = [self._buffer]
        end = self._buffer.find(b"\n")
        while end < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                self._buffer = b"".join(chunks)
                raise ProtocolError(
                    f"the backend did not answer {op} within {self._timeout:g}s", op=op
                )
            if not self._poller.poll(left * 1000):
                continue
            chunk = os.read(self._stdout_fd, 1 << 20)
            if not chunk:
                self._buffer = b"".join(chunks)
                raise self._died(op)
            chunks.append(chunk)
            end = chunk.find(b"\n")
        last = chunks.pop()
        line = b"".join([*chunks, last[:end]])
        self._buffer = last[end + 1 :]
        return line

    def request(self, op: str, **fields: Any) -> Any:
        with self._lock:
            if self.failure is not None:  # nothing it says can be trusted now
                raise self.fail(f"the backend process broke the protocol before {op}", op)
            self._next_id += 1
            request_id = self._next_id
            line = encode_request(request_id, op, self.clock(), **fields)
            self._sent, self._answer = line, None
            stdin = self._child.stdin
            assert stdin is not None
            try:
                try:
                    stdin.write(line)
                    stdin.flush()
                except (BrokenPipeError, ValueError):
                    raise self._died(op) from None
                with doing(f"waiting for the backend's answer to {op} (pid {self.pid})"):
                    self._answer = self._read_line(op)
                return decode_response(self._answer, request_id, op)
            except ProtocolError as exc:
                trace = exc.details.get("traceback")
                raised = f"\n  traceback:\n{_indent(str(trace))}" if trace else ""
                if trace is not None and not self.escalate:
                    message = shown.text(exc.message, MESSAGE_LIMIT)
                    raise BackendRaised(f"{message}{raised}", op=op) from None
                raise self.fail(exc.message + raised, op) from None

    def stop(self) -> int | None:
        """Close stdin (the backend's cue to exit), wait, kill if it lingers; its status."""
        with contextlib.suppress(OSError, ValueError):
            if self._child.stdin is not None:
                self._child.stdin.close()
        # A blocking wait, woken by the exit itself (``wait(timeout=)`` polls with sleeps of up
        # to 50 ms), and a timer that kills a child still there after EXIT_TIMEOUT.
        lingering = threading.Timer(EXIT_TIMEOUT, self._kill_quietly)
        lingering.daemon = True
        lingering.start()
        try:
            return self._child.wait()
        finally:
            lingering.cancel()
            with contextlib.suppress(OSError, ValueError):
                if self._child.stdout is not None:
                    self._child.stdout.close()
                if self._owns_stderr:
                    self._stderr.close()

    def _kill_quietly(self) -> None:
        """SIGKILL the child and what it started: under strace the backend is strace's child,
        and killing strace alone would leave it running untraced (INSTALL-21)."""
        from scopecheck.run.stopping import descendants

        for pid in reversed(descendants(self._child.pid)):
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, OSError):
            self._child.kill()

    def kill(self) -> None:
        self._kill_quietly()
        self.stop()

    def stop_behind(self) -> None:
        """:meth:`stop` on a thread of its own: the caller goes on while the child exits.  A
        restart does not wait for the old child's exit (for ``scopecheck serve`` an
        interpreter's teardown, tens of ms): it has closed its repository (PROC-3)."""
        threading.Thread(target=self.stop, name=f"stop {self.pid}", daemon=True).start()


def _shape(process: BackendProcess, op: str, call: Any) -> Any:
    """Run a result decoder; a :class:`~scopecheck.models.wire.WireError` is the backend's
    protocol error (PROC-2), with the exchange that carried it."""
    try:
        return call()
    except (wire.WireError, TypeError, KeyError, AttributeError, ValueError) as exc:
        raise process.fail(f"the result of {op} has the wrong shape: {exc}", op) from None


class ProcessStorage:
    """One open Session in the backend process (the ``Storage`` protocol)."""

    def __init__(self, process: BackendProcess, session_id: str, opened: Any) -> None:
        self._process = process
        self._session_id = session_id
        self._handle = _shape(process, "open", lambda: int(opened["handle"]))
        self.parent_session_id: str | None = _shape(
            process, "open", lambda: opened.get("parent_session_id")
        )

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

        return _shape(self._process, "commit", decode)  # type: ignore[no-any-return]

    def get_value(self, address: Any) -> ValueRecord | None:
        found = self._ask("get_value", address=wire.address_to_json(address))
        return (
            None
            if found is None
            else _shape(self._process, "get_value", lambda: wire.value_record_from_json(found))
        )

    def scan_values(
        self, namespace: str, prefix: str = "", scope: Scope | None = None
    ) -> tuple[tuple[str, ValueRecord], ...]:
        rows = self._ask(
            "scan_values", namespace=namespace, prefix=prefix, scope=wire.scope_to_json(scope)
        )

        def decode() -> tuple[tuple[str, ValueRecord], ...]:
            if not isinstance(rows, list):
                raise wire.WireError("scan_values", "expected a list of [key, value] rows")
            found = []
            for i, row in enumerate(rows):
                if not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str):
                    raise wire.WireError(f"scan_values[{i}]", "expected [key, value]")
                found.append((row[0], wire.value_record_from_json(row[1], f"scan_values[{i}]")))
            return tuple(found)

        return _shape(self._process, "scan_values", decode)  # type: ignore[no-any-return]

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

        def decode() -> tuple[ListElement, ...]:
            if not isinstance(page, list):
                raise wire.WireError("read_list", "expected a list of elements")
            return tuple(wire.element_from_json(e, f"read_list[{i}]") for i, e in enumerate(page))

        return _shape(self._process, "read_list", decode)  # type: ignore[no-any-return]

    def get_entry(self, entry_id: str) -> EntryRecord | None:
        found = self._ask("get_entry", entry_id=entry_id)
        return (
            None
            if found is None
            else _shape(self._process, "get_entry", lambda: wire.entry_from_json(found))
        )

    def get_usage(self, usage_id: str) -> UsageRecord | None:
        found = self._ask("get_usage", usage_id=usage_id)
        return (
            None
            if found is None
            else _shape(self._process, "get_usage", lambda: wire.usage_from_json(found))
        )

    def stats(self) -> Stats:
        found = self._ask("stats")
        return _shape(self._process, "stats", lambda: wire.stats_from_json(found))  # type: ignore[no-any-return]

    def snapshot(self) -> Snapshot:
        found = self._ask("snapshot")
        return _shape(self._process, "snapshot", lambda: wire.snapshot_from_json(found))  # type: ignore[no-any-return]

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

        def decode() -> list[str]:
            if not isinstance(found, list) or not all(isinstance(s, str) for s in found):
                raise wire.WireError("list", "expected a list of Session ids (strings)")
            return found

        return _shape(self.process, "list", decode)  # type: ignore[no-any-return]

    def delete(self, session_id: str) -> None:
        self.process.request("delete", session=session_id)

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """Fork over the protocol.  Options that are no ``ForkOptions`` (``None``, a dict, a
        scope name) have no wire form: ``invalid_fork_options`` is the Python side's answer,
        never needed from a process (docs/protocol.md; FORK-1)."""
        checked = check_fork_options(options)
        found = self.process.request(
            "fork", source=source_id, options=wire.fork_options_to_json(checked)
        )
        if not isinstance(found, str):
            raise self.process.fail(f"the result of fork is {found!r}, not a Session id", "fork")
        return found

    def close(self) -> None:
        self.process.request("close_repository")


def _no_clock() -> int:
    return 0


#: How a restart gets its new child (PROC-3): ``"new"`` a process started for it (a spare
#: started ahead when one is ready); ``"other"`` an idle child other than the one that served
#: the root until now -- one that has never served it if there is one -- else a new one, the
#: old child going back to the pool.  Either way what the old child acknowledged is read back
#: by a process that did not write it; only ``"new"`` also restarts the program.
RestartPolicy = Literal["new", "other"]


def _lists_nothing(process: BackendProcess) -> None:
    """A reused child lists no Session on its fresh, empty root (PROC-8)."""
    found = process.request("list")
    if found != []:
        raise process.fail(
            f"after hello over a fresh, empty root the backend lists {found!r}: it kept state "
            "of an earlier root across hello -- a later hello must close every handle and the "
            "repository and start over at the new root (PROC-8)",
            "list",
            rule="PROC-8",
        )


def _moved(
    process: BackendProcess,
    root: str,
    clock: Any,
    escalate: bool,
    check: Callable[[BackendProcess], None] | None = None,
) -> BackendProcess:
    """``process`` handed to a world over ``root``: its clock and error mode set, told
    ``hello`` there (and ``check``-ed); a child that fails any of it is killed, never reused."""
    process.clock = clock
    process.escalate = escalate
    try:
        process.hello(root)
        if check is not None:
            check(process)
    except BaseException:
        process.kill()
        raise
    return process


class ProcessPool:
    """The children of one backend command: idle ones that served a world and closed their
    repository, and spares started ahead of need that have served no root yet.

    :meth:`take` gives a world a child: an idle one told ``hello`` over the world's fresh root
    (then asked ``list``, which must be empty: PROC-8), else a fresh one.  :meth:`for_restart`
    gives a restart its child over the world's root: one that has never served that root
    (PROC-3), by ``restart`` policy.  :meth:`fresh` gives a child that has served no root: a
    spare if one is ready, starting the next at once so its start-up runs while the world
    works.  :meth:`give_back` keeps a healthy child for a later world; a broken or exited one
    is stopped.  ``keep`` idle children at most, ``spares`` started ahead.  :meth:`close` stops
    them all; it also runs when the pool is collected or the Python process exits."""

    def __init__(
        self,
        command: Sequence[str],
        cwd: str | None = None,
        *,
        keep: int = 4,
        spares: int = 1,
        restart: RestartPolicy = "new",
    ) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.keep = keep
        self.spares = spares
        self.restart = restart
        self._idle: list[BackendProcess] = []
        self._spare: list[BackendProcess] = []
        self._lock = threading.Lock()
        self.closed = False
        #: Worlds served by a child that had served another root before.
        self.reused = 0
        self._finalizer = weakref.finalize(self, _stop_all, self._idle, self._spare, self._lock)

    def _spawn(self) -> BackendProcess:
        return BackendProcess(self.command, None, _no_clock, cwd=self.cwd)

    def fresh(self, root: str, clock: Any, *, escalate: bool = False) -> BackendProcess:
        """A child that has served no root, told ``hello`` over ``root``."""
        with self._lock:
            process = self._spare.pop(0) if self._spare else None
        if process is None or process.exited:
            if process is not None:
                process.stop()
            process = self._spawn()
        self._top_up()
        return _moved(process, root, clock, escalate)

    def _top_up(self) -> None:
        with self._lock:
            wanted = 0 if self.closed else self.spares - len(self._spare)
        for _ in range(wanted):
            try:
                spare = self._spawn()
            except ProtocolError:  # it cannot even start: the next fresh() says so
                return
            with self._lock:
                if self.closed:
                    spare.stop()
                    return
                self._spare.append(spare)

    def _idle_child(self, root: str, old: BackendProcess | None = None) -> BackendProcess | None:
        """An idle child other than ``old``, one that has never served ``root`` first (one
        that exited meanwhile, as it may after ``close_repository``, is stopped and passed
        over)."""
        while True:
            with self._lock:
                others = [p for p in reversed(self._idle) if p is not old]
                found = next((p for p in others if root not in p.served), None)
                if found is None and others:
                    found = others[0]
                if found is not None:
                    self._idle.remove(found)
            if found is None or not found.exited:
                return found
            found.stop()

    def take(self, root: str, clock: Any, *, escalate: bool = False) -> BackendProcess:
        """A child for a new world over the fresh, empty ``root``: an idle one moved there by
        ``hello`` (PROC-8), else a fresh one."""
        process = self._idle_child(root)
        if process is None:
            return self.fresh(root, clock, escalate=escalate)
        _moved(process, root, clock, escalate, check=_lists_nothing)
        self.reused += 1
        return process

    def for_restart(
        self, old: BackendProcess, root: str, clock: Any, *, escalate: bool = False
    ) -> BackendProcess:
        """The child a restart of the world over ``root`` continues with, ``old`` having
        closed its repository: by the ``restart`` policy, ``old`` is stopped and a new child
        starts (``"new"``), or ``old`` goes back to the pool and another idle child is moved
        there (``"other"``) -- either way a process without the old one's memory reads back
        what it wrote (PROC-3)."""
        if self.restart == "new":
            old.stop_behind()
            return self.fresh(root, clock, escalate=escalate)
        self.give_back(old)
        process = self._idle_child(root, old)
        if process is None:
            return self.fresh(root, clock, escalate=escalate)
        return _moved(process, root, clock, escalate)

    def give_back(self, process: BackendProcess) -> None:
        """Keep ``process`` for a later world, or stop it (broken, exited or one too many)."""
        process.escalate = False
        process.clock = _no_clock
        with self._lock:
            keep = (
                not self.closed
                and process.failure is None
                and len(self._idle) < self.keep
                and not process.exited
            )
            if keep:
                self._idle.append(process)
        if not keep:
            if process.failure is not None:
                process.kill()
            else:
                process.stop()

    def close(self) -> None:
        """Stop every idle child and spare; later children given back are stopped too."""
        with self._lock:
            self.closed = True
        self._finalizer()


def _stop_all(
    idle: list[BackendProcess], spare: list[BackendProcess], lock: threading.Lock
) -> None:
    """Stop the children in ``idle`` and ``spare`` (a pool's finalizer: no reference to it)."""
    with lock:
        children = [*idle, *spare]
        idle.clear()
        spare.clear()
    for process in children:
        with contextlib.suppress(OSError):
            process.stop()


#: Machine steps a process world runs between two restart steps (PROC-9).  Every restart
#: of a process backend starts a process: 10 ms for a Go binary, about 100 ms for Node and
#: 200 ms for ``scopecheck serve``, where an in-process restart costs a few file reads; at the
#: storage machine's in-process share of restart steps (about 28%) process starts would take
#: most of the run.  One restart per 32 steps keeps a restart in most long examples.
RESTART_SPACING = 32


class ProcessWorld:
    """A world over a backend command: a fresh directory (under ``$SCOPECHECK_SCRATCH`` if
    set), one child at a time over it (run in ``cwd``, the directory the command was given
    in, so relative paths in it mean what the user typed), a restart that stops the child and
    starts one that has served no root over the same directory (PROC-3), and a cleanup that
    closes the repository, gives the child back to its pool and removes the directory.

    Without a ``pool`` the world has its own, which keeps nothing: its child is stopped at the
    cleanup.  ``escalate``: protocol errors are raised as :class:`ProtocolFailure` (the
    machines' and the conformance suite's worlds).  A machine takes a restart step at most
    once per :attr:`restart_spacing` steps (PROC-9)."""

    restart_spacing: ClassVar[int] = RESTART_SPACING

    def __init__(
        self,
        command: Sequence[str],
        clock: Any,
        counts: Any = None,
        cwd: str | None = None,
        *,
        pool: ProcessPool | None = None,
        escalate: bool = False,
    ) -> None:
        self._clock = clock
        self._own_pool = pool is None
        self._pool = ProcessPool(command, cwd, keep=0, spares=0) if pool is None else pool
        self._escalate = escalate
        self.counts = counts
        if counts is not None:
            counts.worlds += 1
        scratch = os.environ.get("SCOPECHECK_SCRATCH") or None
        self.root = tempfile.mkdtemp(prefix="scopecheck-process-", dir=scratch)
        try:
            process = self._pool.take(self.root, clock, escalate=escalate)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self._repo = ProcessRepository(process)

    @property
    def disk_root(self) -> str:
        """The directory the child keeps its files in: HYGIENE checks."""
        return self.root

    @property
    def protocol_failure(self) -> ProtocolError | None:
        """The first protocol error the world's child raised, on any thread (PROC-2)."""
        return self._repo.process.failure

    def repository(self) -> ProcessRepository:
        return self._repo

    def restart(self) -> ProcessRepository:
        """Close the repository, stop the child (its open handles die with it) and start one
        that has served no root over the same directory (PROC-3)."""
        process = self._repo.process
        self._repo.close()
        if self.counts is not None:
            self.counts.restarts += 1
        self._repo = ProcessRepository(
            self._pool.for_restart(process, self.root, self._clock, escalate=self._escalate)
        )
        return self._repo

    def cleanup(self) -> None:
        """Close the repository and give the child back (a broken one is killed), then
        remove the directory."""
        process = self._repo.process
        try:
            if process.failure is None:
                with contextlib.suppress(ProtocolError):
                    process.escalate = False  # the world is over: a failure now is the next's
                    self._repo.close()
            self._pool.give_back(process)
        finally:
            if self._own_pool:
                self._pool.close()
            shutil.rmtree(self.root, ignore_errors=True)
