"""The public seams planted bugs wrap: the Sessions a real repository hands out, and the
:class:`~scopecheck.impl.fs.FileSystem` a real JSONL repository is given.  A planted bug is a
small wrapper changing one call; the backend underneath is the real one, unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scopecheck.backends import Backend, JsonlWorld, MemoryWorld
from scopecheck.impl.fs import FileSystem
from scopecheck.impl.memory import MemoryRepository

#: ``wrap(session, shared)``: the Session to hand out instead of ``session``; ``shared`` is one
#: dict per world that survives restarts (what the wrapped backend would keep on disk).
SessionWrap = Callable[[Any, dict[str, Any]], Any]


class WrappedSession:
    """Delegates every call to the real Session; subclasses override the ones they break."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        self._inner = inner
        self._shared = shared

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def memory_over(name: str, wrap: SessionWrap, description: str) -> Backend:
    """The real Memory backend whose ``create`` and ``open`` hand out ``wrap(session)``."""

    class WrappedRepository(MemoryRepository):
        def __init__(self, *args: Any, shared: dict[str, Any] | None = None) -> None:
            super().__init__(*args)
            self._shared: dict[str, Any] = {} if shared is None else shared

        def create(self, session_id: str) -> Any:
            return wrap(super().create(session_id), self._shared)

        def open(self, session_id: str) -> Any:
            return wrap(super().open(session_id), self._shared)

        def reopened(self) -> MemoryRepository:
            self.close()
            return WrappedRepository(self._clock, self._sessions, shared=self._shared)

    class WrappedWorld(MemoryWorld):
        repository_class = WrappedRepository

    return Backend(f"memory[{name}]", WrappedWorld, description)


class WrappedFileSystem:
    """Delegates every call to ``inner``; subclasses override the one they break."""

    def __init__(self, inner: FileSystem) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def jsonl_over(name: str, wrap: Callable[[FileSystem], Any], description: str) -> Backend:
    """The real JSONL backend over real files seen through ``wrap(fs)``."""

    class WrappedWorld(JsonlWorld):
        def __init__(self, clock: Any) -> None:
            super().__init__(clock)
            self._repo.close()
            self.fs = wrap(self.fs)
            self._repo = self._new()

    return Backend(f"jsonl[{name}]", WrappedWorld, description)


class SessionWrappingRepository:
    """Delegates every call to a real repository; ``create`` and ``open`` hand out
    ``wrap(session, shared)`` instead of the real Session."""

    def __init__(self, inner: Any, wrap: SessionWrap, shared: dict[str, Any]) -> None:
        self._inner = inner
        self._wrap = wrap
        self._shared = shared

    def create(self, session_id: str) -> Any:
        return self._wrap(self._inner.create(session_id), self._shared)

    def open(self, session_id: str) -> Any:
        return self._wrap(self._inner.open(session_id), self._shared)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def sqlite_over(factory: Callable[..., Any], wrap: SessionWrap) -> Callable[..., Any]:
    """A repository factory taking what ``factory`` takes (``SqliteRepository``,
    ``SqliteContainerRepository`` or a partial of either with its settings): the real
    repository, handing out ``wrap(session, shared)``.  ``shared`` is one dict per call of
    ``sqlite_over``, so a world that reopens through the same factory keeps it."""
    shared: dict[str, Any] = {}

    def make(*args: Any, **kwargs: Any) -> SessionWrappingRepository:
        return SessionWrappingRepository(factory(*args, **kwargs), wrap, shared)

    return make
