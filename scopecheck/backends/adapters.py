"""Loading a third-party backend from ``PATH_OR_MODULE:FACTORY``, and the worlds it runs in.

The factory returns a fresh, empty repository each time it is called; its signature says what
it needs (:mod:`scopecheck.backends.factory`): ``make_backend(clock)``, ``make_backend(clock, *,
root)`` or ``make_backend(clock, *, fs, root)``.  A module attribute that already is a
:class:`~scopecheck.backends.registry.Backend` is used as it is.

A restart, as the machine and the conformance suite run it, is: close every open handle, then

* a factory taking ``root``: close the repository and call the factory again over the same
  directory, so every restart reads the files back (the old repository is never used again);
* a repository with ``reopen()``: call it and use only the repository it returns from then on
  (``reopen()`` closes the old one itself if the store cannot have two open at once);
* neither: keep the same repository object -- handles are closed and reopened, but no restart
  of the backend is tested, and ``scopecheck validate`` says so (INSTALL-6).

A world that owns a directory closes its handles and repository and removes the directory at
``cleanup()``, whatever the backend did (INSTALL-5).  A repository may declare its store's own
files there -- ``own_files``, glob patterns relative to the root (:func:`check_own_files`) --
which the disk checks never take for leftovers (HYGIENE-4).  :class:`RunCounts` counts what the
worlds of one backend did, so a report can say how many restarts really ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

import attrs

from scopecheck.backends.factory import FactoryKind, factory_kind, load_factory
from scopecheck.backends.registry import Backend
from scopecheck.models.errors import UsageError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.protocols import Clock, Repository, Storage


@attrs.define
class RunCounts:
    """What the worlds of one backend did, across every example of a run."""

    worlds: int = 0
    #: Restarts of the backend: the factory called again over its directory, or ``reopen()``.
    restarts: int = 0
    #: Restart steps that could only close and reopen handles (no root, no ``reopen()``).
    handle_reopens: int = 0


@attrs.frozen
class Capabilities:
    """What a user's backend offers, found by calling its factory (or starting its process)
    once.  ``process`` backends live in a child speaking the process protocol."""

    kind: FactoryKind
    reopen: bool
    fork: bool
    process: bool = False
    #: The files the repository declares its store's own (``own_files``), never leftovers.
    own_files: tuple[str, ...] = ()

    @property
    def restarts(self) -> bool:
        """Whether a restart re-creates the backend over the same data."""
        return self.kind != "plain" or self.reopen


class _Tracking:
    """Wraps a user repository to remember open handles, so a restart can close them."""

    def __init__(self, repo: Any) -> None:
        self.inner = repo
        self.handles: list[Storage] = []

    @property
    def supports_fork(self) -> bool:
        """Whether the user's repository has ``fork()`` (the machines fork only if it has)."""
        return callable(getattr(self.inner, "fork", None))

    def create(self, session_id: str) -> Storage:
        handle: Storage = self.inner.create(session_id)
        self.handles.append(handle)
        return handle

    def open(self, session_id: str) -> Storage:
        handle: Storage = self.inner.open(session_id)
        self.handles.append(handle)
        return handle

    def list(self) -> list[str]:
        return list(self.inner.list())

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def fork(self, source_id: str, options: ForkOptions) -> str:
        fork = getattr(self.inner, "fork", None)
        if not callable(fork):
            raise UsageError("not_found", "this backend has no fork() (001 §1.1)")
        return str(fork(source_id, options))

    def close(self) -> None:
        self.inner.close()

    def close_handles(self) -> None:
        """Close every handle; one that refuses to close does not stop the others."""
        for handle in self.handles:
            with contextlib.suppress(Exception):
                handle.close()
        self.handles.clear()


