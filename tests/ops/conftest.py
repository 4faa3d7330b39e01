"""Fixtures for the operation-lifecycle tests: a lifecycle machine instance per backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.lifecycle import LifecycleMachine, make_lifecycle_machine

_MACHINES = {name: make_lifecycle_machine(backend) for name, backend in BUNDLED.items()}


@pytest.fixture(params=sorted(_MACHINES))
def run(request: pytest.FixtureRequest) -> Iterator[LifecycleMachine]:
    """A fresh lifecycle machine on one bundled backend; its rules are the harness steps and
    every rule runs the machine's checks, so a focused test is a short program plus asserts."""
    machine = _MACHINES[request.param]()
    try:
        yield machine
    finally:
        machine.teardown()
