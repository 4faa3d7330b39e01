"""The seed workload (002 §1) and ``scopecheck bench size`` (002 §9), at a small size.

The full-size figures come from ``scopecheck bench size``; here the same code runs a small
parameterisation on every backend the size bench knows that is present (Memory always).
"""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from scopecheck.bench import size
from scopecheck.models.lifecycle import EPHEMERAL_NAMESPACES
from scopecheck.workloads.seed_workload import SEED, SMALL, WorkloadParams, seed_workload

BACKENDS = size.available_backends()


@pytest.mark.rule("OP-13")
def test_seed_workload_has_the_seed_shape() -> None:
    """20 operations × (400 frames + 2 tools × 60 checkpoints), one retirement per operation."""
    steps = Counter(tx.step for tx in seed_workload(SEED))
    assert steps["start"] == 20 and steps["terminal:completed"] == 20
    assert steps["frame"] == 20 * 400
    assert steps["checkpoint"] == 20 * 2 * 60
    retirements = sum(
        1 for tx in seed_workload(SEED) for w in tx.writes if type(w).__name__ == "RetireScope"
    )
    assert retirements == 20


@pytest.mark.rule("OP-13")
def test_checkpoints_are_whole_snapshots_of_a_bounded_window() -> None:
    params = WorkloadParams(ops=1, frames=1, checkpoints=8, window_bytes=5000, growth_bytes=1000)
    sizes = [
        len(tx.writes[0].value["text"]) for tx in seed_workload(params) if tx.step == "checkpoint"
    ]
    assert sizes[:2] == [1000, 1000] and max(sizes) == 5000 and sizes[-1] == 5000


@pytest.mark.rule("OP-1", "OP-13")
@pytest.mark.parametrize("scoped", [True, False])
def test_workload_transactions_are_single_scope(scoped: bool) -> None:
    for tx in seed_workload(SMALL, scoped=scoped):
        ids = tx.scope_ids()
        assert len(ids) == 1, tx
        if not scoped:
            assert ids == {None}


@pytest.mark.rule("OP-13")
def test_corpus_payloads_from_real_sessions() -> None:
    from scopecheck.data import pi_session

    corpus = str(pi_session("large-session"))
    txs = list(seed_workload(SMALL.scaled(corpus=corpus), scoped=True))
    deltas = "".join(tx.writes[0].element["delta"] for tx in txs if tx.step == "frame")
    assert deltas and "quick brown fox" not in deltas


@pytest.mark.rule("OP-4", "OP-13")
@pytest.mark.parametrize("backend", BACKENDS)
def test_size_scoped_main_holds_no_progress_and_sidecars_end_empty(backend: str) -> None:
    result = size.compare(backend, SMALL)
    assert result["ratio"] is not None
    if backend == "sqlite":
        # No sidecars: rows are deleted in place, so the file barely differs (a figure only).
        assert result["scoped_sidecar_peak_bytes"] is None
        assert result["scoped_main_bytes"] > 0 and result["unscoped_main_bytes"] > 0
        assert 0 < result["scoped_live_bytes"] <= result["scoped_main_bytes"]
        assert 0 < result["unscoped_live_bytes"] <= result["unscoped_main_bytes"]
        return
    assert result["scoped_sidecar_final_bytes"] == 0
    assert result["scoped_sidecar_peak_bytes"] > result["scoped_main_bytes"]
    assert result["ratio"] > 5
    if backend == "jsonl":
        estimate = result["format4_estimate"]
        for key in ("scoped_main_bytes", "unscoped_main_bytes"):
            assert abs(result[key] - estimate[key]) <= 0.05 * result[key], (key, result)


@pytest.mark.rule("OP-13")
def test_format4_meter_puts_progress_only_in_sidecars() -> None:
    meter = size.Format4Meter()
    from scopecheck.models.records import Committed

    seq = 1
    for tx in seed_workload(SMALL, scoped=True):
        committed = tuple(Committed(seq + i, 0, w) for i, w in enumerate(tx.writes))
        seq += len(tx.writes)
        before = meter.main
        meter.observe(committed)
        if tx.scope_ids() != {None}:
            assert meter.main == before
    assert meter.sidecar_bytes == 0 and meter.peak_sidecar > meter.main


