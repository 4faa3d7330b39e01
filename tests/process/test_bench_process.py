"""``scopecheck bench process`` reports figures for any backend (never asserting on them)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from scopecheck.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.rule("PROC-8")
def test_bench_process_reports_steps_starts_and_wall_time_for_any_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A factory in-process here (a served one runs the same code, ten examples a round at
    the speed of its restarts: the bundled set in ``scopecheck bench process``)."""
    spec = f"{ROOT}/examples/good_file_backend.py:make_backend"
    with pytest.raises(SystemExit) as done:
        main(["bench", "process", spec, "--budget", "1", "--runs", "1", "--json"])
    assert done.value.code == 0
    result = orjson.loads(capsys.readouterr().out)
    assert result["benchmark"] == "process" and result["runs"] == 1
    (row,) = result["backends"].values()
    assert row["spec"] == spec and row["steps_per_s"] > 0 and row["failures"] == 0
    assert row["wall_over_budget"] > 0 and row["all_process_starts"] == [0]
