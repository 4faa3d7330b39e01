"""The planted legacy-fork bugs are caught (LEGACY-13, LEGACY-15; ARCH-2).

Each is caught twice: by its probe (what ``scopecheck mutants`` runs) and by the fork machine
in the ``jsonl-legacy`` world (without shrinking — shrinking a legacy world takes minutes; the
first failing program is already short, the machine opens every example with a legacy fork).
The unmutated repository passes the probe, so the probe can tell the difference.
"""

from __future__ import annotations

import pytest

from scopecheck.planted import Mutant, all_mutants, run_fork_mutant
from scopecheck.planted.legacy import probe_legacy_fork

LEGACY_MUTANTS = [m for m in all_mutants() if m.name.startswith("legacy-fork-")]


@pytest.mark.rule("ARCH-2", "LEGACY-13", "LEGACY-15")
def test_catalogue_has_the_legacy_fork_mutants() -> None:
    assert {m.name for m in LEGACY_MUTANTS} == {
        "legacy-fork-upgrades-open-source",
        "legacy-fork-normalises-in-place",
    }


@pytest.mark.rule("LEGACY-13", "LEGACY-15")
def test_probe_passes_the_real_backend() -> None:
    caught, detail = probe_legacy_fork()
    assert not caught, detail


@pytest.mark.rule("ARCH-2", "LEGACY-13", "LEGACY-15")
@pytest.mark.parametrize("mutant", LEGACY_MUTANTS, ids=lambda m: m.name)
def test_legacy_fork_mutant_is_caught_by_its_probe(mutant: Mutant) -> None:
    result = run_fork_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error}"


@pytest.mark.rule("ARCH-2", "LEGACY-13", "LEGACY-15")
@pytest.mark.parametrize("mutant", LEGACY_MUTANTS, ids=lambda m: m.name)
def test_legacy_fork_mutant_is_caught_by_the_fork_machine(mutant: Mutant) -> None:
    machine_run = Mutant(
        mutant.name, mutant.backend, mutant.description, mutant.make, "fork-machine"
    )
    result = run_fork_mutant(machine_run, max_examples=300, shrink=False)
    assert result.caught, f"{mutant.name} escaped the machine: {result.error or 'no failure'}"
    assert "legacy_not_upgraded" in result.error
