"""``replay_crash_findings`` explores every workload seed saved for a crash target, once each
(FLEET-3): what the plugin's crash tests and ``validate`` replay from a fleet's database.

A worker's failure is saved the way Hypothesis saves one, and two more failing seeds beside it
under the same key, as other workers of a fleet would; the broken file example (no fsync)
fails on every one.  Stopping at the first failing seed, or exploring a seed again for
Hypothesis's report of it, fails these tests.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import Phase, settings
from hypothesis.database import InMemoryExampleDatabase, choices_from_bytes, choices_to_bytes

from scopecheck.backends.adapters import load
from scopecheck.backends.registry import Backend
from scopecheck.run.hypofuzz import Explored, crash_target, replay_crash_findings

SPEC = "scopecheck.examples.broken_file_backend:make_backend"


class CountingExplorer:
    """The backend's explorer, wrapped: every seed it explores is listed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seeds: list[int] = []

    def explore_with_faults(self, budget: float, seed: int, **options: Any) -> Explored:
        self.seeds.append(seed)
        return self.inner.explore_with_faults(budget, seed, **options)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _saved_by_a_worker(backend: Backend, database: InMemoryExampleDatabase) -> bytes:
    """Run the crash target until it fails, saving the failure; its database key."""
    found = settings(
        database=database, phases=[Phase.generate], max_examples=5, deadline=None,
        report_multiple_bugs=False,
    )(crash_target(backend))  # fmt: skip
    with pytest.raises(AssertionError, match="crash failure"):
        found()
    (key,) = [key for key in database.data if b"." not in key]
    return key


@pytest.mark.rule("FLEET-3")
def test_every_saved_failing_seed_is_explored_once() -> None:
    backend = load(SPEC).backend
    database = InMemoryExampleDatabase()
    key = _saved_by_a_worker(backend, database)
    for seed in (7, 1234):
        database.save(key, choices_to_bytes((seed,)))
    saved = {choices[0] for choices in map(choices_from_bytes, database.fetch(key)) if choices}
    assert len(saved) == 3, saved

    counting = CountingExplorer(backend.crash)
    explored = replay_crash_findings(attrs.evolve(backend, crash=counting), database).seeds
    assert set(explored) == saved
    assert all(records for _, _, records in explored.values()), explored
    assert sorted(counting.seeds) == sorted(saved)  # once each


@pytest.mark.rule("FLEET-3")
def test_an_empty_database_replays_nothing() -> None:
    backend = load(SPEC).backend
    counting = CountingExplorer(backend.crash)
    empty = InMemoryExampleDatabase()
    assert replay_crash_findings(attrs.evolve(backend, crash=counting), empty).seeds == {}
    assert counting.seeds == []
