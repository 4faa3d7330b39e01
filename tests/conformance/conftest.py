"""Fixtures that run one test body on every bundled backend (000 §9.2: "run identically")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from models.protocols import Repository, Storage
from scopecheck.backends import BUNDLED, Backend, World


class Clock:
    """A deterministic clock: each call returns the current ``now``; tests advance it."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=sorted(BUNDLED), ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    return BUNDLED[request.param]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def world(backend: Backend, clock: Clock) -> Iterator[World]:
    made = backend.new_world(clock)
    yield made
    made.cleanup()


@pytest.fixture
def repo(world: World) -> Repository:
    return world.repository()


@pytest.fixture
def storage(repo: Repository) -> Storage:
    return repo.create("session")


def values_of(snapshot: Any) -> dict[Any, Any]:
    """Snapshot values as ``{(scope_id, namespace, key): decoded value}``."""
    return {key: record.value for key, record in snapshot.values}


def lists_of(snapshot: Any) -> dict[Any, Any]:
    return {key: [e.value for e in elements] for key, elements in snapshot.lists}
