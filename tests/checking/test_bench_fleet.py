"""``scopecheck bench fleet`` reports figures, never assertions: every figure is a number it
measured or an explicit skip with the reason (scopecheck/bench/fleet.py).

The whole benchmark at its smallest size (one run of each configuration, 12 s a run) takes about
a minute, so it is ``long``; the default run keeps the parts that take no HypoFuzz run: the
counting of examples, the medians and ratios, and the skip without a ``redis-server``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scopecheck.bench import fleet

pytestmark = [pytest.mark.hypofuzz, pytest.mark.slow]


def _is_figure(value: Any) -> bool:
    """A measured number, or ``{"skipped": why}`` / ``{"not_found": why}`` with a reason."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value >= 0
    return (
        isinstance(value, dict)
        and len(value) == 1
        and next(iter(value)) in ("skipped", "not_found")
        and isinstance(next(iter(value.values())), str)
        and bool(next(iter(value.values())).strip())
    )


def _check_shape(result: dict[str, Any], runs: int) -> None:
    assert result["benchmark"] == "fleet" and result["runs"] == runs
    labels = {f"{w} worker{'s' * (w != 1)}, {d}" for d in fleet.DATABASES for w in fleet.WORKERS}
    assert set(result["configurations"]) == labels
    for label, row in result["configurations"].items():
        for figure in fleet.FIGURES:
            assert _is_figure(row[figure]), (label, figure, row[figure])
        if "skipped" in row:
            assert row["skipped"].strip() and "all_runs" not in row
            continue
        assert len(row["all_runs"]) == runs
        for each in row["all_runs"]:
            find, rate = each["find"], each["rate"]
            assert find["failure_s"] is None or 0 < find["failure_s"] <= find["stopped_s"]
            assert rate["failure_s"] is None and rate["distinct"] <= rate["executions"]
            assert rate["error"] is not None or rate["distinct_per_s"] is not None
    for group in ("two_workers_over_one", "redis_over_directory"):
        assert set(result[group]) == (
            set(fleet.DATABASES) if group == "two_workers_over_one" else {"1 worker", "2 workers"}
        )
        for pair in result[group].values():
            for figure in ("distinct_examples_per_s", "time_to_first_failure_s"):
                assert _is_figure(pair[figure]), (group, pair)


@pytest.mark.long
def test_the_benchmark_at_its_smallest_size_reports_figures_or_reasons() -> None:
    result = fleet.bench_fleet(1, 12.0)
    _check_shape(result, 1)
    rows = result["configurations"]
    if os.environ.get("SCOPECHECK_REQUIRE_REDIS") == "1":
        assert "skipped" not in rows["1 worker, redis"], rows["1 worker, redis"]
    for row in rows.values():
        if "skipped" not in row:
            find = row["all_runs"][0]["find"]
            assert find["error"] is not None or find["executions"] > 0


def test_without_redis_server_the_redis_configurations_are_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server; HypoFuzz is found beside python
    result = fleet.bench_fleet(1, 1.0, databases=("redis",))
    assert set(result["configurations"]) == {"1 worker, redis", "2 workers, redis"}
    for row in result["configurations"].values():
        assert "redis-server" in row["skipped"]
        assert all(row[f] == {"skipped": row["skipped"]} for f in fleet.FIGURES)
    pair = result["two_workers_over_one"]["redis"]
    assert all("redis-server" in pair[f]["skipped"] for f in pair)


def test_the_recorder_counts_every_test_case_hypothesis_executes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One record a test case, the choice sequence's digest telling repeats apart."""
    import time

    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st
    from hypothesis.internal import observability

    monkeypatch.setattr(observability, "OBSERVABILITY_CHOICES", True)  # HypoFuzz turns it on
    calls: list[int] = []

    @settings(max_examples=30, database=None, phases=[Phase.generate])
    @given(st.integers(0, 3))
    def small(x: int) -> None:
        calls.append(x)

    recorder = fleet.ExampleRecorder(tmp_path)
    start = time.monotonic_ns()
    observability.add_observability_callback(recorder, all_threads=True)
    try:
        small()
    finally:
        observability.remove_observability_callback(recorder)
    records = fleet.read_records(tmp_path, start, time.monotonic_ns())
    assert len(records) == len(calls) > 0
    assert len({digest for _, digest in records}) == len(set(calls)) <= 4
    # an example without a choice sequence, and a line cut short by the stop
    (tmp_path / "1.examples").write_text(f"{start} - passed\n{start} ab")
    assert len(fleet.read_records(tmp_path, start, time.monotonic_ns())) == len(calls)


def test_medians_count_a_run_without_a_failure_as_later_than_any() -> None:
    assert fleet.censored_median([3.0, None, 5.0], 30) == 5.0
    assert fleet.censored_median([3.0, 4.0], 30) == 3.5
    missed = fleet.censored_median([3.0, None], 30)
    assert missed == {"not_found": "the bug was not found within 30 s in 1 of 2 runs"}
    assert fleet.censored_median([None], 8) == {
        "not_found": "the bug was not found within 8 s in 1 of 1 run"
    }
