"""The public seams planted bugs use, so every backend underneath stays the real one, unchanged.

* the Sessions a repository hands out (:class:`WrappedSession`, :class:`WrappedRepository`);
* the contract's policies a repository is given (``sequence=``, ``retirement=``,
  ``fork_driver=``: :func:`memory_with`);
* Memory's registry of Session states, which plays its disk (:class:`RegistryRepository`);
* the :class:`~scopecheck.impl.fs.FileSystem` a JSONL repository does all its I/O through
  (:class:`ForwardingFileSystem`, :func:`jsonl_over`, :func:`over_fs`).

A planted bug is a small wrapper or subclass changing one call at one of these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scopecheck.backends.registry import Backend, JsonlWorld, MemoryWorld
from scopecheck.impl.fs import FileSystem, ForwardingFileSystem, OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.memory import MemoryRepository
from scopecheck.models.protocols import Clock

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


class WrappedRepository:
    """Delegates every call to the real repository, handing out ``wrap(session, shared)``
    from ``create`` and ``open``."""

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


def memory_over(name: str, wrap: SessionWrap, description: str) -> Backend:
    """The real Memory backend whose ``create`` and ``open`` hand out ``wrap(session)``."""

    def new_world(clock: Clock) -> MemoryWorld:
        shared: dict[str, Any] = {}

        def repository(clock: Clock, registry: dict[str, Any]) -> Any:
            return WrappedRepository(MemoryRepository(clock, registry), wrap, shared)

        return MemoryWorld(clock, repository=repository)

    return Backend(f"memory[{name}]", new_world, description)


def memory_with(name: str, description: str, policies: Callable[[], dict[str, Any]]) -> Backend:
    """The real Memory backend given other policies: ``policies()`` is called once per world
    (a policy may keep state, as a backend keeps it on disk) and passed as keywords."""

    def new_world(clock: Clock) -> MemoryWorld:
        chosen = policies()

        def repository(clock: Clock, registry: dict[str, Any]) -> Any:
            return MemoryRepository(clock, registry, **chosen)

        return MemoryWorld(clock, repository=repository)

    return Backend(f"memory[{name}]", new_world, description)


class RegistryRepository(MemoryRepository):
    """The real Memory repository that keeps a hand on its registry (``registry``): a planted
    fork bug edits a destination's state there after the real fork built it, as a file
    backend's would be edited on disk."""

    def __init__(
        self, clock: Clock, sessions: dict[str, Any] | None = None, **policies: Any
    ) -> None:
        self.registry: dict[str, Any] = {} if sessions is None else sessions
        super().__init__(clock, self.registry, **policies)


def registry_backend(name: str, repository: type[RegistryRepository], description: str) -> Backend:
    def new_world(clock: Clock) -> MemoryWorld:
        return MemoryWorld(clock, repository=repository)

    return Backend(f"memory[{name}]", new_world, description)


def jsonl_over(name: str, wrap: Callable[[FileSystem], Any], description: str) -> Backend:
    """The real JSONL backend over real files seen through ``wrap(fs)``."""

    class WrappedWorld(JsonlWorld):
        def __init__(self, clock: Any) -> None:
            super().__init__(clock)
            self._repo.close()
            self.fs = wrap(self.fs)
            self._repo = self._new()

    return Backend(f"jsonl[{name}]", WrappedWorld, description)


def over_fs(name: str, wrap: Callable[[FileSystem], Any]) -> type[JsonlRepository]:
    """The real JSONL repository doing its I/O through ``wrap(fs)`` of whatever filesystem it
    is given -- a world's, or the crash simulator's recording one."""

    class OverFs(JsonlRepository):
        def __init__(self, root: str, fs: FileSystem | None = None, *args: Any, **kw: Any) -> None:
            super().__init__(root, wrap(fs if fs is not None else OsFileSystem()), *args, **kw)

    OverFs.__name__ = OverFs.__qualname__ = f"Jsonl_{name.replace('-', '_')}"
    return OverFs


class OpeningFileSystem(ForwardingFileSystem):
    """A filesystem that knows whether its repository is opening a Session (``opening``), for
    bugs in what open does to the files (000 §6.3 stages 1, 3 and 9)."""

    opening = False


def opening_over(name: str, wrap: Callable[[FileSystem], OpeningFileSystem]) -> type[Any]:
    """:func:`over_fs` whose repository raises ``opening`` on its filesystem while ``open``
    runs."""

    class Opening(JsonlRepository):
        def __init__(self, root: str, fs: FileSystem | None = None, *args: Any, **kw: Any) -> None:
            self._opening = wrap(fs if fs is not None else OsFileSystem())
            super().__init__(root, self._opening, *args, **kw)

        def open(self, session_id: str) -> Any:
            self._opening.opening = True
            try:
                return super().open(session_id)
            finally:
                self._opening.opening = False

    Opening.__name__ = Opening.__qualname__ = f"Jsonl_{name.replace('-', '_')}"
    return Opening


def sqlite_over(factory: Callable[..., Any], wrap: SessionWrap) -> Callable[..., Any]:
    """A repository factory taking what ``factory`` takes (``SqliteRepository``,
    ``SqliteContainerRepository`` or a partial of either with its settings): the real
    repository, handing out ``wrap(session, shared)``.  ``shared`` is one dict per call of
    ``sqlite_over``, so a world that reopens through the same factory keeps it."""
    shared: dict[str, Any] = {}

    def make(*args: Any, **kwargs: Any) -> WrappedRepository:
        return WrappedRepository(factory(*args, **kwargs), wrap, shared)

    return make
