"""The fork machine against every bundled backend, and the lockstep machine (FORK-*).

Budgets are small: the machine is shared; ``scopecheck fuzz`` style runs go deeper.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.fork import make_fork_machine, make_lockstep_machine

_FAST = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

_RULES = (
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


def _case(name: str) -> type:
    case = make_fork_machine(BUNDLED[name]).TestCase
    case.settings = _FAST
    return pytest.mark.rule(*_RULES)(case)  # type: ignore[no-any-return]


TestMemoryFork = _case("memory")
TestSqliteFork = _case("sqlite")
TestSqliteSharedFork = _case("sqlite-shared")
TestJsonlFork = _case("jsonl")

_LOCKSTEP = make_lockstep_machine((BUNDLED["memory"], BUNDLED["jsonl"], BUNDLED["sqlite"]))


@pytest.mark.rule("FORK-15")
class TestLockstepFork(_LOCKSTEP.TestCase):  # type: ignore[name-defined,misc]
    """Memory, JSONL and SQLite on one source: identical logical destinations (001 §5)."""

    settings = _FAST