@pytest.mark.rule("OP-13")
def test_bench_size_json_shape(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scopecheck.cli import main

    monkeypatch.setattr(size, "SEED", SMALL)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "size", "--json"])
    assert exit_info.value.code == 0
    data = orjson.loads(capsys.readouterr().out)
    keys = {"scoped_main_bytes", "scoped_sidecar_peak_bytes", "unscoped_main_bytes", "ratio"}
    for name in ("jsonl", "sqlite"):
        assert data[name] is None or keys <= set(data[name])
    assert keys <= set(data["memory"])
    assert data["seed_unscoped_mb"] == 93.89


def test_unscoped_workload_cleans_up_with_explicit_deletes() -> None:
    """The baseline really is the pre-Step-1 shape: everything in the session scope and every
    pending address deleted explicitly by the end."""
    from scopecheck.models.reference import ReferenceRepository

    session = ReferenceRepository().create("s")
    for tx in seed_workload(SMALL, scoped=False):
        session.commit(list(tx.writes), 1)
    snapshot = session.snapshot()
    assert not [k for k, _ in snapshot.values if k[1] in EPHEMERAL_NAMESPACES]
    assert not [k for k, _ in snapshot.lists if k[1] in EPHEMERAL_NAMESPACES]
    assert all(k[0] is None for k, _ in snapshot.values)


@pytest.mark.rule("OP-13")
@pytest.mark.skipif("jsonl" not in BACKENDS, reason="JSONL backend not present")
def test_main_log_breakdown_accounts_for_every_byte() -> None:
    """The per-kind arithmetic behind the ratio adds up to the file, names no progress record
    in the scoped log, and counts one retirement and one assistant message per operation."""
    result = size.compare("jsonl", SMALL)
    scoped, unscoped = result["scoped_main_breakdown"], result["unscoped_main_breakdown"]
    for breakdown, total in ((scoped, "scoped_main_bytes"), (unscoped, "unscoped_main_bytes")):
        assert breakdown["total_bytes"] == result[total]
        summed = sum(breakdown["bytes_per_op_by_kind"].values()) * SMALL.ops
        assert abs(summed - result[total]) <= len(breakdown["bytes_per_op_by_kind"]) * SMALL.ops
        assert all(v >= 0 for v in breakdown["bytes_per_op_by_kind"].values())
    kinds = scoped["records_per_op_by_kind"]
    assert kinds["scope retire"] == 1 and kinds["entry message (assistant)"] == 1
    assert not [k for k in kinds if any(ns in k for ns in EPHEMERAL_NAMESPACES)]
    assert [k for k in unscoped["records_per_op_by_kind"] if "pi.pending.tool_output" in k]
    assert result["budget_bytes_per_op_for_1000x"] == round(
        result["unscoped_main_bytes"] / 1000 / SMALL.ops
    )


def test_breakdown_of_a_hand_written_log() -> None:
    header = b'{"v":4,"kind":"header","id":"s"}\n'
    one = b'{"kind":"scope","op":"retire","seq":1,"scopeId":"a"}\n'
    two = (
        b'[{"kind":"value","op":"set","seq":2,"namespace":"n","key":"k","value":1},'
        b'{"kind":"value","op":"delete","seq":3,"namespace":"n","key":"k"}]\n'
    )
    got = size.main_log_breakdown(header + one + two, ops=1)
    kinds = got["bytes_per_op_by_kind"]
    assert kinds["header"] == len(header) and kinds["scope retire"] == len(one) - 1
    assert kinds["framing"] == 1 + 3 + 1  # newline of `one`; [ , ] and newline of `two`
    assert got["total_bytes"] == len(header + one + two)
