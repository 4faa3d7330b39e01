"""How a machine gets a backend: a named factory of *worlds*.

A world is one storage location (an in-memory registry, a temp directory, a fake filesystem).
``repository()`` opens a Repository over it; ``restart()`` simulates a process restart — close
everything and open a fresh Repository over the same location — which for Memory keeps the
same registry.  Third-party backends provide the same two callables (see ``scopecheck
validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

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

#: Bundled backends by name; SQLite and JSONL register themselves here as they land.
BUNDLED: dict[str, Backend] = {"memory": MEMORY}


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
