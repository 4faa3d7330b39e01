"""Both classic mistakes of the examples in one backend, for the HTML report's test: retirement
forgets the scope's lists (``examples/broken_backend.py``) and a commit is acknowledged before
it is durable (``examples/broken_file_backend.py``).  One ``validate`` run of it fails in the
machine, the conformance cases and crash exploration, so one real verdict holds every kind of
failure the report draws."""

from __future__ import annotations

from typing import Any

from scopecheck.examples.broken_backend import LeakyStorage
from scopecheck.examples.broken_file_backend import UnsyncedRepository, UnsyncedStorage


class LeakyUnsyncedStorage(UnsyncedStorage, LeakyStorage):
    """The unsynced append over the leaky retirement."""


class LeakyUnsyncedRepository(UnsyncedRepository):
    storage_class = LeakyUnsyncedStorage


def make_backend(clock: Any, *, fs: Any, root: str) -> LeakyUnsyncedRepository:
    return LeakyUnsyncedRepository(clock, fs, root)
