"""The fork machine on each backend under test whose repository has ``fork()``: the storage
machine's steps and forks between them, every successful fork compared with the model.

It is the class ``scopecheck.fuzz_targets_for`` gives HypoFuzz for the same backend, so the
example database's examples for it run first, and alone under ``--scopecheck-replay``
(FLEET-3); ``validate`` runs the same machine in its forks phase.  A repository without
``fork()`` -- decided as ``validate`` decides it, by the loaded backend's capabilities
(INSTALL-15) -- skips it, never passes it.
"""

from __future__ import annotations

import pytest

from scopecheck.backends.registry import Backend
from scopecheck.machines.fork import make_fork_machine
from scopecheck.pytest_plugin import loaded_for, run_machine

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


@pytest.mark.rule(*FORK_MACHINE_RULES)
def test_fork_machine_agrees_with_the_model(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    """Every fork's destination and source equal the model's, every step, across restarts;
    the steps and examples run go into ``user_properties`` as ``test_machine.py``'s do."""
    if not loaded_for(request.config, backend).capabilities.fork:
        pytest.skip("fork machine: skipped (the repository has no fork())")
    run_machine(make_fork_machine(backend), request)
