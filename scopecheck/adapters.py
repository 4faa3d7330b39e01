"""Loading a third-party backend from ``PATH_OR_MODULE:FACTORY``.

The factory is a callable ``make_backend(clock) -> Repository`` that returns a fresh, empty
repository each time it is called (``clock()`` gives commit timestamps in Unix ms).  If the
repository has a ``reopen()`` method returning a new repository over the same data, the machine
uses it to simulate a process restart; otherwise a restart closes every open handle and keeps
the same repository object.  A module attribute that already is a
:class:`~scopecheck.backends.Backend` is used as it is.

A backend that keeps files may take two more keyword arguments, ``fs`` (an
:class:`scopecheck.impl.fs.FileSystem`) and ``root`` (a directory path): ``make_backend(clock, *,
fs, root)``.  It must do every file operation through ``fs``, keep every file under ``root``, and,
called again over the same ``root``, reopen what is there.  Then the machine runs it over a
fresh real temp directory per example (a restart calls the factory again over the same
directory) and crash exploration (:mod:`scopecheck.crashsim.generic_sweep`) runs it over a simulated
disk; without them crash exploration is reported as skipped (CRASH-FS-8).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from scopecheck.backends import Backend
from scopecheck.models.errors import UsageError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.protocols import Clock, Repository, Storage


class _Tracking:
    """Wraps a user repository to remember open handles, so a restart can close them."""

    def __init__(self, repo: Any) -> None:
        self.inner = repo
        self.handles: list[Storage] = []

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


class AdapterWorld:
    """A World over a user factory (see the module docstring)."""

    def __init__(self, factory: Any, clock: Clock) -> None:
        self._repo = _Tracking(factory(clock))

    def repository(self) -> Repository:
        return self._repo

    def restart(self) -> Repository:
        for handle in self._repo.handles:
            handle.close()
        reopen = getattr(self._repo.inner, "reopen", None)
        inner = reopen() if callable(reopen) else self._repo.inner
        self._repo = _Tracking(inner)
        return self._repo

    def cleanup(self) -> None:
        close = getattr(self._repo.inner, "close", None)
        if callable(close):
            close()


class FileAdapterWorld(AdapterWorld):
    """A World over a factory that takes ``fs`` and ``root``: a fresh real temp directory
    (under ``$SCOPECHECK_SCRATCH`` if set, e.g. a RAM disk), real fsyncs, and a restart that
    calls the factory again over the same directory, so every restart reads the files back."""

    def __init__(self, factory: Any, clock: Clock) -> None:
        from scopecheck.impl.fs import OsFileSystem

        self._factory = factory
        self._clock = clock
        self._fs = OsFileSystem()
        scratch = os.environ.get("SCOPECHECK_SCRATCH") or None
        self._root = tempfile.mkdtemp(prefix="scopecheck-user-", dir=scratch)
        self._repo = _Tracking(factory(clock, fs=self._fs, root=self._root))

    def restart(self) -> Repository:
        for handle in self._repo.handles:
            handle.close()
        close = getattr(self._repo.inner, "close", None)
        if callable(close):
            close()
        self._repo = _Tracking(self._factory(self._clock, fs=self._fs, root=self._root))
        return self._repo

    def cleanup(self) -> None:
        """Close every handle (they may hold open files), the repository, then delete the
        directory; a handle that refuses to close does not keep the directory."""
        try:
            for handle in self._repo.handles:
                with contextlib.suppress(Exception):
                    handle.close()
            super().cleanup()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


def _import_target(target: str) -> Any:
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise UsageError("not_found", f"no Python file at {target}")
        name = f"scopecheck_user_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError("not_found", f"cannot import {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise UsageError("invalid_payload", f"importing {target} failed: {exc!r}") from None
        return module
    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise UsageError("not_found", f"cannot import module {target!r}: {exc}") from None
    except Exception as exc:
        raise UsageError("invalid_payload", f"importing {target} failed: {exc!r}") from None


def anchored(spec: str, cwd: str) -> str:
    """``spec`` with a relative file path made absolute against ``cwd``: the ``--workers``
    processes run elsewhere, but ``examples/x.py:make_backend`` means the file the user
    sees from where they typed it.  Module specs and bundled names are returned as they are."""
    target, sep, attribute = spec.rpartition(":")
    if not sep or len(target) == 1 or os.path.isabs(target):
        return spec
    if target.endswith(".py") or "/" in target or "\\" in target:
        return f"{os.path.join(cwd, target)}:{attribute}"
    return spec


def load_factory(spec: str) -> tuple[str, Any]:
    """``PATH_OR_MODULE:FACTORY`` → ``(name, attribute)``; a ``UsageError`` says what is wrong."""
    target, sep, attribute = spec.rpartition(":")
    if not sep or not target or not attribute or len(target) == 1:  # "C:" is a drive, not a split
        raise UsageError(
            "invalid_payload",
            f"backend must look like PATH_OR_MODULE:FACTORY (got {spec!r}), "
            "e.g. examples/good_backend.py:make_backend",
        )
    module = _import_target(target)
    factory = getattr(module, attribute, None)
    if factory is None:
        raise UsageError("not_found", f"{target} has no attribute {attribute!r}")
    name = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]
    return name, factory


def load_backend(spec: str) -> Backend:
    """``PATH_OR_MODULE:FACTORY`` → a :class:`Backend`; a ``UsageError`` says what is wrong.

    A factory that takes ``fs`` and ``root`` gets a :class:`FileAdapterWorld` and a generic
    crash explorer (``Backend.crash``); any other gets an :class:`AdapterWorld` and none."""
    from scopecheck.factory import takes_filesystem

    name, factory = load_factory(spec)
    if isinstance(factory, Backend):
        return factory
    if not callable(factory):
        raise UsageError("invalid_payload", f"{spec} is not callable")
    files = takes_filesystem(factory)
    world = FileAdapterWorld if files else AdapterWorld
    try:  # fail early, with one line, if the factory itself is broken
        world(factory, lambda: 0).cleanup()
    except Exception as exc:
        raise UsageError("invalid_payload", f"factory {spec} raised {exc!r}") from None
    if not files:
        return Backend(name, lambda clock: AdapterWorld(factory, clock), f"user backend {spec}")
    from scopecheck.crash_explorers import GenericCrashExplorer

    return Backend(
        name,
        lambda clock: FileAdapterWorld(factory, clock),
        f"user backend {spec} (files through scopecheck.impl.fs)",
        crash=GenericCrashExplorer(factory, name, spec),
    )