class AdapterWorld:
    """A world over ``make_backend(clock)`` (see the module docstring for restarts)."""

    def __init__(self, factory: Any, clock: Clock, counts: RunCounts | None = None) -> None:
        self._factory = factory
        self._clock = clock
        self.counts = RunCounts() if counts is None else counts
        self.counts.worlds += 1
        self._repo = _Tracking(self._make())

    def _make(self) -> Any:
        return self._factory(self._clock)

    def repository(self) -> Repository:
        return self._repo

    def restart(self) -> Repository:
        self._repo.close_handles()
        reopen = getattr(self._repo.inner, "reopen", None)
        if callable(reopen):
            self.counts.restarts += 1
            self._repo = _Tracking(reopen())
        else:
            self.counts.handle_reopens += 1
        return self._repo

    def cleanup(self) -> None:
        """Close every handle, then the repository."""
        self._repo.close_handles()
        close = getattr(self._repo.inner, "close", None)
        if callable(close):
            close()


class DirectoryAdapterWorld(AdapterWorld):
    """A world over ``make_backend(clock, *, root)`` or ``(clock, *, fs, root)``: a fresh
    real directory (under ``$SCOPECHECK_SCRATCH`` if set, e.g. a RAM disk), real fsyncs, a
    restart that calls the factory again over the same directory, and a cleanup that removes
    the directory.  ``own_files``: what the repository declares its store's own."""

    def __init__(
        self,
        factory: Any,
        clock: Clock,
        counts: RunCounts | None = None,
        *,
        fs: bool = False,
        own_files: tuple[str, ...] = (),
    ) -> None:
        from scopecheck.impl.fs import OsFileSystem

        self.own_files = own_files

        scratch = os.environ.get("SCOPECHECK_SCRATCH") or None
        self._root = tempfile.mkdtemp(prefix="scopecheck-user-", dir=scratch)
        self._keywords: dict[str, Any] = {"root": self._root}
        if fs:
            self._keywords["fs"] = OsFileSystem()
        try:
            super().__init__(factory, clock, counts)
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            raise

    @property
    def root(self) -> str:
        return self._root

    @property
    def disk_root(self) -> str:
        """The factory's root directory: HYGIENE checks."""
        return self._root

    def _make(self) -> Any:
        return self._factory(self._clock, **self._keywords)

    def restart(self) -> Repository:
        self._repo.close_handles()
        close = getattr(self._repo.inner, "close", None)
        if callable(close):
            close()
        self.counts.restarts += 1
        self._repo = _Tracking(self._make())
        return self._repo

    def cleanup(self) -> None:
        """Close every handle and the repository, then delete the directory; a handle or a
        repository that refuses to close does not keep the directory."""
        try:
            with contextlib.suppress(Exception):
                super().cleanup()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


def world_for(
    factory: Any,
    kind: FactoryKind,
    clock: Clock,
    counts: RunCounts,
    own_files: tuple[str, ...] = (),
) -> AdapterWorld:
    """The world for a factory of ``kind``, whose repository declares ``own_files``."""
    if kind == "plain":
        return AdapterWorld(factory, clock, counts)
    return DirectoryAdapterWorld(factory, clock, counts, fs=kind == "fs", own_files=own_files)


def check_own_files(value: object, spec: str) -> tuple[str, ...]:
    """A repository's ``own_files`` as declared, or a ``UsageError`` saying what is wrong: a
    sequence of glob patterns, each relative to the root and staying under it, matched from
    the right against a file's path under the root (``Data.fs.tmp``: that name in any folder;
    ``*.zodb/Data.fs.tmp``: in a folder ending in ``.zodb``), as
    :meth:`pathlib.PurePath.match` does (HYGIENE-4)."""

    def wrong(why: str) -> UsageError:
        return UsageError("invalid_payload", f"{spec}: own_files {why} (HYGIENE-4)")

    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise wrong(f"is {value!r}, not a tuple of glob patterns relative to the root")
    for pattern in value:
        if not isinstance(pattern, str) or not pattern.strip("/ "):
            raise wrong(f"holds {pattern!r}, not a glob pattern")
        if pattern.startswith("/") or ".." in PurePosixPath(pattern).parts:
            raise wrong(f"pattern {pattern!r} is not relative to the root")
    return tuple(value)


