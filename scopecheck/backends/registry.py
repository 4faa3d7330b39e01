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
from pathlib import Path
from typing import Any, Protocol

import attrs

from scopecheck.backends.crash_explorers import (
    CrashExplorer,
    JsonlCrashExplorer,
    SqliteCrashExplorer,
)
from scopecheck.data import pi_session
from scopecheck.impl.memory import MemoryRepository
from scopecheck.models.protocols import Clock, Repository


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
    #: Crash explorer for ``scopecheck fuzz``, ``validate`` and ``replay``
    #: (:class:`~scopecheck.backends.crash_explorers.CrashExplorer`).
    crash: CrashExplorer | None = None
    #: Whether the world's Sessions start as legacy files (``legacy_files``): the fork machine
    #: then opens every example with a fork of a not-yet-upgraded source (LEGACY-13).
    starts_legacy: bool = False
    #: Releases what the worlds share once no world is needed any more (a backend process's
    #: pool of children, PROC-8); ``None`` when they share nothing.
    close: Callable[[], None] | None = None


#: ``make(clock, registry)``: a Memory repository over a registry of Session states.
MemoryFactory = Callable[[Clock, dict[str, Any]], Repository]


class MemoryWorld:
    """A Memory registry; it survives ``restart()`` (the registry plays the disk).

    ``repository`` builds each repository over the registry (default: the real
    :class:`MemoryRepository`); a planted bug passes one with a broken policy or a wrapper.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "repository_class" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} sets repository_class, which MemoryWorld does not read: pass "
                "MemoryWorld(clock, repository=factory) or use memory_world(factory), where "
                "factory(clock, registry) returns the repository"
            )

    def __init__(self, clock: Clock, *, repository: MemoryFactory | None = None) -> None:
        self._clock = clock
        self._make: MemoryFactory = repository or MemoryRepository
        #: Every Session's state, by id: what a restart keeps.
        self.registry: dict[str, Any] = {}
        self._repo = self._make(clock, self.registry)

    def repository(self) -> Repository:
        return self._repo

    def restart(self) -> Repository:
        self._repo.close()
        self._repo = self._make(self._clock, self.registry)
        return self._repo

    def cleanup(self) -> None:
        self._repo.close()


def memory_world(repository: MemoryFactory) -> Callable[[Clock], World]:
    """A world factory for :class:`Backend` whose Memory repositories ``repository`` makes."""

    def new_world(clock: Clock) -> World:
        return MemoryWorld(clock, repository=repository)

    return new_world


MEMORY = Backend("memory", MemoryWorld, "in-process maps (impl/memory.py)")


class JsonlWorld:
    """A JSONL repository over a fresh real temp directory (default) or a pyfakefs filesystem.

    ``restart()`` closes every handle and opens a new repository over the same directory, so
    every reopen goes through the nine open stages (JSONL-7).  ``repository_class`` lets a
    planted bug (``scopecheck.planted.jsonl``) run in the same world.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        fake: bool = False,
        repository_class: type[Any] | None = None,
        fault: Any = None,
    ) -> None:
        import tempfile

        from scopecheck.crashsim.tracing_fs import TracingFileSystem
        from scopecheck.impl.fs import FileSystem, OsFileSystem
        from scopecheck.impl.jsonl import JsonlRepository

        self._clock = clock
        self._class = repository_class or JsonlRepository
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        if fake:
            from pyfakefs.fake_filesystem import FakeFilesystem

            from scopecheck.crashsim.fake_disk import FakeDiskFileSystem

            self.fake_filesystem: Any = FakeFilesystem()
            # pyfakefs has no durability model; fsync calls stay visible on the FS object.
            self.fs: FileSystem = FakeDiskFileSystem(self.fake_filesystem, sync=False)
            self.root = "/sessions"
        else:
            self._tempdir = tempfile.TemporaryDirectory(prefix="scopecheck-jsonl-")
            self.fs = OsFileSystem()
            self.root = self._tempdir.name
        if fault is not None:
            self.fs = TracingFileSystem(self.fs, fault, record=False)
        self._repo = self._new()

    @property
    def disk_root(self) -> str | None:
        """The real directory the Sessions are in (``None`` on pyfakefs): HYGIENE checks."""
        return self.root if self._tempdir is not None else None

    def _new(self) -> Repository:
        repo: Repository = self._class(self.root, self.fs, self._clock, cwd="/scopecheck")
        return repo

    def repository(self) -> Repository:
        return self._repo

    def restart(self) -> Repository:
        self._repo.close()
        self._repo = self._new()
        return self._repo

    def cleanup(self) -> None:
        self._repo.close()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None


def _jsonl_fake_world(clock: Clock) -> World:
    return JsonlWorld(clock, fake=True)


