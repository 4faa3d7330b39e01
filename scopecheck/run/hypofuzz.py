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
replayed first there (the database key is the machine's).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

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


def crash_target(backend: Backend) -> Any:
    """A Hypothesis test exploring the crash states of one seeded workload of ``backend``:
    the fixed work ``validate --examples`` does for a seed (its priority crash points, eight
    crashed recoveries, every fault and kill run), so the same seed replays the same states.
    Fails with the first distinct failure's summary and reproducer record."""
    explorer = backend.crash
    assert explorer is not None
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).lower().split()

    @given(seed=st.integers(min_value=0, max_value=MAX_SEED))
    def test(seed: int) -> None:
        from scopecheck.crashsim.failure import CrashFailure

        _, _, records = explorer.explore_with_faults(math.inf, seed)
        if records:
            first = CrashFailure.from_json(records[0])
            raise AssertionError(f"{len(records)} crash failure(s); the first:\n{first}")

    test.__name__ = test.__qualname__ = "test_crash_exploration_" + "_".join(words)
    # Every backend's crash test has the same source; the backend's name tells their saved
    # examples apart in the database.
    inner: Any = test.hypothesis.inner_test  # type: ignore[attr-defined]
    inner._hypothesis_internal_add_digest = backend.name.encode()
    return test
