"""How the ``FileSystem`` path spends a budget (crashsim/generic_sweep.py ``explore``, the
exploration ``scopecheck validate`` runs for an ``fs``+``root`` factory): crash points in
coverage order with the states after every acknowledgement first (CRASH-COV-1), what was covered
reported and a phase short of it incomplete (CRASH-COV-2), faults of every kind early, distinct
failures kept with their own reproducers while fault runs still get their share (CRASH-COV-4),
and reproducers replayed by their variant's name (CRASH-COV-5)."""

from __future__ import annotations

import orjson
import pytest

from scopecheck.backends.crash_explorers import GenericCrashExplorer
from scopecheck.crashsim.coverage import crash_points
from scopecheck.crashsim.generic_faults import fault_plan
from scopecheck.crashsim.generic_sweep import explore, replay_record, trace, workload
from scopecheck.examples import broken_file_backend
from scopecheck.examples import good_file_backend as good
from scopecheck.planted.fs_crash import fs_ack_after_long_startup, fs_recovery_truncate_unsynced


@pytest.mark.rule("CRASH-COV-1", "CRASH-COV-2", "CRASH-FS-2", "CRASH-FS-6")
def test_a_state_after_every_acknowledgement_is_checked_however_small_the_budget() -> None:
    explorer = GenericCrashExplorer(good.make_backend, "good")
    states, runs, records = explorer.explore_with_faults(0.0, 0)
    assert records == [] and states > 0 and runs > 0  # the first round's faults still run
    coverage = explorer.coverage
    assert coverage is not None and coverage.complete, coverage
    assert coverage.acked_total == len(workload(0, 6).steps)
    assert coverage.points_checked >= coverage.acked_total
    assert "acknowledged steps" in coverage.describe()


@pytest.mark.rule("CRASH-COV-2")
def test_a_first_pass_cut_short_is_incomplete_never_complete() -> None:
    found = explore(good.make_backend, budget=0.0, overrun=0.0)
    assert not found.coverage.complete
    assert found.coverage.acked_covered < found.coverage.acked_total


@pytest.mark.rule("CRASH-COV-1", "CRASH-FS-6")
def test_coverage_order_reaches_an_acknowledgement_past_a_long_unsynced_startup() -> None:
    """Thousands of start-up writes come before the first acknowledgement: in trace order
    their crash points come first; in coverage order the state after each acknowledgement is
    among the first checked, and the commit acknowledged without fsync is lost there."""
    tr = trace(fs_ack_after_long_startup, workload(0, 6))
    assert len(crash_points(tr.file_ops)) > 3000
    found = explore(fs_ack_after_long_startup, budget=30.0, max_failures=1)
    (failure,) = found.failures
    assert failure.rule == "CRASH-FS-6" and failure.variant != "process"
    assert found.states < 300, found.states


@pytest.mark.rule("CRASH-COV-1", "CRASH-FS-9")
def test_every_kind_of_fault_takes_its_turn_early() -> None:
    """Each kind of call and fault is a queue in coverage order, and the queues take turns:
    a failed fsync is tried as soon as a failed write."""
    tr = trace(good.make_backend, workload(0, 6))
    plans = fault_plan(tr)
    kinds = {(tr.ops[call].kind, fault) for call, fault in plans}
    first = {(tr.ops[call].kind, fault) for call, fault in plans[: len(kinds)]}
    assert first == kinds and ("fsync", "eio") in first
    assert sorted(plans) == sorted(set(plans))  # every fault once


@pytest.mark.rule("CRASH-COV-4", "CRASH-COV-5", "CRASH-FS-6", "CRASH-FS-9")
def test_a_failure_does_not_end_the_exploration_and_each_distinct_one_replays() -> None:
    """The example that never fsyncs fails at many crash states and fault runs: one
    reproducer per rule and kind of crash point or fault is kept, the fault runs had their
    share, and every record -- power-loss variants rebuilt by name included -- replays."""
    factory = broken_file_backend.make_backend
    found = explore(factory, budget=4.0)
    assert found.states > 0 and found.fault_runs > 0
    keys = [failure.key for failure in found.failures]
    assert 2 <= len(keys) <= 8 and len(set(keys)) == len(keys)
    assert {rule for rule, _ in keys} >= {"CRASH-FS-6", "CRASH-FS-9"}
    assert any(not kind.startswith(("process", "fault:")) for _, kind in keys), keys
    explorer = GenericCrashExplorer(factory, "broken")
    _, _, records = explorer.explore_with_faults(4.0, 0)
    assert 2 <= len(records) <= 8
    for record in records:
        still, text = replay_record(orjson.loads(orjson.dumps(record)), factory)
        assert still, text
        assert record["rule"] in text


@pytest.mark.rule("CRASH-FS-5", "CRASH-COV-5")
def test_a_power_loss_during_a_repair_is_explored_and_replays() -> None:
    """A repair renamed into place before its data is fsynced survives every process crash
    of its recovery; only a power loss during that recovery (the loop's recovery crashes,
    for the images whose reopen repaired something) loses the log.  The record rebuilds that
    image from the recovery's own operations and replays; against the example's repair
    (truncate, then fsync) the same record replays as fixed."""
    factory = fs_recovery_truncate_unsynced
    found = explore(factory, budget=30.0, max_failures=1)
    (failure,) = found.failures
    assert failure.rule == "CRASH-FS-5" and failure.run == "recovery", failure
    assert failure.recovery is not None and failure.recovery[1] != "process"
    assert failure.evidence is not None and failure.evidence.recovery_ops
    record = orjson.loads(orjson.dumps(failure.to_json()))
    still, text = replay_record(record, factory)
    assert still and "CRASH-FS-5" in text, text
    still, text = replay_record(record, good.make_backend)
    assert not still and "uninterrupted recovery" in text, text
