"""Fixtures that run one test body on every backend under test.

``backend`` is parametrised with the backends named by ``--scopecheck-backend`` (the pytest
plugin, ``scopecheck.pytest_plugin``) or, without that option, with every bundled backend.
Nothing here changes Hypothesis's settings: the runs that use Hypothesis pass scopecheck's
profile themselves (INSTALL-2).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scopecheck.backends.registry import BUNDLED, Backend, World
from scopecheck.conformance.helpers import Clock
from scopecheck.models.protocols import Repository, Storage


def selected_backends(config: pytest.Config) -> list[Backend]:
    from scopecheck.pytest_plugin import loaded_backend

    specs = config.getoption("scopecheck_backend", default=None) or []
    if specs:
        return [loaded_backend(config, spec).backend for spec in specs]
    return [BUNDLED[name] for name in sorted(BUNDLED)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = selected_backends(metafunc.config)
        metafunc.parametrize("backend", chosen, ids=[b.name for b in chosen])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A case whose backend process broke the protocol fails with that protocol error, once,
    whichever thread met it and whatever the case asserted after it (PROC-2)."""
    from scopecheck.process.client import ProtocolFailure

    outcome: Any = yield
    world = getattr(item, "funcargs", {}).get("world")
    failure = getattr(world, "protocol_failure", None)
    if failure is None and outcome.excinfo is not None:
        raised = outcome.excinfo[1]
        failure = raised.error if isinstance(raised, ProtocolFailure) else None
    if failure is not None:
        outcome.force_exception(failure)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def world(backend: Backend, clock: Clock) -> Iterator[World]:
    made = backend.new_world(clock)
    yield made
    made.cleanup()


@pytest.fixture
def repo(world: World) -> Repository:
    return world.repository()


@pytest.fixture
def storage(repo: Repository) -> Storage:
    return repo.create("session")