def anchored(spec: str, cwd: str) -> str:
    """``spec`` with a relative file path made absolute against ``cwd``: the ``--workers``
    processes run elsewhere, but ``examples/x.py:make_backend`` means the file the user
    sees from where they typed it.  Module specs, bundled names and ``exec:`` commands (whose
    directory travels in ``$SCOPECHECK_EXEC_CWD``) are returned as they are."""
    if spec.startswith(EXEC_PREFIX):
        return spec
    target, sep, attribute = spec.rpartition(":")
    if not sep or len(target) == 1 or os.path.isabs(target):
        return spec
    if target.endswith(".py") or "/" in target or "\\" in target:
        return f"{os.path.join(cwd, target)}:{attribute}"
    return spec


@attrs.frozen
class LoadedBackend:
    """A user backend ready to run: the :class:`Backend`, what it offers, and the counters its
    worlds fill in."""

    backend: Backend
    capabilities: Capabilities
    counts: RunCounts


#: What a factory's return value must have to be checked at all (``Repository``).
REPOSITORY_METHODS = ("create", "open", "list", "delete", "close")


def probe(factory: Any, spec: str) -> Capabilities:
    """Call ``factory`` once, in its own world, and see what its repository offers; a factory
    that raises is a one-line ``UsageError`` (``invalid_payload``), one that returns no
    repository another (``not_a_repository``): one line, not a failure of every rule."""
    kind = factory_kind(factory)
    try:
        world = world_for(factory, kind, lambda: 0, RunCounts())
    except Exception as exc:
        raise UsageError("invalid_payload", f"factory {spec} raised {exc!r}") from None
    inner = world._repo.inner
    missing = [name for name in REPOSITORY_METHODS if not callable(getattr(inner, name, None))]
    if missing:
        with contextlib.suppress(Exception):
            world.cleanup()
        raise UsageError(
            "not_a_repository",
            f"factory {spec} returned {type(inner).__name__}, not a repository: it has no "
            f"{', '.join(name + '()' for name in missing)} (INSTALL-14)",
        )
    try:
        own = check_own_files(getattr(inner, "own_files", ()), spec)
    except UsageError:
        with contextlib.suppress(Exception):
            world.cleanup()
        raise
    found = Capabilities(
        kind,
        reopen=callable(getattr(inner, "reopen", None)),
        fork=callable(getattr(inner, "fork", None)),
        own_files=own,
    )
    try:
        world.cleanup()
    except Exception as exc:
        raise UsageError("invalid_payload", f"closing {spec}'s repository raised {exc!r}") from None
    return found


#: The prefix of a backend spec that is a command speaking the process protocol.
EXEC_PREFIX = "exec:"
#: The directory an ``exec:`` command runs in when the caller is elsewhere (a subprocess).
EXEC_CWD_ENV = "SCOPECHECK_EXEC_CWD"
#: How a restart of a backend process gets its new child (``new`` or ``other``, PROC-3;
#: :data:`scopecheck.process.client.RestartPolicy`).
RESTART_ENV = "SCOPECHECK_PROCESS_RESTART"


def runnable(program: str, cwd: str) -> None:
    """A ``UsageError`` when the command's ``program`` cannot be started from ``cwd``: missing
    (``command_not_found``) or not executable (``command_not_executable``), INSTALL-14."""
    if os.sep in program:
        path = os.path.join(cwd, program)
        if not os.path.exists(path):
            raise UsageError("command_not_found", f"--exec: no program at {program}")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise UsageError(
                "command_not_executable", f"--exec: {program} is not an executable file"
            )
        return
    if shutil.which(program) is None:
        raise UsageError("command_not_found", f"--exec: no program {program!r} on PATH")


