"""The JSONL crash machine: crashes inside commits and failed unlinks, against the model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.planted.jsonl_crash import NEW
from tests.crash.crash_machine import CrashMachine

SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.rule("CRASH-2", "CRASH-6", "CRASH-8", "CRASH-10")
def test_crash_machine() -> None:
    CrashMachine.crashes = 0
    run_state_machine_as_test(CrashMachine, settings=SETTINGS)  # type: ignore[no-untyped-call]
    assert CrashMachine.crashes > 10


@pytest.mark.rule("CRASH-8", "CRASH-14")
@pytest.mark.parametrize("name", ["jsonl-ack-before-fsync"])
def test_crash_machine_catches_lost_acknowledged_commits(name: str) -> None:
    broken = type(f"Crash_{name}", (CrashMachine,), {"repository_class": NEW[name][1]})
    # caught is enough (no shrinking); enough examples that a random draw cannot miss it
    found = settings(SETTINGS, phases=[Phase.generate], max_examples=300)
    with pytest.raises((AssertionError, BaseExceptionGroup)):
        run_state_machine_as_test(broken, settings=found)  # type: ignore[no-untyped-call]
