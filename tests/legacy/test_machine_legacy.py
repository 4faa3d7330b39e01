"""The stateful machine with Sessions that start as legacy files (LEGACY-11, LEGACY-9/10).

Session ``s1`` starts as the first lines of the real ``large-session`` transcript and ``s2`` as
the first lines of ``before-compaction`` (through its first compaction), each renamed to the
machine's Session id.  The backend imports them through ``JsonlRepository.open``; the model
starts from ``models.legacy.import_log`` over the same lines — a separately written importer.
Every later step (session and scoped writes, close/reopen before and after the upgrade,
restart, repository misuse) is then checked against the model as for any Session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

from impl.fs import FileSystem
from impl.jsonl import JsonlRepository
from models.legacy import import_log
from models.protocols import Clock, Repository
from models.reference import ReferenceRepository, Transaction
from scopecheck.backends import Backend, JsonlWorld, World
from scopecheck.machine import BASE_TIME, SESSION_IDS, StorageMachine
from tests.legacy.conftest import DATA, counter_ids

#: Lines of each transcript the machine starts from (header included).
PREFIX = {"s1": ("large-session", 120), "s2": ("before-compaction", 380)}


def legacy_lines(sid: str) -> list[bytes]:
    name, count = PREFIX[sid]
    lines = (DATA / f"{name}.jsonl").read_bytes().split(b"\n")[:count]
    head = orjson.loads(lines[0])
    head["id"] = sid
    return [orjson.dumps(head), *lines[1:]]


class DeterministicIdsRepository(JsonlRepository):
    """Import ids that do not change across reopens, so the model can predict them."""

    def __init__(
        self, root: str, fs: FileSystem | None = None, clock: Any = None, cwd: str | None = None
    ) -> None:
        super().__init__(root, fs, clock, cwd, legacy_ids=counter_ids)


def legacy_world(clock: Clock) -> World:
    world = JsonlWorld(clock, repository_class=DeterministicIdsRepository)
    for sid in SESSION_IDS:
        Path(world.root, f"{sid}.jsonl").write_bytes(b"\n".join(legacy_lines(sid)) + b"\n")
    return world


JSONL_LEGACY = Backend(
    "jsonl-legacy", legacy_world, "JSONL Sessions that start as real legacy transcripts"
)


class JsonlLegacyMachine(StorageMachine):
    backend = JSONL_LEGACY

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        type(self).examples_run += 1
        self.now = BASE_TIME
        self.world = self.backend.new_world(self.clock)
        self.repo: Repository = self.world.repository()
        self.model = ReferenceRepository()
        self.stores = {}
        self.models = {}
        for sid in SESSION_IDS:
            log = import_log(legacy_lines(sid), sid, counter_ids)
            self.model.logs[sid] = [Transaction(c.seq, c.timestamp, (c.write,)) for c in log]
            self.models[sid] = self.model.open(sid)
            self.stores[sid] = self.repo.open(sid)


JsonlLegacyMachine.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

TestJsonlLegacyMachine = pytest.mark.rule("LEGACY-11", "LEGACY-9", "LEGACY-10", "JSONL-19")(
    JsonlLegacyMachine.TestCase
)
