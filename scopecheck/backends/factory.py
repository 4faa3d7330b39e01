"""What a backend factory is, and which of its three shapes scopecheck was given.

A factory returns a fresh repository each time it is called.  Its signature says what the
backend needs from a run, and scopecheck reads it from the signature alone (a factory taking
``**kwargs`` is not guessed at):

``make_backend(clock)``
    an in-process backend; ``reopen()`` on the repository, when present, is a restart.
``make_backend(clock, *, root)``
    a backend that keeps its files under the directory ``root``.  Every world gets a fresh
    directory, a restart calls the factory again over the same directory, and afterwards the
    repository is closed and the directory removed (INSTALL-5).
``make_backend(clock, *, fs, root)``
    as above, with every file operation through ``fs`` (a
    :class:`~scopecheck.impl.fs.FileSystem`), which lets the crash simulator record, fail and
    cut short each one (CRASH-FS-*).

:func:`load_factory` finds a factory from ``PATH_OR_MODULE:FACTORY``.  It lives here, apart
from the worlds that run a factory (:mod:`scopecheck.backends.adapters`), so ``scopecheck serve`` --
started again at every restart of a served backend -- imports no more than it serves.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Literal, Protocol

from scopecheck.impl.fs import FileSystem
from scopecheck.models.errors import UsageError
from scopecheck.models.protocols import Clock, Repository

FactoryKind = Literal["plain", "root", "fs"]


class BackendFactory(Protocol):
    """``make_backend(clock) -> Repository``; ``clock()`` gives commit timestamps in Unix ms."""

    def __call__(self, clock: Clock, /) -> Repository: ...


class DirectoryBackendFactory(Protocol):
    """``make_backend(clock, *, root) -> Repository``: the backend keeps its files under
    ``root`` and, called again over the same ``root``, reopens what is there."""

    def __call__(self, clock: Clock, /, *, root: str) -> Repository: ...


class FileSystemBackendFactory(Protocol):
    """``make_backend(clock, *, fs, root) -> Repository``: as
    :class:`DirectoryBackendFactory`, every file operation through ``fs``."""

    def __call__(self, clock: Clock, /, *, fs: FileSystem, root: str) -> Repository: ...


def _keywords(factory: Any) -> set[str]:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return set()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name for name, p in parameters.items() if p.kind in kinds}


def factory_kind(factory: Any) -> FactoryKind:
    """``"fs"`` when ``factory`` accepts the keywords ``fs`` and ``root`` (CRASH-FS-8),
    ``"root"`` when it accepts ``root`` alone, else ``"plain"``."""
    names = _keywords(factory)
    if {"fs", "root"} <= names:
        return "fs"
    return "root" if "root" in names else "plain"


def takes_filesystem(factory: Any) -> bool:
    """Whether ``factory`` accepts the keyword arguments ``fs`` and ``root`` (CRASH-FS-8)."""
    return factory_kind(factory) == "fs"


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
