"""The stateful machine on each backend under test (model vs. backend after every step)."""

from __future__ import annotations

import pytest

from scopecheck.backends.registry import Backend
from scopecheck.machines.storage import make_machine
from scopecheck.pytest_plugin import run_machine

MACHINE_RULES = (
    "SCOPE-1",
    "TX-1",
    "TX-2",
    "TX-3",
    "TX-4",
    "SEQ-1",
    "SEQ-2",
    "SEQ-7",
    "RETIRE-2",
    "RETIRE-3",
    "RETIRE-4",
    "LIST-2",
    "LIST-3",
    "LIST-5",
    "STATS-1",
    "LIFE-2",
    "REPO-2",
    "REPO-4",
)


@pytest.mark.rule(*MACHINE_RULES)
def test_machine_agrees_with_the_model(backend: Backend, request: pytest.FixtureRequest) -> None:
    """Every result, error code and the complete logical state equal the model's, every step,
    across close/reopen and restarts (scopecheck's profile, ``$SCOPECHECK_PROFILE``, sets the
    budget; the user's own Hypothesis settings are left alone).  The example database's
    examples for this machine run first; under ``--scopecheck-replay`` they are all it runs
    (:func:`~scopecheck.pytest_plugin.machine_settings`).  The steps and examples run,
    passing or not, go into the test's ``user_properties`` for the plugin's verdict
    (:data:`~scopecheck.pytest_plugin.MACHINE_COUNTS`)."""
    run_machine(make_machine(backend), request)
