"""Planted bugs in what ``close()`` promises to commits racing it (LIFE-1): caught by the
machine's ``race`` rule, which commits from threads while ``close()`` runs and reopens the
Session the moment it returns.  Each is the real Memory backend handing out a Session that
changes one call (:func:`~scopecheck.mutants.seams.memory_over`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from scopecheck.models.errors import ClosedError
from scopecheck.mutants import Mutant, register
from scopecheck.mutants.seams import WrappedSession, memory_over

#: How long the background close takes to start: long enough that a reopen right after close()
#: returned always finds the Session still open.
BACKGROUND_DELAY = 0.01


class CloseInTheBackground(WrappedSession):
    """``close()`` seals and returns at once; draining the commits it admitted and releasing
    the Session happen later, on another thread."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        self._sealed = False
        self._lock = threading.Lock()

    def commit(self, writes: Sequence[Any]) -> Any:
        with self._lock:
            if self._sealed:
                raise ClosedError()
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

    @property
    def closed(self) -> bool:
        return self._sealed


register(
    Mutant(
        "memory-close-in-background",
        "memory",
        "close() returns at once and drains admitted commits later, on another thread (LIFE-1)",
        lambda: memory_over("close-in-background", CloseInTheBackground, "Memory, async close"),
    )
)
