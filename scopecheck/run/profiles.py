"""Hypothesis settings profiles: ``dev`` (default), ``ci``, ``nightly``, ``mutants``, ``crosshair``,
``mutation``.

Pick one with ``SCOPECHECK_PROFILE=ci`` or ``scopecheck fuzz --profile ci``.  In Hypothesis's
registry every profile is namespaced (``scopecheck-ci``): a user's own ``ci`` or ``dev`` profile
is never replaced (INSTALL-2).  Both spellings are accepted wherever a profile is named.
Nothing here runs at import: a profile is registered when one is asked for, and only
:func:`load_profile` changes Hypothesis's default settings — the CLI and this project's own
test suite call it; the pytest plugin and the conformance suite never do (they pass
:func:`get_profile`'s settings to the runs they make).  ``crosshair`` is
opt-in and meant for the property tests of the model's pure parts
(``SCOPECHECK_PROFILE=crosshair pytest tests/checking/test_pure_properties.py``, CHECK-6): it
draws examples with the CrossHair solver backend (``hypothesis-crosshair``, in the ``test``
extra) instead of Hypothesis's random search, so it reaches inputs a random draw rarely hits.
Under mutmut (which sets ``MUTANT_UNDER_TEST`` in the environment) the default is ``mutation``
instead of ``dev``, so a plain ``mutmut run`` gets the same verdict for the same mutant every
time (docs/mutation.md).

The failing-example database is Hypothesis's directory database under ``.hypothesis/``, another
directory, or a Redis shared by a fleet beside the local directory, as ``$SCOPECHECK_DB`` says
(:mod:`scopecheck.run.example_db`, FLEET-1), so failures found in one run are replayed first in
the next.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import InvalidArgument

PROFILES = ("dev", "ci", "nightly", "mutants", "crosshair", "mutation")
#: The prefix of every profile name scopecheck registers with Hypothesis.
NAMESPACE = "scopecheck-"
MUTMUT_ENV_VAR = "MUTANT_UNDER_TEST"
ENV_VAR = "SCOPECHECK_PROFILE"

_QUIET_CHECKS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def _database() -> ExampleDatabase:
    from scopecheck.run.example_db import example_database

    return example_database()


def register_profiles() -> None:
    """Register the profiles, each on top of Hypothesis's built-in ``default`` profile -- never
    on whatever profile is loaded now (Hypothesis loads its own derandomised ``ci`` profile
    whenever ``CI`` is set, which would make every fuzzing round replay the same examples)."""
    base: dict[str, Any] = {
        "parent": settings.get_profile("default"),
        "derandomize": False,
        "deadline": None,
        "suppress_health_check": _QUIET_CHECKS,
        "print_blob": True,
        "stateful_step_count": 40,
    }
    settings.register_profile(NAMESPACE + "dev", max_examples=40, database=_database(), **base)
    settings.register_profile(NAMESPACE + "ci", max_examples=120, database=_database(), **base)
    settings.register_profile(
        NAMESPACE + "nightly",
        max_examples=5000,
        database=_database(),
        **{**base, "stateful_step_count": 80},
    )
    # Planted-bug runs: no database (a mutant's failure must not leak into real runs), no
    # explicit replay, a derandomised search.  Derandomised is not fully fixed: Hypothesis also
    # draws literal constants from every *imported* local module, so the search differs with
    # what a process imported earlier (seen under xdist).  The budget is therefore generous; a
    # caught mutant stops at its first failure, so only an escape pays for it.
    settings.register_profile(
        NAMESPACE + "mutants",
        max_examples=1500,
        database=None,
        phases=[Phase.generate, Phase.target, Phase.shrink],
        **{**base, "derandomize": True},
    )
    # Mutation-score runs (mutmut over models/ and impl/, docs/mutation.md): every mutant reruns
    # the tests that reach the mutated function, thousands of times over, so the budget is small
    # and the search derandomised -- a survivor must survive again on the next run, otherwise the
    # triage list (spec/mutation/triage.toml) could not be kept.  No database: one mutant's failing
    # example must not be replayed against the next mutant or leak into ordinary runs.
    settings.register_profile(
        NAMESPACE + "mutation",
        max_examples=12,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        **{**base, "stateful_step_count": 25, "derandomize": True},
    )


def register_crosshair_profile() -> None:
    """Registered only when chosen: ``backend="crosshair"`` is validated at registration and
    needs the ``hypothesis-crosshair`` plugin, which a non-test install does not have."""
    try:
        settings.register_profile(
            NAMESPACE + "crosshair",
            parent=settings.get_profile("default"),
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


def short_name(name: str) -> str:
    """``"ci"`` for ``"ci"`` or ``"scopecheck-ci"``; a ``ValueError`` names the choices."""
    short = name.removeprefix(NAMESPACE)
    if short not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return short


def chosen_name(name: str | None = None) -> str:
    """The short name of ``name``, else of ``$SCOPECHECK_PROFILE``, else ``dev`` (``mutation``
    under mutmut)."""
    default = "mutation" if MUTMUT_ENV_VAR in os.environ else "dev"
    return short_name(name or os.environ.get(ENV_VAR) or default)


def get_profile(name: str | None = None) -> settings:
    """The settings of profile ``name`` (default: :func:`chosen_name`) *without* making it the
    process default: a caller that runs one machine under a profile (a planted bug, a replay,
    a benchmark, the conformance suite in a user's pytest run) must not change the budget of
    every later test in the same process."""
    short = chosen_name(name)
    register_profiles()
    if short == "crosshair":
        register_crosshair_profile()
    return settings.get_profile(NAMESPACE + short)


def load_profile(name: str | None = None) -> settings:
    """Make profile ``name`` (default: :func:`chosen_name`) Hypothesis's default settings."""
    profile = get_profile(name)
    settings.load_profile(NAMESPACE + chosen_name(name))
    return profile
