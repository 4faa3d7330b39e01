"""The fork machine on each backend under test whose repository has ``fork()``: the storage
machine's steps and forks between them, every successful fork compared with the model.

It is the class ``scopecheck.fuzz_targets_for`` gives HypoFuzz for the same backend, so the
example database's examples for it run first, and alone under ``--scopecheck-replay``
(FLEET-3); ``validate`` runs the same machine in its forks phase.  A repository without
``fork()`` skips it, never passes it.
"""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.backends.registry import Backend
from scopecheck.conformance.helpers import Clock
from scopecheck.machines.fork import make_fork_machine
from scopecheck.pytest_plugin import MACHINE_COUNTS, machine_settings

FORK_MACHINE_RULES = (
    "FORK-2",
    "FORK-3",
    "FORK-4",
    "FORK-5",
    "FORK-6",
    "FORK-7",
    "FORK-8",
    "FORK-9",
    "FORK-10",
    "FORK-11",
)


def _has_fork(backend: Backend) -> bool:
    """Whether the backend's repository has ``fork()``, asked of a fresh world as the fork
    cases ask it (``test_fork_cases.py``)."""
    world = backend.new_world(Clock())
    try:
        repository = world.repository()
        return callable(getattr(getattr(repository, "inner", repository), "fork", None))
    finally:
        world.cleanup()


@pytest.mark.rule(*FORK_MACHINE_RULES)
def test_fork_machine_agrees_with_the_model(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    """Every fork's destination and source equal the model's, every step, across restarts;
    the steps and examples run go into ``user_properties`` as ``test_machine.py``'s do."""
    if not _has_fork(backend):
        pytest.skip("fork machine: skipped (the repository has no fork())")
    machine = make_fork_machine(backend)
    try:
        run_state_machine_as_test(machine, settings=machine_settings(request.config))  # type: ignore[no-untyped-call]
    finally:
        counts = {"steps": machine.steps_run, "examples": machine.examples_run}
        request.node.user_properties.append((MACHINE_COUNTS, counts))
