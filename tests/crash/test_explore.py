"""The one exploration loop and the one failure type every source reports through
(CRASH-COV-1..5): a toy source over real persistence-model operations, so what the loop does
-- the order it checks, what it claims covered, which failures it keeps, when it crashes a
recovery, what a reproducer holds -- is seen without any backend."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import pytest

from scopecheck.crashsim.coverage import crash_points
from scopecheck.crashsim.explore import (
    Findings,
    Plan,
    check_passes,
    explore,
    point_images,
)
from scopecheck.crashsim.failure import (
    VERSION,
    BadReproducer,
    CrashFailure,
    Evidence,
    crash_kind,
    relative_to_root,
)
from scopecheck.crashsim.persistence import FileOp, Image, Volume, power_image
from scopecheck.crashsim.points import ProcessCrash, Variant

#: A log file written, synced and acknowledged three times; the acknowledgements fall right
#: after each sync.
OPS = (
    FileOp("open", "log", handle=1, flags=frozenset({"create"})),
    FileOp("open", "", handle=2, flags=frozenset({"directory"})),
    FileOp("sync", "", handle=2),
    FileOp("write", "log", handle=1, data=b"one\n", step=0),
    FileOp("sync", "log", handle=1, step=0),
    FileOp("write", "log", handle=1, data=b"two\n", step=1),
    FileOp("sync", "log", handle=1, step=1),
    FileOp("write", "log", handle=1, data=b"three\n", step=2),
    FileOp("sync", "log", handle=1, step=2),
)
ACKED = (5, 7, 9)
EMPTY = Image({}, frozenset({""}), frozenset())


class ToyRound:
    """Judges an image by the lines of ``log``: each acknowledged step's line must be there
    (a backend that acknowledged before its sync would fail; this one never does unless
    ``lose`` names a variant family to reject)."""

    def __init__(self, seed: int, *, lose: str = "", recover_ops: int = 0, faults: int = 0):
        self.ops: Sequence[FileOp] = OPS
        self.acked_at: Sequence[int | None] = ACKED
        self.base = EMPTY
        self.seed = seed
        self.states = 0
        self.recovery_states = 0
        self.lose = lose
        self.recover_ops = recover_ops
        self.faults = faults
        self.checked: list[tuple[int, Variant]] = []
        self.fault_calls: list[tuple[int, int | None, int]] = []

    def images(
        self, volume: Volume, ops: Sequence[FileOp], k: int
    ) -> Iterable[tuple[Variant, Image]]:
        return point_images(volume, ops, k, self.seed)

    def _failure(
        self, k: int, variant: Variant, run: Any = "crash",
        recovery: tuple[int, Variant] | None = None,
    ) -> CrashFailure:  # fmt: skip
        return CrashFailure(
            source="toy", rule="CRASH-FS-6", problem="lost", run=run,
            kind=crash_kind(variant, recovery), seed=self.seed,
            workload={"name": "toy"}, point=k, variant=variant.name,
            recovery=None if recovery is None else (recovery[0], recovery[1].name),
            evidence=Evidence(tuple(self.ops), self.base, tuple(self.acked_at)),
        )  # fmt: skip

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | None:
        self.states += 1
        self.checked.append((k, variant))
        if self.lose and crash_kind(variant) == self.lose:
            return self._failure(k, variant)
        return None

    def recovers(self, variant: Variant, image: Image) -> bool:
        return self.recover_ops > 0 and variant == ProcessCrash()

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        opened = FileOp("open", "log", handle=7)
        return (opened, *(FileOp("write", "log", handle=7, data=b"r\n"),) * self.recover_ops)

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | None:  # fmt: skip
        self.states += 1
        self.recovery_states += 1
        return self._failure(k, variant, run="recovery", recovery=(j, during))

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        self.fault_calls.append((start, limit, at_least))
        return min(self.faults, limit if limit is not None else self.faults)

    @property
    def fault_plan_size(self) -> int:
        return self.faults


@pytest.mark.rule("CRASH-COV-1", "CRASH-COV-2")
def test_the_loop_checks_after_every_acknowledgement_first_and_claims_only_what_it_checked() -> (
    None
):
    rnd = ToyRound(0)
    coverage = check_passes(rnd, Findings(), until=float("inf"), first=True)
    assert coverage.complete and coverage.acked_covered == coverage.acked_total == 3
    assert coverage.points_checked == coverage.points_total == len(crash_points(OPS))
    assert coverage.states_checked == rnd.states > coverage.points_total
    first_points = set(list(dict.fromkeys(k for k, _ in rnd.checked))[:3])
    assert first_points == {5, 7, 9}  # after each acknowledgement (and the end) first
    nothing = check_passes(ToyRound(0), Findings(), until=0.0, first=False, overrun=0.0)
    assert not nothing.complete and nothing.points_checked == nothing.acked_total == 0


@pytest.mark.rule("CRASH-COV-2")
def test_the_first_pass_of_the_first_round_runs_past_the_deadline() -> None:
    rnd = ToyRound(0)
    coverage = check_passes(rnd, Findings(), until=time.perf_counter(), first=True, overrun=30.0)
    assert coverage.complete and coverage.points_checked < coverage.points_total


@pytest.mark.rule("CRASH-COV-4")
def test_failures_are_kept_one_per_rule_and_kind_and_do_not_end_the_search() -> None:
    rnd = ToyRound(0, lose="process")
    findings = Findings(limit=8)
    coverage = check_passes(rnd, findings, until=float("inf"), first=True)
    assert [f.key for f in findings.failures] == [("CRASH-FS-6", "process")]
    assert coverage.points_checked == coverage.points_total  # the search went on
    full = Findings(limit=1)
    check_passes(ToyRound(0, lose="process"), full, until=float("inf"), first=True)
    assert full.full and len(full.failures) == 1


@pytest.mark.rule("CRASH-FS-5", "CRASH-SQL-9")
def test_recoveries_worth_crashing_are_recorded_and_crashed_after_the_priority_passes() -> None:
    rnd = ToyRound(0, recover_ops=3)
    findings = Findings()
    check_passes(rnd, findings, until=float("inf"), first=True)
    assert rnd.recovery_states > 0
    (failure,) = findings.failures
    assert failure.run == "recovery" and failure.key[1].startswith("recovery:")
    assert failure.recovery is not None and 0 < failure.recovery[0] <= 3


def _toy_source(faults: int) -> tuple[Any, list[ToyRound]]:
    """A source whose every round is a :class:`ToyRound` with ``faults`` fault runs, and the
    rounds it made."""
    rounds: list[ToyRound] = []

    @contextlib.contextmanager
    def round(seed: int, findings: Findings) -> Iterator[ToyRound]:
        rounds.append(ToyRound(seed, faults=faults))
        yield rounds[-1]

    return type("Toy", (), {"round": staticmethod(round)})(), rounds


@pytest.mark.rule("CRASH-COV-4")
def test_fault_runs_get_their_turn_after_the_priority_passes_and_at_the_end() -> None:
    source, rounds = _toy_source(faults=5)
    found = explore(source, budget=0.0, seed=4, plan=Plan(early_faults=3))
    assert [r.seed for r in rounds] == [4]  # the first round runs whatever the budget
    # the early runs, one at a time, owed by the first round however small the budget
    assert rounds[0].fault_calls[:3] == [(0, 1, 1), (1, 1, 1), (2, 1, 1)]
    assert rounds[0].fault_calls[3][0] == 3  # then the rest, from where they stopped
    assert found.fault_runs == 8 and found.coverage.complete
    assert (found.coverage.early_runs_made, found.coverage.early_runs_owed) == (3, 3)


@pytest.mark.rule("CRASH-COV-4")
def test_early_runs_stop_at_the_hard_stop_and_leave_the_phase_incomplete() -> None:
    """Past the budget and its overrun no early run starts: the phase says how many of the
    runs it owed were made, instead of running on past the wall budget."""
    source, rounds = _toy_source(faults=5)
    found = explore(source, budget=0.0, seed=4, plan=Plan(early_faults=3, overrun=-1.0))
    assert rounds[0].fault_calls == [(3, None, 0)]  # no early run: only the rest, none made
    assert not found.coverage.complete
    assert (found.coverage.early_runs_made, found.coverage.early_runs_owed) == (0, 3)
    assert "0 of the first round's 3 early" in " ".join(found.coverage.shortfall())


@pytest.mark.rule("CRASH-COV-5")
def test_a_failure_is_its_own_versioned_reproducer_and_rebuilds_its_image() -> None:
    findings = Findings()
    check_passes(ToyRound(0, lose="torn"), findings, until=float("inf"), first=True)
    (failure,) = findings.failures
    record = orjson.loads(orjson.dumps(failure.to_json()))
    assert record["version"] == VERSION and record["run"] == "crash"
    again = CrashFailure.from_json(record)
    assert again == failure and again.evidence == failure.evidence
    assert again.evidence is not None and again.point is not None
    image = power_image(again.evidence.ops, again.point, again.variant, start=EMPTY)
    volume = Volume(EMPTY)
    for op in OPS[: again.point]:
        volume.apply(op)
    named = {v.name: shown for v, shown in point_images(volume, OPS, again.point, 0)}
    assert named[again.variant] == image
    assert again.crash_point is not None and again.crash_point.op == again.point
    assert power_image(again.evidence.ops, again.point, again.crash_point.variant) == image


@pytest.mark.rule("CRASH-COV-5")
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"version": 2}, "format 2"),
        ({"run": "nap"}, "unknown run"),
        ({"seed": "x"}, "not a crash reproducer"),
    ],
)
def test_an_unreadable_reproducer_says_why(change: dict[str, Any], says: str) -> None:
    failure = CrashFailure(
        source="toy", rule="CRASH-FS-2", problem="p", run="crash", kind="process", seed=1,
        workload={}, point=0, variant="process",
    )  # fmt: skip
    with pytest.raises(BadReproducer, match=says):
        CrashFailure.from_json({**failure.to_json(), **change})


@pytest.mark.rule("INSTALL-18")
def test_a_path_under_the_root_is_named_relative_to_it(tmp_path: Any) -> None:
    """``<root>`` for the root a backend was given, ``<root>/...`` for a file under it, in the
    text the recovery checker gives (a reopen that raised naming a file of the image); a
    sibling whose name merely starts with the root's, and a path outside, keep theirs."""
    from scopecheck.crashsim.recovery import Broken, Expected, judge

    root = str(tmp_path / "root-ab12")
    text = f"{root}/s.db and {root} and {root}x/s.db and /etc/passwd"
    shown = "<root>/s.db and <root> and " + f"{root}x/s.db and /etc/passwd"
    assert relative_to_root(text, root) == shown
    assert relative_to_root(text, None) == text

    def reopen() -> Any:
        raise FileNotFoundError(2, "No such file or directory", f"{root}/sessions/s.jsonl")

    expected = Expected([None], [1], [], (0,))
    found = judge(reopen, expected, session="s", probe=None, root=root)
    assert isinstance(found, Broken) and found.rule == "CRASH-FS-1"
    assert "'<root>/sessions/s.jsonl'" in found.problem and root not in found.problem
