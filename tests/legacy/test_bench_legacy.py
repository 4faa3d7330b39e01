"""The legacy benchmark runs and reports its figures (it never asserts on time)."""

from __future__ import annotations

import pytest

from scopecheck.bench import BENCHMARKS
from tests.legacy.conftest import DATA, TRANSCRIPTS


@pytest.mark.rule("LEGACY-9", "LEGACY-15")
def test_bench_legacy_reports_import_time_memory_and_crash_points() -> None:
    from scopecheck.bench.legacy import bench_legacy

    assert "legacy" in BENCHMARKS
    result = bench_legacy(runs=1, data=DATA, scale=4)
    assert sorted(result["transcripts"]) == sorted(TRANSCRIPTS)
    for figures in result["transcripts"].values():
        assert figures["import_ms"] > 0 and figures["peak_mib"] > 0
        ops = figures["first_scoped_commit_ops"]
        # the rewrite (temp write, fsync, rename) comes before the sidecar append
        assert ops.index("rename") < ops.index("append")
        assert figures["crash_points_first_scoped_commit"] == len(ops) + 1
        fork = figures["fork"]
        for scope in ("tree", "branch"):
            assert fork[scope]["ms"] > 0 and fork[scope]["peak_mib"] > 0
            # bounded: the fork of the 4x file holds far less than the import of it (LEGACY-15)
            assert fork[scope]["peak_mib_x4"] < fork["import_peak_mib_x4"] / 2
