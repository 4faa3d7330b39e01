"""The lockstep fork machine: Memory, JSONL and SQLite forked from one source (FORK-15).

The fork machine against each bundled backend is the conformance suite's
(``scopecheck/conformance/test_fork_machine.py``, which this project's test run collects).
The budget is small; ``scopecheck fuzz`` style runs go deeper.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.fork import make_lockstep_machine

_FAST = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

_LOCKSTEP = make_lockstep_machine((BUNDLED["memory"], BUNDLED["jsonl"], BUNDLED["sqlite"]))


@pytest.mark.rule("FORK-15")
class TestLockstepFork(_LOCKSTEP.TestCase):  # type: ignore[name-defined,misc]
    """Memory, JSONL and SQLite on one source: identical logical destinations (001 §5)."""

    settings = _FAST
