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
"""

from __future__ import annotations

import inspect
from typing import Any, Literal, Protocol

from scopecheck.impl.fs import FileSystem
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