def load_process(spec: str) -> LoadedBackend:
    """``exec:COMMAND`` → a backend in a child process (``docs/protocol.md``).  The command is
    split like a shell would and runs in the current directory.  One pool of children serves
    every world of the backend, the probe's included: a world gets a fresh root and a child
    moved there by ``hello`` (PROC-8), a restart a child that has served no root (PROC-3);
    ``Backend.close`` stops the pool's children."""
    import shlex

    from scopecheck.models.errors import ProtocolError
    from scopecheck.process.client import ProcessPool, ProcessWorld

    text = spec.removeprefix(EXEC_PREFIX).strip()
    try:
        command = shlex.split(text)
    except ValueError as exc:
        raise UsageError("invalid_payload", f"cannot split the command {text!r}: {exc}") from None
    if not command:
        raise UsageError("invalid_payload", "exec: needs a command, e.g. exec:'node backend.js'")
    counts = RunCounts()
    cwd = os.environ.get(EXEC_CWD_ENV) or os.getcwd()
    runnable(command[0], cwd)
    policy = os.environ.get(RESTART_ENV) or "new"
    if policy not in ("new", "other"):
        raise UsageError("invalid_payload", f"${RESTART_ENV} is 'new' or 'other', not {policy!r}")
    pool = ProcessPool(command, cwd, restart=policy)  # type: ignore[arg-type]
    try:
        trial = ProcessWorld(command, lambda: 0, cwd=cwd, pool=pool)
    except ProtocolError as exc:
        pool.close()
        raise UsageError("invalid_payload", f"backend command {text!r}: {exc.message}") from None
    name = trial.repository().process.name
    fork = trial.repository().process.fork
    trial.cleanup()

    def new_world(clock: Clock) -> ProcessWorld:
        return ProcessWorld(command, clock, counts, cwd, pool=pool, escalate=True)

    from scopecheck.backends.crash_explorers import SyscallCrashExplorer

    explorer = SyscallCrashExplorer(tuple(command), cwd, name, spec)
    backend = Backend(name, new_world, f"backend process: {text}", crash=explorer, close=pool.close)
    capabilities = Capabilities("root", reopen=False, fork=fork, process=True)
    return LoadedBackend(backend, capabilities, counts)


def loaded_as_is(backend: Backend) -> LoadedBackend:
    """A :class:`Backend` itself (a bundled one, or a spec naming one): its repositories
    reopen and fork, as every bundled repository does."""
    return LoadedBackend(backend, Capabilities("plain", reopen=True, fork=True), RunCounts())


def load(spec: str) -> LoadedBackend:
    """``PATH_OR_MODULE:FACTORY`` (or ``exec:COMMAND``) → a :class:`LoadedBackend`; a
    ``UsageError`` says what is wrong.  A factory taking ``fs`` and ``root`` also gets the
    generic crash explorer (``Backend.crash``)."""
    if spec.startswith(EXEC_PREFIX):
        return load_process(spec)
    name, factory = load_factory(spec)
    counts = RunCounts()
    if isinstance(factory, Backend):
        return loaded_as_is(factory)
    if not callable(factory):
        raise UsageError("invalid_payload", f"{spec} is not callable")
    capabilities = probe(factory, spec)
    kind = capabilities.kind

    def new_world(clock: Clock) -> AdapterWorld:
        return world_for(factory, kind, clock, counts, capabilities.own_files)

    if kind == "plain":
        return LoadedBackend(Backend(name, new_world, f"user backend {spec}"), capabilities, counts)
    if kind == "root":
        from scopecheck.backends.crash_explorers import SyscallCrashExplorer

        served = anchored(spec, os.getcwd())
        explorer = SyscallCrashExplorer(
            (sys.executable, "-m", "scopecheck", "serve", served), os.getcwd(), name, spec
        )
        backend = Backend(
            name, new_world, f"user backend {spec} (files under root)", crash=explorer
        )
        return LoadedBackend(backend, capabilities, counts)
    from scopecheck.backends.crash_explorers import GenericCrashExplorer

    backend = Backend(
        name,
        new_world,
        f"user backend {spec} (files through scopecheck.FileSystem)",
        crash=GenericCrashExplorer(factory, name, spec),
    )
    return LoadedBackend(backend, capabilities, counts)


def load_backend(spec: str) -> Backend:
    """``PATH_OR_MODULE:FACTORY`` → a :class:`Backend` (see :func:`load`)."""
    return load(spec).backend
