"""Every planted fork bug is caught (ARCH-2)."""

from __future__ import annotations

import pytest

from scopecheck.mutants import Mutant, all_mutants
from scopecheck.mutants.fork import run_fork_mutant

FORK_MUTANTS = [m for m in all_mutants() if m.caught_by.startswith("fork-")]


@pytest.mark.rule("ARCH-2")
def test_fork_catalogue_has_the_required_entries() -> None:
    assert {
        "fork-value-seqs-renumbered",
        "fork-seq-cutoff",
        "fork-copies-ephemeral",
        "fork-unknown-reserved-copied",
        "fork-repairs-torn-tail",
        "fork-entry-off-ancestry",
    } <= {m.name for m in FORK_MUTANTS}


@pytest.mark.rule(
    "ARCH-2", "FORK-3", "FORK-6", "FORK-8", "FORK-9", "FORK-10", "FORK-14", "FORK-16", "SQLITE-16"
)
@pytest.mark.parametrize("mutant", FORK_MUTANTS, ids=lambda m: m.name)
def test_fork_mutant_is_caught(mutant: Mutant) -> None:
    """The fork machine (or a probe: the torn-tail byte compare, the read spy, the memory
    growth check) fails on the mutant with a check failure, not a crash — within the CLI's
    600-example budget (the seq <= tip cutoff once needed ~2,000; the fork machine's
    ``app_state_then_turn`` rule now exposes it in ~30)."""
    result = run_fork_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error or 'no failure'}"
