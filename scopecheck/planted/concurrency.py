"""Planted bugs in what ``close()`` and ``fork()`` promise to commits racing them (LIFE-1,
FORK-12): caught by the machine's ``race`` step, which commits from threads while ``close()``
or a fork runs, reopens the Session the moment ``close()`` returns, and checks that a fork holds
each racing commit wholly or not at all.  Each is the real Memory backend behind a Session or
repository wrapper that changes one call (:mod:`scopecheck.planted.seams`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from scopecheck.backends.registry import Backend, MemoryWorld
from scopecheck.impl.memory import MemoryRepository
from scopecheck.impl.validation import check_shape
from scopecheck.models.errors import ClosedError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.protocols import Clock
from scopecheck.models.writes import AppendList, DeleteList, DeleteValue, SetValue
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import WrappedRepository, WrappedSession, memory_over

#: How long the background close takes to start: long enough that a reopen right after close()
#: returned always finds the Session still open.
BACKGROUND_DELAY = 0.01


class _Sealing(WrappedSession):
    """A Session wrapper keeping a seal of its own in front of the real one's."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        self._sealed = False
        self._lock = threading.Lock()

    def _admit(self) -> None:
        with self._lock:
            if self._sealed:
                raise ClosedError()

    @property
    def closed(self) -> bool:
        return self._sealed


class CloseInTheBackground(_Sealing):
    """``close()`` seals and returns at once; draining the commits it admitted and releasing
    the Session happen later, on another thread."""

    def commit(self, writes: Sequence[Any]) -> Any:
        self._admit()
        return self._inner.commit(writes)

    def close(self) -> None:
        with self._lock:
            if self._sealed:
                return
            self._sealed = True

        def later() -> None:
            time.sleep(BACKGROUND_DELAY)
            self._inner.close()

        threading.Thread(target=later, daemon=True).start()


register(
    Mutant(
        "memory-close-in-background",
        "memory",
        "close() returns at once and drains admitted commits later, on another thread (LIFE-1)",
        lambda: memory_over("close-in-background", CloseInTheBackground, "Memory, async close"),
    )
)


class DropsAdmitted(_Sealing):
    """``close()`` seals and releases the Session at once instead of draining: a commit that
    was admitted and had taken its timestamp finds the Session sealed when it goes on, and is
    refused with ``closed`` -- its writes thrown away (LIFE-4)."""

    def __init__(self, inner: Any, shared: dict[str, Any], clock: Clock) -> None:
        super().__init__(inner, shared)
        self._clock = clock

    def commit(self, writes: Sequence[Any]) -> Any:
        self._admit()
        self._clock()  # the commit's timestamp: admitted, and running
        self._admit()
        return self._inner.commit(writes)

    def close(self) -> None:
        with self._lock:
            self._sealed = True
        self._inner.close()


def _drops_admitted_world(clock: Clock) -> MemoryWorld:
    shared: dict[str, Any] = {}

    def repository(clock: Clock, registry: dict[str, Any]) -> Any:
        inner = MemoryRepository(clock, registry)
        return WrappedRepository(inner, lambda s, _: DropsAdmitted(s, shared, clock), shared)

    return MemoryWorld(clock, repository=repository)


register(
    Mutant(
        "memory-close-drops-admitted",
        "memory",
        "close() does not drain: a commit admitted before it (its timestamp taken) is refused "
        "with closed and its writes are lost (LIFE-4)",
        lambda: Backend("memory[close-drops-admitted]", _drops_admitted_world, "Memory mutant"),
    )
)


#: Writes a transaction can be applied one by one without a reference check in between.
_SPLITTABLE = (SetValue, AppendList, DeleteValue, DeleteList)
#: How long a commit racing on another thread holds its window open for a fork, and how long
#: a fork waits for such a window: generous, so the catch does not depend on the scheduler.
WINDOW = 0.05
FORK_WAIT = 0.2


class _Window:
    """A window between two writes of one commit, and a fork looking through it."""

    def __init__(self) -> None:
        self.fork_waiting = threading.Event()
        self.open = threading.Event()
        self.fork_done = threading.Event()


class WriteByWrite(WrappedSession):
    """Applies a transaction write by write (each its own commit underneath, under a lock of
    its own so commits still run one at a time and draw the same seqs), leaving a window
    between the writes when it runs on a thread that races others."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        self._lock: threading.Lock = shared.setdefault(f"lock:{inner.session_id}", threading.Lock())
        self._window: _Window = shared.setdefault("window", _Window())

    def commit(self, writes: Sequence[Any]) -> Any:
        items = list(writes)
        racing = threading.current_thread() is not threading.main_thread()
        if len(items) < 2 or not all(isinstance(w, _SPLITTABLE) for w in items):
            with self._lock:
                return self._inner.commit(items)
        check_shape(items)  # a transaction refused whole is still refused before any write
        with self._lock:
            done = list(self._inner.commit(items[:1]))
            if racing and self._window.fork_waiting.wait(WINDOW):
                self._window.open.set()
                self._window.fork_done.wait(1.0)
            for write in items[1:]:
                done.extend(self._inner.commit([write]))
        return tuple(done)

    def close(self) -> None:
        with self._lock:  # close still waits for a commit between its writes
            self._inner.close()


class ForkWithoutBoundary(WrappedRepository):
    """Forks without waiting for the commit in progress to finish: it takes its snapshot as
    soon as a racing commit is between two writes."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        window: _Window = self._shared.setdefault("window", _Window())
        window.fork_done.clear()
        window.open.clear()
        window.fork_waiting.set()
        window.open.wait(FORK_WAIT)
        try:
            dest: str = self._inner.fork(source_id, options)
        finally:
            window.fork_waiting.clear()
            window.fork_done.set()
        return dest


def _fork_mid_commit_world(clock: Clock) -> MemoryWorld:
    shared: dict[str, Any] = {}

    def repository(clock: Clock, registry: dict[str, Any]) -> Any:
        inner = MemoryRepository(clock, registry)
        return ForkWithoutBoundary(inner, lambda session, _: WriteByWrite(session, shared), shared)

    return MemoryWorld(clock, repository=repository)


register(
    Mutant(
        "memory-fork-mid-commit",
        "memory",
        "a fork takes its snapshot while a racing commit is between two of its writes (FORK-12)",
        lambda: Backend("memory[fork-mid-commit]", _fork_mid_commit_world, "Memory, fork race"),
    )
)
