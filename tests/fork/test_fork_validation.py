"""Fork validation on every backend, and a fork machine whose power does not depend on the
backend (FORK-1, REPO-1, CHECK-8).

The refusals ``fork_refused`` makes are refused by every bundled world; and one planted
validation bug -- a refused fork that keeps the fresh destination it reserved -- is caught by
the same step and the same check in every world, whether a Session is a file (JSONL, SQLite
per-file), a row (SQLite container) or a registry entry (Memory, JSONL on pyfakefs, where the
disk diff cannot look).
"""

from __future__ import annotations

from typing import Any

import pytest

from scopecheck.backends.registry import Backend, JsonlWorld, SqliteWorld, memory_world
from scopecheck.backends.resolve import resolve_backend
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.memory import MemoryRepository
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.machines.fork import REFUSED_FORKS, make_fork_machine
from scopecheck.machines.storage import MismatchError
from scopecheck.models.fork import BranchFork
from scopecheck.planted.fork_validation import keeps_refused_destination, planted

WORLDS = ("memory", "jsonl", "jsonl-fakefs", "sqlite", "sqlite-shared")


@pytest.mark.rule("FORK-1", "FORK-2", "REPO-1", "CHECK-8")
@pytest.mark.parametrize("name", WORLDS)
def test_every_world_refuses_what_fork_refused_makes(name: str) -> None:
    machine = make_fork_machine(resolve_backend(name))()
    try:
        for call in REFUSED_FORKS:
            machine.fork_refused(call)
            machine.same_state()
    finally:
        machine.teardown()
    assert set(type(machine).outcomes) == {
        "not_found",
        "already_exists",
        "data_only_branch",
        "corrupt",
        "invalid_fork_options",
    }


def _keeps_destination(name: str) -> Backend:
    """The refusal-keeps-destination bug planted in world ``name``."""
    body = keeps_refused_destination
    if name == "memory":
        repo = planted(MemoryRepository, body)
        return Backend(name, memory_world(repo))
    if name.startswith("jsonl"):
        fake = name == "jsonl-fakefs"
        repo = planted(JsonlRepository, body)

        def jsonl(clock: Any) -> JsonlWorld:
            return JsonlWorld(clock, fake=fake, repository_class=repo)

        return Backend(name, jsonl)
    shared = name == "sqlite-shared"
    repo = planted(SqliteContainerRepository if shared else SqliteRepository, body)

    def sqlite(clock: Any) -> SqliteWorld:
        return SqliteWorld(clock, shared=shared, repository_class=repo)

    return Backend(name, sqlite)


@pytest.mark.rule("FORK-1", "CHECK-8")
@pytest.mark.parametrize("name", WORLDS)
def test_a_refused_fork_that_keeps_its_destination_is_caught_in_every_world(name: str) -> None:
    """One step, one check: ``repository.list()`` after the refused fork holds the reserved
    destination the model does not have -- in a world with a disk and in one without."""
    machine = make_fork_machine(_keeps_destination(name))()
    try:
        with pytest.raises(MismatchError, match=r"repository\.list\(\) after fork"):
            machine.fork(sid="s1", options=BranchFork("nope"))
    finally:
        machine.teardown()
