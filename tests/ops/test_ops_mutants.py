"""The planted harness bugs (scopecheck/planted/ops.py) are each caught by the lifecycle machine
in a few steps (ARCH-2 for the ops catalogue)."""

from __future__ import annotations

import pytest

from scopecheck.planted import all_mutants, run_mutant

OPS = {m.name: m for m in all_mutants() if m.name.startswith("ops-")}
RULES = {
    "ops-cancel-without-retirement": ("OP-3", "OP-4"),
    "ops-retire-twice": ("OP-3",),
    "ops-unfenced-late-progress": ("OP-7",),
    "ops-settle-deletes-frames": ("OP-1", "OP-5"),
    "ops-recovery-scans-scope": ("OP-10",),
    "ops-recovery-reads-residue": ("OP-10",),
}


def test_catalogue_has_the_required_ops_entries() -> None:
    assert set(RULES) == set(OPS)


@pytest.mark.rule("ARCH-2", "OP-3", "OP-7", "OP-10")
@pytest.mark.parametrize("name", sorted(RULES))
def test_lifecycle_machine_catches_planted_harness_bug(name: str) -> None:
    """Caught, by the lifecycle's own check (the ≤10-step bound of the shrunk program is
    checked for every catalogue entry, reproducibly, by tests/test_mutants.py)."""
    result = run_mutant(OPS[name])
    assert result.caught, f"{name} escaped: {result.error or 'no failure'}"
    assert "OpsViolation" in result.error or "distinct failures" in result.error, result.error


#: Storage bugs an operation lifecycle exercises: the lifecycle machine catches them too (the
#: storage machine remains the primary check for every storage mutant).
STORAGE_BUGS = (
    "memory-retire-leaves-lists",
    "sqlite-shared-retire-leaves-lists",
    "jsonl-replay-ignores-boundary",
)


@pytest.mark.rule("OP-4")
@pytest.mark.parametrize("name", STORAGE_BUGS)
def test_lifecycle_machine_catches_storage_bugs_a_lifecycle_exercises(name: str) -> None:
    import attrs

    from scopecheck.machines.lifecycle import make_lifecycle_machine

    found = {m.name: m for m in all_mutants()}
    if name not in found:
        pytest.skip(f"{name} is not in this catalogue")
    result = run_mutant(attrs.evolve(found[name], machine=make_lifecycle_machine))
    assert result.caught, f"{name} escaped the lifecycle machine: {result.error or 'no failure'}"