class EveryOtherUnlinkFails:
    """Fault hook: every second sidecar unlink fails with EACCES, so retired sidecars survive
    their retirement and reopen must bound them by the retirement seq (JSONL-9, JSONL-16)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, op: str, path: str) -> OSError | None:
        if op == "unlink" and path.endswith(".scope"):
            self.count += 1
            if self.count % 2:
                return PermissionError(13, "injected: sidecar unlink refused")
        return None


def _jsonl_unlink_fails_world(clock: Clock) -> World:
    return JsonlWorld(clock, fake=True, fault=EveryOtherUnlinkFails())


JSONL = Backend(
    "jsonl",
    JsonlWorld,
    "format-4 main log + scope sidecars in a temp dir (impl/jsonl)",
    crash=JsonlCrashExplorer(),
)
JSONL_FAKEFS = Backend(
    "jsonl-fakefs",
    _jsonl_fake_world,
    "the JSONL backend on a pyfakefs filesystem",
    crash=JsonlCrashExplorer(backend="jsonl-fakefs"),
)

JSONL_UNLINK_FAILS = Backend(
    "jsonl-unlink-fails",
    _jsonl_unlink_fails_world,
    "JSONL on pyfakefs where every second sidecar unlink fails (retired sidecars survive)",
)


# -- JSONL Sessions that start as real legacy transcripts (LEGACY-11, LEGACY-13) ---------------

#: Lines (header included) of each bundled transcript (:mod:`scopecheck.data`) a legacy world's
#: Session starts from: ``s1`` is the start of ``large-session`` (past its first thinking level: a
#: configured ``main`` lane), ``s2`` ``before-compaction`` through its first compaction (no model
#: yet: a data-only ``main``).
LEGACY_PREFIX: dict[str, tuple[str, int]] = {
    "s1": ("large-session", 240),
    "s2": ("before-compaction", 380),
}


def legacy_lines(session_id: str) -> list[bytes]:
    """The complete lines a legacy world's Session starts from, its header renamed."""
    import orjson

    name, count = LEGACY_PREFIX[session_id]
    lines = pi_session(name).read_bytes().split(b"\n")[:count]
    head = orjson.loads(lines[0])
    head["id"] = session_id
    return [orjson.dumps(head), *lines[1:]]


def counter_legacy_ids(timestamp_ms: int, ordinal: int) -> str:
    """Import ids that are the same on every open, so the model can name them (LEGACY-3)."""
    del timestamp_ms
    return f"imp-{ordinal}"


def _deterministic_legacy_repository(base: type[Any]) -> type[Any]:
    class DeterministicLegacyIds(base):  # type: ignore[misc]
        def __init__(
            self, root: str, fs: Any = None, clock: Any = None, cwd: str | None = None
        ) -> None:
            super().__init__(root, fs, clock, cwd, legacy_ids=counter_legacy_ids)

    DeterministicLegacyIds.__name__ = f"DeterministicLegacyIds{base.__name__}"
    return DeterministicLegacyIds


class JsonlLegacyWorld(JsonlWorld):
    """A JSONL world whose Sessions ``s1``/``s2`` exist as legacy files (real transcript
    prefixes, :data:`LEGACY_PREFIX`) instead of being created.

    ``legacy_files`` and ``legacy_ids`` tell the machine to *open* these Sessions and to start
    the model from its own importer over the same lines (``ReferenceRepository.import_legacy``);
    the ids are deterministic so both sides name the same entries.  ``repository_class`` lets a
    planted bug run in the same world (scopecheck/planted/legacy.py).
    """

    legacy_ids = staticmethod(counter_legacy_ids)

    def __init__(self, clock: Clock, *, repository_class: type[Any] | None = None) -> None:
        from scopecheck.impl.jsonl import JsonlRepository

        self.legacy_files = {sid: legacy_lines(sid) for sid in LEGACY_PREFIX}
        cls = _deterministic_legacy_repository(repository_class or JsonlRepository)
        super().__init__(clock, repository_class=cls)
        for sid, lines in self.legacy_files.items():
            Path(self.root, f"{sid}.jsonl").write_bytes(b"\n".join(lines) + b"\n")


JSONL_LEGACY = Backend(
    "jsonl-legacy",
    JsonlLegacyWorld,
    "JSONL whose Sessions start as real legacy transcripts (imported, upgraded at first commit)",
    starts_legacy=True,
)


class SqliteWorld:
    """A temp directory holding per-file databases or one container file (impl/sqlite/).

    ``repository_class`` opens the repository at start and at every restart:
    ``repository_class(target, clock)`` with the root (per-file) or the container file -- a
    repository class, or a callable giving it settings and collaborators (planted bugs in
    scopecheck/planted/sqlite.py pass their policies this way).
    """

    def __init__(
        self,
        clock: Clock,
        shared: bool = False,
        repository_class: Callable[..., Any] | None = None,
    ) -> None:
        import tempfile

        from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository

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

    @property
    def disk_root(self) -> str:
        """The directory of the database files: HYGIENE checks."""
        return self.root

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


SQLITE = Backend(
    "sqlite",
    _sqlite_world,
    "one SQLite file per Session via APSW (impl/sqlite/)",
    crash=SqliteCrashExplorer("per-file", backend="sqlite"),
)
SQLITE_SHARED = Backend(
    "sqlite-shared",
    _sqlite_shared_world,
    "many Sessions in one SQLite container file via APSW",
    crash=SqliteCrashExplorer("shared", backend="sqlite-shared"),
)

#: Bundled backends by name; JSONL registers itself here as it lands.
BUNDLED: dict[str, Backend] = {
    "memory": MEMORY,
    "jsonl": JSONL,
    "sqlite": SQLITE,
    "sqlite-shared": SQLITE_SHARED,
}
"""The backends ``scopecheck fuzz`` and the conformance suite run by default."""

EXTRA: dict[str, Backend] = {
    "jsonl-fakefs": JSONL_FAKEFS,
    "jsonl-unlink-fails": JSONL_UNLINK_FAILS,
    "jsonl-legacy": JSONL_LEGACY,
}
"""More worlds of the bundled backends, by name (``scopecheck fuzz --backend jsonl-fakefs``)."""


def is_user_spec(name: str) -> bool:
    """``PATH_OR_MODULE:FACTORY`` (a backend outside this project) rather than a name."""
    return ":" in name and name not in BUNDLED and name not in EXTRA
