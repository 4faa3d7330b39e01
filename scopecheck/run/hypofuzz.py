"""HypoFuzz targets for any backend: a user's factory or a backend process (FLEET-3).

HypoFuzz fuzzes the Hypothesis tests of the files it collects.  :func:`fuzz_targets_for` turns
one backend spec -- ``PATH_OR_MODULE:FACTORY`` or ``exec:COMMAND`` -- into such tests: the
storage machine, the fork machine when the repository has ``fork()``, and crash exploration
when the backend carries a crash explorer that can run here.  A file HypoFuzz collects::

    import scopecheck

    globals().update(scopecheck.fuzz_targets_for("my_backend.py:make_backend"))

``scopecheck hypofuzz SPEC`` writes that file and runs ``hypothesis fuzz`` on it.

The tests run under scopecheck's profile (namespaced, INSTALL-2), loaded as Hypothesis's default
settings, because HypoFuzz fuzzes a test only when its database is the default settings' one:
``$SCOPECHECK_DB``, a directory or a Redis shared by the fleet (FLEET-1).  The machines are the
classes ``pytest --scopecheck-backend`` runs for the same spec, so their saved failures are
replayed first there (the database key is the machine's); the crash target's saved workload
seeds are explored again by :func:`replay_crash_findings`, which the plugin's crash tests and
``validate`` call.
"""

from __future__ import annotations

import math
import unittest
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from hypothesis import Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from scopecheck.backends.adapters import load
from scopecheck.backends.registry import Backend
from scopecheck.machines.fork import make_fork_machine
from scopecheck.machines.storage import make_machine
from scopecheck.run.profiles import load_profile

#: The workload seeds the crash target draws from.
MAX_SEED = 2**31 - 1


def fuzz_targets_for(spec: str, *, profile: str | None = None) -> dict[str, Any]:
    """``{name: test}`` for ``spec``: each storage and fork machine's ``TestCase`` and a
    ``test_crash_exploration_…`` function, to put in a module HypoFuzz or pytest collects.
    Loads ``profile`` (default ``$SCOPECHECK_PROFILE``, else ``dev``) as the default settings.
    A spec that cannot be loaded is a :class:`~scopecheck.models.errors.UsageError`."""
    load_profile(profile)
    loaded = load(spec)
    backend = loaded.backend
    storage = make_machine(backend)
    targets: dict[str, Any] = {f"Test{storage.__name__}": storage.TestCase}
    if loaded.capabilities.fork:
        fork = make_fork_machine(backend)
        targets[f"Test{fork.__name__}"] = fork.TestCase
    explorer = backend.crash
    if explorer is not None and explorer.unavailable is None:
        crash = crash_target(backend)
        targets[crash.__name__] = crash
    return targets


#: What one seed's crash exploration gave: states, fault and kill runs, failure records
#: (``CrashExplorer.explore_with_faults``).
Explored = tuple[int, int, list[dict[str, Any]]]


def crash_target(backend: Backend, explore: Callable[[int], Explored] | None = None) -> Any:
    """A Hypothesis test exploring the crash states of one seeded workload of ``backend``:
    the fixed work ``validate --examples`` does for a seed (its priority crash points, eight
    crashed recoveries, every fault and kill run), so the same seed replays the same states.
    Fails with the first distinct failure's summary and reproducer record.  ``explore`` makes
    a seed's exploration (default: the backend's explorer); :func:`replay_crash_findings`
    passes one that keeps what each seed found."""
    explorer = backend.crash
    assert explorer is not None
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).lower().split()

    def explore_seed(seed: int) -> Explored:
        return explorer.explore_with_faults(math.inf, seed)

    made = explore if explore is not None else explore_seed

    @given(seed=st.integers(min_value=0, max_value=MAX_SEED))
    def test(seed: int) -> None:
        from scopecheck.crashsim.failure import CrashFailure

        records = made(seed)[2]
        if records:
            first = CrashFailure.from_json(records[0])
            raise AssertionError(f"{len(records)} crash failure(s); the first:\n{first}")

    test.__name__ = test.__qualname__ = "test_crash_exploration_" + "_".join(words)
    # Every backend's crash test has the same source; the backend's name tells their saved
    # examples apart in the database.
    inner: Any = test.hypothesis.inner_test  # type: ignore[attr-defined]
    inner._hypothesis_internal_add_digest = backend.name.encode()
    return test


#: Until a saved workload seed fails, at most this many that pass are explored again: the
#: database's primary examples first, then, when none of those fails, its secondary ones
#: (intermediate seeds of a shrink).  Every primary example runs once one has failed.
REPLAY_PASSING = 4


@attrs.frozen
class Replayed:
    """What :func:`replay_crash_findings` explored: each saved seed's exploration, and the
    limits the explorer noted over all of them (it notes them afresh for every seed)."""

    seeds: Mapping[int, Explored] = attrs.field(factory=dict)
    limits: tuple[str, ...] = ()


def replay_crash_findings(backend: Backend, database: ExampleDatabase) -> Replayed:
    """Run :func:`crash_target` on the workload seeds ``database`` holds for ``backend`` --
    what a HypoFuzz worker, a fleet or an earlier run saved -- and on nothing else; no seeds
    when nothing is saved (FLEET-3).  Each seed is explored once: Hypothesis's rerun of a
    failing seed for its report gets the kept result, so a seed that fails once is reported
    failing, never flaky.  Every failing seed of the primary examples runs
    (``report_multiple_bugs``); of those that pass (at most :data:`REPLAY_PASSING` before
    one fails), Hypothesis drops them from the database."""
    explorer = backend.crash
    assert explorer is not None
    explored: dict[int, Explored] = {}
    limits: dict[str, None] = {}

    def explore(seed: int) -> Explored:
        if seed not in explored:
            explored[seed] = explorer.explore_with_faults(math.inf, seed)
            limits.update(dict.fromkeys(explorer.limits))
        return explored[seed]

    replay = settings(
        deadline=None, database=database, phases=[Phase.reuse], verbosity=Verbosity.quiet,
        print_blob=False, report_multiple_bugs=True, max_examples=REPLAY_PASSING,
    )  # fmt: skip
    try:
        replay(crash_target(backend, explore))()
    except unittest.SkipTest:
        return Replayed()
    except (AssertionError, ExceptionGroup):
        # Failing seeds: their records say what failed.  Anything else is raised.
        if not any(records for _, _, records in explored.values()):
            raise
    return Replayed(explored, tuple(limits))
