"""Hypothesis settings profiles: ``dev`` (default), ``ci``, ``nightly``, ``mutants``, ``crosshair``,
``mutation``.

Pick one with ``SCOPECHECK_PROFILE=ci`` or ``scopecheck fuzz --profile ci``.  ``crosshair`` is
opt-in and meant for the property tests of the model's pure parts
(``SCOPECHECK_PROFILE=crosshair pytest tests/checking/test_pure_properties.py``, CHECK-6): it
draws examples with the CrossHair solver backend (``hypothesis-crosshair``, in the ``test``
extra) instead of Hypothesis's random search, so it reaches inputs a random draw rarely hits.
Under mutmut (which sets ``MUTANT_UNDER_TEST`` in the environment) the default is ``mutation``
instead of ``dev``, so a plain ``mutmut run`` gets the same verdict for the same mutant every
time (docs/mutation.md).

The failing-example database is Hypothesis's directory database under ``.hypothesis/`` (override
the path with ``SCOPECHECK_DB``), so failures found in one run are replayed first in the next.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import InvalidArgument

PROFILES = ("dev", "ci", "nightly", "mutants", "crosshair", "mutation")
MUTMUT_ENV_VAR = "MUTANT_UNDER_TEST"
ENV_VAR = "SCOPECHECK_PROFILE"

_QUIET_CHECKS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def _database() -> DirectoryBasedExampleDatabase:
    return DirectoryBasedExampleDatabase(os.environ.get("SCOPECHECK_DB", ".hypothesis/examples"))


def register_profiles() -> None:
    base: dict[str, Any] = {
        "deadline": None,
        "suppress_health_check": _QUIET_CHECKS,
        "print_blob": True,
        "stateful_step_count": 40,
    }
    settings.register_profile("dev", max_examples=40, database=_database(), **base)
    settings.register_profile("ci", max_examples=120, database=_database(), **base)
    settings.register_profile(
        "nightly", max_examples=5000, database=_database(), **{**base, "stateful_step_count": 80}
    )
    # Planted-bug runs: no database (a mutant's failure must not leak into real runs), no
    # explicit replay, a derandomised search.  Derandomised is not fully fixed: Hypothesis also
    # draws literal constants from every *imported* local module, so the search differs with
    # what a process imported earlier (seen under xdist).  The budget is therefore generous; a
    # caught mutant stops at its first failure, so only an escape pays for it.
    settings.register_profile(
        "mutants",
        max_examples=1500,
        database=None,
        derandomize=True,
        phases=[Phase.generate, Phase.target, Phase.shrink],
        **base,
    )
    # Mutation-score runs (mutmut over models/ and impl/, docs/mutation.md): every mutant reruns
    # the tests that reach the mutated function, thousands of times over, so the budget is small
    # and the search derandomised -- a survivor must survive again on the next run, otherwise the
    # triage list (spec/mutation/triage.toml) could not be kept.  No database: one mutant's failing
    # example must not be replayed against the next mutant or leak into ordinary runs.
    settings.register_profile(
        "mutation",
        max_examples=12,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        **{**base, "stateful_step_count": 25},
    )


def register_crosshair_profile() -> None:
    """Registered only when chosen: ``backend="crosshair"`` is validated at registration and
    needs the ``hypothesis-crosshair`` plugin, which a non-test install does not have."""
    try:
        settings.register_profile(
            "crosshair",
            backend="crosshair",
            max_examples=100,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )
    except InvalidArgument as exc:
        raise ValueError(
            f"the crosshair profile needs hypothesis-crosshair: pip install -e '.[test]' ({exc})"
        ) from None


def get_profile(name: str) -> settings:
    """The settings of profile ``name`` *without* making it the process default: a caller
    that runs one machine under a profile (a planted bug, a replay, a benchmark) must not
    change the budget of every later test in the same process."""
    register_profiles()
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    if name == "crosshair":
        register_crosshair_profile()
    return settings.get_profile(name)


def load_profile(name: str | None = None) -> settings:
    """Load ``name`` (or ``$SCOPECHECK_PROFILE``; default ``dev``, ``mutation`` under mutmut)."""
    register_profiles()
    default = "mutation" if MUTMUT_ENV_VAR in os.environ else "dev"
    chosen = name or os.environ.get(ENV_VAR, default)
    profile = get_profile(chosen)
    settings.load_profile(chosen)
    return profile
