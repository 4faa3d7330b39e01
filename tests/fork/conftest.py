"""Fixtures for the focused fork tests: the conformance world on each bundled backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scopecheck.conformance.forks import BUSY, IDLE, Env, rich_source

__all__ = ["BUSY", "IDLE", "Env", "rich_source"]

BACKENDS = ("memory", "jsonl", "sqlite", "sqlite-shared")


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    made = Env(request.param)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def _scratch_on_ram_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite worlds on /dev/shm when available: these tests check fork logic, not power-loss
    durability (the crash sweeps do), and fsync-bound forks are slow on a loaded machine."""
    import os

    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        monkeypatch.setenv("SCOPECHECK_SCRATCH", "/dev/shm")
