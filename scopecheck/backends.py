"""How a machine gets a backend: a named factory of *worlds*.

A world is one storage location (an in-memory registry, a temp directory, a fake filesystem).
``repository()`` opens a Repository over it; ``restart()`` simulates a process restart — close
everything and open a fresh Repository over the same location — which for Memory keeps the
same registry.  Third-party backends provide the same two callables (see ``scopecheck
validate``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from impl.memory import MemoryRepository
from models.protocols import Clock, Repository


class World(Protocol):
    def repository(self) -> Repository:
        """The currently open repository over this location."""
        ...

    def restart(self) -> Repository:
        """Close every handle, then open a new repository over the same location."""
        ...

    def cleanup(self) -> None:
        """Release the location (delete temp files)."""
        ...


@attrs.frozen
class Backend:
    """A backend under test: ``new_world(clock)`` makes a fresh, empty location."""

    name: str
    new_world: Callable[[Clock], World]
    description: str = ""
    #: Whether ``restart()`` preserves state (False for a process-local Memory registry only if
    #: the backend chooses so; the bundled Memory world keeps its registry across restarts).
    durable: bool = True


class MemoryWorld:
    """A Memory registry; it survives ``restart()`` (the registry plays the disk)."""

    repository_class: type[MemoryRepository] = MemoryRepository

    def __init__(self, clock: Clock) -> None:
        self._repo = self.repository_class(clock)

    def repository(self) -> Repository:
        return self._repo

    def restart(self) -> Repository:
        self._repo = self._repo.reopened()
        return self._repo

    def cleanup(self) -> None:
        self._repo.close()


MEMORY = Backend("memory", MemoryWorld, "in-process maps (impl/memory.py)")


class SqliteWorld:
    """A temp directory holding per-file databases or one container file (impl/sqlite/).

    ``repository_class`` lets planted bugs (scopecheck/mutants/sqlite.py) reuse the world.
    """

    def __init__(self, clock: Clock, shared: bool = False, repository_class: Any = None) -> None:
        import tempfile

        from impl.sqlite import SqliteContainerRepository, SqliteRepository

        self._clock = clock
        self._shared = shared
        if repository_class is None:
            repository_class = SqliteContainerRepository if shared else SqliteRepository
        self._cls = repository_class
        # $SCOPECHECK_SCRATCH (e.g. /dev/shm) puts fuzzing worlds on a RAM disk: restart()
        # only needs close/reopen, not power-loss durability (the crash sweeps cover that).
        scratch = os.environ.get("SCOPECHECK_SCRATCH") or None
        self.root = tempfile.mkdtemp(prefix="scopecheck-sqlite-", dir=scratch)
        self._repo = self._new()

    def _new(self) -> Any:
        target = os.path.join(self.root, "sessions.sqlite") if self._shared else self.root
        return self._cls(target, self._clock)

    def repository(self) -> Repository:
        result: Repository = self._repo
        return result

    def restart(self) -> Repository:
        self._repo.close()
        self._repo = self._new()
        result: Repository = self._repo
        return result

    def cleanup(self) -> None:
        import shutil

        try:
            self._repo.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _sqlite_world(clock: Clock) -> World:
    return SqliteWorld(clock)


def _sqlite_shared_world(clock: Clock) -> World:
    return SqliteWorld(clock, shared=True)


SQLITE = Backend("sqlite", _sqlite_world, "one SQLite file per Session via APSW (impl/sqlite/)")
SQLITE_SHARED = Backend(
    "sqlite-shared", _sqlite_shared_world, "many Sessions in one SQLite container file via APSW"
)

#: Bundled backends by name; JSONL registers itself here as it lands.
BUNDLED: dict[str, Backend] = {
    "memory": MEMORY,
    "sqlite": SQLITE,
    "sqlite-shared": SQLITE_SHARED,
}

def resolve_backend(name: str) -> Backend:
    """A bundled backend or a catalogue mutant by name; ``UsageError(not_found)`` otherwise."""
    from models.errors import UsageError

    if name in BUNDLED:
        return BUNDLED[name]
    from scopecheck.mutants import all_mutants

    for mutant in all_mutants():
        made = mutant.make()
        if name in (mutant.name, made.name):
            return made
    known = ", ".join(sorted(BUNDLED))
    raise UsageError("not_found", f"unknown backend {name!r}; bundled backends are: {known}")
