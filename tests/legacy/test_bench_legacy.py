"""The legacy benchmark runs and reports its figures (it never asserts on time)."""

from __future__ import annotations

import pytest

from scopecheck.bench import BENCHMARKS
from tests.legacy.conftest import DATA, TRANSCRIPTS


@pytest.mark.rule("LEGACY-9")
def test_bench_legacy_reports_import_time_memory_and_crash_points() -> None:
    from scopecheck.bench.legacy import bench_legacy

    assert "legacy" in BENCHMARKS
    result = bench_legacy(runs=1, data=DATA)
    assert sorted(result["transcripts"]) == sorted(TRANSCRIPTS)
    for figures in result["transcripts"].values():
        assert figures["import_ms"] > 0 and figures["peak_mib"] > 0
        ops = figures["first_scoped_commit_ops"]
        # the rewrite (temp write, fsync, rename) comes before the sidecar append
        assert ops.index("rename") < ops.index("append")
        assert figures["crash_points_first_scoped_commit"] == len(ops) + 1
