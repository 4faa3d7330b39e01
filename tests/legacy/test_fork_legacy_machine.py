"""The fork machine on Sessions that start as real legacy transcripts (LEGACY-13, 001 §5).

``s1``/``s2`` start as prefixes of the shared transcripts (the ``jsonl-legacy`` world; ``s1``
with a reconstructed ``main`` lane, ``s2`` data-only); the model starts from its own importer.
Until a Session's first non-empty commit every fork of it while open must reject with
``legacy_not_upgraded`` on both sides; the ``fork_closed`` rule forks it closed (the bounded
disk normaliser) and compares the destination with ``scopecheck.models.fork_model.expected_fork``
over the model's fresh reimport; after the first commit forks are ordinary format-4 forks.  Every
example starts with one fork of a not-yet-upgraded source (``LegacyForkMachine``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from scopecheck.backends.registry import EXTRA
from scopecheck.machines.fork import make_fork_machine

LegacyForkMachine: Any = make_fork_machine(EXTRA["jsonl-legacy"])


LegacyForkMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
    derandomize=True,
)


@pytest.mark.rule("LEGACY-13", "LEGACY-11", "FORK-2", "FORK-3", "FORK-6", "FORK-14")
class TestJsonlLegacyForkMachine(LegacyForkMachine.TestCase):  # type: ignore[name-defined,misc]
    """Model vs. JSONL forks of legacy Sessions, open and closed, before and after upgrade."""

    def test_counts(self) -> None:
        """The machine really forks legacy sources (a machine that never forks proves nothing)."""
        LegacyForkMachine.forks_run = LegacyForkMachine.forks_ok = 0
        LegacyForkMachine.outcomes = {}
        self.runTest()
        seen = LegacyForkMachine.outcomes
        print(f"legacy fork machine: {LegacyForkMachine.forks_run} forks, outcomes {seen}")
        assert seen.get("ok", 0) > 0  # closed-legacy and upgraded forks succeeded
        assert seen.get("legacy_not_upgraded", 0) > 0  # open legacy sources rejected
        assert seen.get("closed-legacy:ok", 0) > 0  # closed legacy files forked (s1: lane)
        assert seen.get("closed-legacy:data_only_branch", 0) > 0  # s2: data-only main
