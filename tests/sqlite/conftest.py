"""Fixtures for the SQLite tests: a repository factory over a temp dir, for both layouts."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.models.protocols import Clock

LAYOUTS = ("per-file", "shared")

MakeRepo = Callable[..., Any]


def open_repository(layout: str, root: Path, clock: Clock, **kwargs: Any) -> Any:
    if layout == "shared":
        return SqliteContainerRepository(os.path.join(root, "sessions.sqlite"), clock, **kwargs)
    return SqliteRepository(root, clock, **kwargs)


@pytest.fixture(params=LAYOUTS)
def layout(request: pytest.FixtureRequest) -> str:
    result: str = request.param
    return result


@pytest.fixture
def make_repo(layout: str, tmp_path: Path) -> Iterator[MakeRepo]:
    """``make_repo(clock=..., **kwargs)`` opens a repository over the same directory each time;
    every repository it made is closed at teardown."""
    made: list[Any] = []

    def make(clock: Clock | None = None, **kwargs: Any) -> Any:
        counter = iter(range(1_000, 10**12))
        repo = open_repository(layout, tmp_path, clock or counter.__next__, **kwargs)
        made.append(repo)
        return repo

    yield make
    for repo in made:
        repo.close()
