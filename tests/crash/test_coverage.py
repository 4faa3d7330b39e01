"""The order crash points are checked in, and what a crash phase may claim it covered
(CRASH-COV-1, CRASH-COV-2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.crashsim.coverage import (
    CrashCoverage,
    acknowledgement_points,
    crash_points,
    ordered_passes,
)
from scopecheck.crashsim.persistence import FileOp

KINDS = ("write", "write", "write", "sync", "rename", "unlink", "close", "open")


def _ops(kinds: list[str]) -> list[FileOp]:
    return [FileOp(kind, f"f{i % 3}", target="t" if kind == "rename" else "", data=b"x")  # type: ignore[arg-type]
            for i, kind in enumerate(kinds)]  # fmt: skip


@pytest.mark.rule("CRASH-COV-1")
@given(
    st.lists(st.sampled_from(KINDS), max_size=300),
    st.lists(st.one_of(st.none(), st.integers(0, 300)), max_size=12),
)
def test_the_passes_hold_every_crash_point_once_acknowledgements_first(
    kinds: list[str], acks: list[int | None]
) -> None:
    ops = _ops(kinds)
    acked = sorted(a for a in acks if a is not None and a <= len(ops))
    passes = ordered_passes(ops, acked)
    flat = [k for p in passes for k in p]
    assert sorted(flat) == crash_points(ops) and len(set(flat)) == len(flat)
    assert all(p == sorted(p) for p in passes)
    points = crash_points(ops)
    assert set(acknowledgement_points(points, acked)) | {points[-1]} == set(passes[0])
    early = {k for p in passes[:3] for k in p}
    for k, op in enumerate(ops):
        if op.kind in ("sync", "rename", "unlink"):
            assert k in early  # the point before it


@pytest.mark.rule("CRASH-COV-1")
def test_a_long_start_up_does_not_hold_back_the_acknowledged_steps() -> None:
    """Ten thousand unsynced writes before the first acknowledgement: the first pass is the
    states after the acknowledgements, and the first spread pass reaches across the trace."""
    ops = _ops(["write"] * 10_000 + ["write", "sync"] * 5)
    acked = [10_002, 10_004, 10_006, 10_008, 10_010]
    passes = ordered_passes(ops, acked)
    assert passes[0] == [10_002, 10_004, 10_006, 10_008, 10_010]
    spread = next(p for p in passes if min(p) < 10_000)  # the first to reach the start-up
    assert len(spread) == 8 and max(spread) - min(spread) > 8_000


@pytest.mark.rule("CRASH-COV-2")
def test_coverage_is_complete_only_when_every_acknowledged_step_is_covered() -> None:
    partial = CrashCoverage(points_checked=3, points_total=10, states_checked=9, acked_covered=2,
                            acked_total=3)  # fmt: skip
    assert not partial.complete
    assert "covered 2 of 3 acknowledged steps" in partial.describe()
    whole = partial + CrashCoverage(acked_covered=1)
    assert whole.complete and whole.to_json()["complete"] is True
    assert not CrashCoverage().complete  # nothing acknowledged was checked: no claim
