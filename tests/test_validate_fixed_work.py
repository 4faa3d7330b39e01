"""``--examples``: the same seed and examples do the same crash exploration too (INSTALL-12).

Crash exploration with an infinite budget makes one workload's fixed work -- its priority
crash points, a fixed number of crashed recoveries, every fault and kill run -- so two runs
check the same states and make the same runs, whatever the machine's load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scopecheck.run.validate import validate

ROOT = Path(__file__).resolve().parents[1]
FILE = f"{ROOT}/examples/good_file_backend.py:make_backend"


@pytest.mark.rule("INSTALL-12")
def test_the_same_seed_and_examples_do_the_same_crash_work(tmp_path: Path) -> None:
    """Two runs of the file example with the same seed and examples: the same crash states and
    runs, coverage, machine steps (exactly the examples asked for) and restarts."""
    runs = [validate(FILE, budget=5, failures_dir=tmp_path, seed=2, examples=3) for _ in "ab"]
    for verdict in runs:
        assert verdict.passed, verdict.failures
    # the work, not the timings (fault_run_ms, first_failure_ms: figures of the run)
    first, second = (
        {k: n for k, n in v.phases["crash exploration"].counts.items() if not k.endswith("_ms")}
        for v in runs
    )
    assert first == second and first["crash_states"] > 0 and first["crash_fault_runs"] > 0
    assert runs[0].crash_coverage == runs[1].crash_coverage
    assert runs[0].machine_steps == runs[1].machine_steps > 0
    assert runs[0].phases["machine"].counts["examples"] == 3
    assert runs[0].phases["restarts"].counts == runs[1].phases["restarts"].counts
