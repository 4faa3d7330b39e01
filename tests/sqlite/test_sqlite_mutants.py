"""Every planted SQLite bug is caught: by the stateful machine or by the crash sweep."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.crashsim.sqlite_sweep import crash_sweep
from scopecheck.machines.storage import make_machine
from scopecheck.planted.sqlite import (
    BY_NAME,
    MUTANTS,
    SqliteMutant,
    crash_check,
    crash_result,
    crash_workload,
)
from scopecheck.run.profiles import get_profile, register_profiles

MACHINE = [m for m in MUTANTS if m.caught_by == "machine"]
CRASH = [m for m in MUTANTS if m.caught_by == "crash"]


def mutant_settings() -> Any:
    register_profiles()
    return settings(get_profile("mutants"), phases=[Phase.generate], max_examples=300)


def test_catalogue_has_the_required_planted_bugs() -> None:
    names = {m.name for m in MUTANTS}
    assert {
        "sqlite-point-read-ignores-scope",
        "sqlite-retire-separate-transaction",
        "sqlite-retire-consumes-no-seq",
        "sqlite-tag-dropped",
        "sqlite-synchronous-off",
        "sqlite-repair-without-sync",
    } <= names
    assert all(m.description and "\n" not in m.description for m in MUTANTS)


@pytest.mark.rule("SQLITE-2", "SQLITE-3", "SQLITE-5", "SQLITE-1")
@pytest.mark.parametrize("mutant", MACHINE, ids=lambda m: m.name)
def test_machine_catches_planted_sqlite_bug(mutant: SqliteMutant) -> None:
    machine = make_machine(mutant.backend())
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=mutant_settings())  # type: ignore[no-untyped-call]


@pytest.mark.rule("SQLITE-3", "SQLITE-8", "CRASH-SQL-6")
@pytest.mark.parametrize("mutant", CRASH, ids=lambda m: m.name)
def test_crash_sweep_catches_planted_sqlite_bug(mutant: SqliteMutant) -> None:
    report = crash_check(mutant)
    assert report.failures, report.summary()
    result = crash_result(mutant)  # the catalogue-style report with a reproducer line
    assert result.caught and "crash_check(BY_NAME[" in result.program


def test_crash_sweep_passes_the_real_backend_on_the_mutant_workload() -> None:
    """The workload that catches the crash-only bugs is clean on the real backend."""
    report = crash_check(SqliteMutant("real", "the real backend"), max_failures=50)
    assert report.ok, [str(f) for f in report.failures[:5]]


@pytest.mark.rule("CRASH-SQL-9", "CRASH-FS-5")
def test_a_repair_without_sync_is_caught_only_by_crashing_the_recovery() -> None:
    """The planted open checkpoints and truncates a WAL a crash left without syncing the
    database first: every crash image of the workload recovers right (the repair itself
    finishes), and only a power loss during that repair loses acknowledged commits."""
    mutant = BY_NAME["sqlite-repair-without-sync"]
    factory = mutant.repository_factory()
    assert crash_sweep(crash_workload(), repository_class=factory, recoveries=0).ok
    report = crash_check(mutant, max_failures=50)
    assert report.failures and report.coverage.recovery_states > 0
    assert {f.rule for f in report.failures} == {"CRASH-SQL-9"}
    assert all(f.run == "recovery" and f.recovery is not None for f in report.failures)
    assert all(f.key[1].startswith("recovery:") for f in report.failures)
    assert all(f.evidence is not None and f.evidence.recovery_ops for f in report.failures)
    failure = report.failures[0]
    assert failure.point is not None
    again = crash_sweep(
        crash_workload(),
        repository_class=factory,
        only=failure.point,
        variant=failure.variant,
        recovery=failure.recovery,
    )
    assert [f.recovery for f in again.failures] == [failure.recovery]
