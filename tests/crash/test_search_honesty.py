"""What the exploration loop and the fault checker say about what they could not do: a search
that stops at a cap says which and what it left (CRASH-COV-6), an image that cannot be built or
judged is counted, never a failure and never a traceback (CRASH-SYS-17), a failure's profiles
are its own crash point's (CRASH-SYS-15), and an uncoded error is one failure per place
(CRASH-FS-12).  A toy source over real persistence-model operations, and the fault checker's
functions on hand-made images: no backend."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from scopecheck.crashsim.explore import Findings, NotJudged, Plan, check_passes, explore
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.fault_check import (
    FaultImage,
    FaultRules,
    blind_verdict,
    error_place,
    fault_images,
    judge_blind,
)
from scopecheck.crashsim.generic_sweep import explore as explore_fs
from scopecheck.crashsim.persistence import PROFILE_NAMES, FileOp, Image, PathError
from scopecheck.crashsim.points import Variant
from scopecheck.planted.fs_crash import CreateWithoutDirectorySync, SyncingEveryOther
from tests.crash.test_explore import ACKED, OPS, ToyRound, _toy_source
from tests.crash.test_generic_faults import UncodedStartupError, _factory


def _failure(rule: str, kind: str, point: int = 3, profiles: tuple[str, ...] = ()) -> CrashFailure:
    return CrashFailure(
        source="toy", rule=rule, problem="p", run="crash", kind=kind, seed=0, workload={},
        point=point, variant=kind, profiles=profiles,
    )  # fmt: skip


class RuleByPoint(ToyRound):
    """Every image of a crash point before the last fails: CRASH-FS-6 by image family, and at
    the end of the trace CRASH-FS-2 -- a rule the search meets only after its cap of kinds."""

    def check(self, k: int, variant: Variant, image: Image) -> Any:
        self.states += 1
        if k == len(self.ops):
            return _failure("CRASH-FS-2", variant.family, k)
        return _failure("CRASH-FS-6", variant.family, k)


class Unjudgeable(ToyRound):
    """The images after operation 6 cannot be judged (a file the trace cannot see)."""

    def check(self, k: int, variant: Variant, image: Image) -> Any:
        self.states += 1
        return NotJudged("<root>/log is written through a shared mapping") if k > 6 else None


@pytest.mark.rule("CRASH-COV-6")
class TestCaps:
    def test_past_the_cap_only_rules_not_yet_found_are_kept(self) -> None:
        """The cap of distinct failures ends the kinds of a rule found, not the search for
        other rules."""
        findings = Findings(limit=1, keep_looking=True)
        assert findings.add(_failure("CRASH-FS-6", "strict"))
        assert findings.full and not findings.done
        assert not findings.add(_failure("CRASH-FS-6", "data-kept"))
        assert findings.add(_failure("CRASH-FS-2", "process"))
        assert [f.rule for f in findings.failures] == ["CRASH-FS-6", "CRASH-FS-2"]
        capped = Findings(limit=1)  # a sweep that wants its first failure stops there
        capped.add(_failure("CRASH-FS-6", "strict"))
        assert capped.done

    def test_the_loop_finds_a_rule_past_the_cap_and_says_which_cap(self) -> None:
        """A fixed exploration whose cap of two kinds is reached at the first crash point
        still reaches the rule of the last one, and its limits say the cap, and that the fixed
        work left the spread crash point unchecked."""
        source, _ = _toy_source(faults=0)
        rounds: list[ToyRound] = []

        def make(seed: int, findings: Findings) -> Any:
            import contextlib

            @contextlib.contextmanager
            def one() -> Any:
                rounds.append(RuleByPoint(seed))
                yield rounds[-1]

            return one()

        source = type("Capped", (), {"round": staticmethod(make)})()
        found = explore(source, budget=math.inf, max_failures=2, plan=Plan(early_faults=0))
        rules = [f.rule for f in found.failures]
        assert rules.count("CRASH-FS-6") == 2 and "CRASH-FS-2" in rules, rules
        limits = " ".join(found.findings.limits)
        assert "the cap of 2 distinct failures was reached" in limits
        assert "rules not yet found (1 found)" in limits
        assert "1 of 9 crash points were not checked" in limits
        assert "more rules may fail" in limits

    def test_a_search_cut_by_its_time_budget_says_what_it_left(self) -> None:
        """A budget too short for the round's fault runs says how many it left."""
        source, _ = _toy_source(faults=0)
        found = explore(source, budget=0.0, seed=4, plan=Plan(early_faults=0))
        assert found.coverage.points_checked < found.coverage.points_total
        (said,) = [t for t in found.findings.limits if t.startswith("search:")]
        assert "time budget ran out" in said and "crash points" in said, said


@pytest.mark.rule("CRASH-SYS-17")
class TestNotJudgeable:
    def test_images_that_cannot_be_judged_are_counted_never_failures(self) -> None:
        """A source's :class:`NotJudged` images leave their crash points counted as not
        judgeable, their acknowledged steps not covered, and one limit saying why."""
        findings = Findings()
        coverage = check_passes(Unjudgeable(0), findings, until=math.inf, first=True)
        assert findings.failures == []
        assert coverage.points_unjudged == 3  # 7, 8, 9
        assert coverage.acked_covered == 1 and not coverage.complete  # 5 only
        assert "not judgeable" in coverage.describe()
        assert findings.unjudged_texts() == [
            "not judgeable: 3 crash points: <root>/log is written through a shared mapping "
            "(CRASH-SYS-17)"
        ]

    def test_an_operation_the_model_cannot_apply_leaves_the_images_after_it_unbuilt(
        self,
    ) -> None:
        """An open of a file the volume does not hold (the trace and the model disagree):
        the crash points before it are judged, the ones after it are not judgeable with the
        call named -- no traceback, no failure."""
        ops = (*OPS[:6], FileOp("open", "gone", handle=9), *OPS[6:])
        rnd = ToyRound(0)
        rnd.ops, rnd.acked_at = ops, (5, 8, 10)
        findings = Findings()
        coverage = check_passes(rnd, findings, until=math.inf, first=True)
        assert findings.failures == []
        (why,) = findings.unjudged
        assert "operation 6 of the trace (open gone (existing): open of a missing gone)" in why
        assert coverage.points_unjudged == len([k for k in (7, 8, 9, 10)])
        assert {k for k, _ in rnd.checked} <= set(range(7))

    def test_fault_images_past_an_unappliable_operation_leave_only_the_disk(self) -> None:
        disk = Image({"a": b"x"})
        ops = [FileOp("open", "missing", handle=1), FileOp("write", "missing", handle=1)]
        said: list[str] = []
        images = fault_images(disk, ops, unbuildable=said.append)
        assert [i.label for i in images] == ["a process crash"]
        assert "open of a missing missing" in said[0]
        with pytest.raises(PathError):
            fault_images(disk, ops)

    def test_a_failure_stands_only_when_the_mapped_file_does_not_matter(self) -> None:
        """A lock file the store rebuilds: the failure is the same whatever it holds, so it
        stands.  A data file: removing it, inverting it or giving it real contents changes the
        outcome, so the image is not judged; with the real contents at hand it is judged on
        them."""
        image = Image({"log": b"one\n", "lock": b"\0" * 8, "data": b"\0" * 8})

        def judge(built: Image) -> str | None:
            """The Session lost a step unless ``data`` holds it."""
            return None if built.files.get("data") == b"two\n" else "lost step 2"

        def same(a: str, b: str) -> bool:
            return a == b

        lock = {"lock": "written through a shared mapping"}
        assert blind_verdict(judge, image, lock, None, same, later={"lock": b"L"}) == "lost step 2"
        data = {"data": "written through a shared mapping"}
        verdict = blind_verdict(judge, image, data, None, same, later={"data": b"two\n"})
        assert isinstance(verdict, NotJudged) and "<root>/data is written" in verdict.why
        real = Image({**image.files, "data": b"two\n"})
        assert blind_verdict(judge, image, data, real, same) is None

    def test_a_fault_run_takes_a_mapped_file_from_the_disk_it_left(self) -> None:
        """A power-loss image of a fault run holding a mapped file is judged with that file
        as the disk the run left holds it: no failure comes of contents the trace missed."""
        disk = Image({"data": b"two\n"})
        built = FaultImage("power loss (strict)", Image({"data": b"\0\0\0\0"}), True, ("posix",))
        images = [FaultImage("the disk", disk, False), built]

        def reopen(image: Image) -> Any:
            """No Session (as allowed) from the data, a reopen error without it."""
            return None if image.files["data"] == b"two\n" else "reopen raised: no data"

        rules = FaultRules.one("CRASH-FS-9")
        blind = {"data": "written through a shared mapping"}
        assert judge_blind(reopen, images, [None], rules, "a run", blind=blind) is None
        found = judge_blind(reopen, images, [None], rules, "a run")
        assert found is not None and not isinstance(found, NotJudged)


@pytest.mark.rule("CRASH-SYS-15")
class TestProfilesOfTheirOwnPoint:
    def test_a_failure_keeps_the_profiles_of_its_own_crash_point(self) -> None:
        """A kept posix-only failure is not widened by a failure of its rule and kind at
        another crash point under every profile: that one is kept beside it, so a verdict
        under another profile still sees its rule; a third, adding no profile, is not."""
        findings = Findings()
        posix = _failure("CRASH-FS-6", "strict", 3, ("posix",))
        every = _failure("CRASH-FS-6", "strict", 7, ("posix", "ext4-ordered", "btrfs"))
        assert findings.add(posix) and findings.add(every)
        assert [f.profiles for f in findings.failures] == [posix.profiles, every.profiles]
        assert not findings.add(_failure("CRASH-FS-6", "strict", 9, ("posix", "btrfs")))
        assert not findings.merge(attrs.evolve(every, point=3, seed=1))  # another round's 3

    def test_a_posix_only_loss_is_not_said_to_happen_everywhere(self) -> None:
        """A backend with a posix-only loss and a loss of the same rule and kind under every
        profile: each failure names its own crash point's profiles, so the posix-only one says
        posix only, and the other every profile."""
        found = explore_fs(_posix_only_and_every_profile, budget=3.0, seed=0)
        lost = [f for f in found.failures if f.rule == "CRASH-FS-6" and f.run == "crash"]
        assert ("posix",) in {f.profiles for f in lost}, [(str(f), f.profiles) for f in lost]
        assert PROFILE_NAMES in {f.profiles for f in lost}, [(str(f), f.profiles) for f in lost]


def _posix_only_and_every_profile(clock: Any, *, fs: Any, root: str) -> Any:
    """Two bugs of one rule and kind: the create never fsyncs the directory (its loss happens
    under posix only: ext4's journal and btrfs's log tree make the name durable with the log's
    fsync), and the log is fsynced on every second commit only (a loss under every profile)."""
    return CreateWithoutDirectorySync(clock, SyncingEveryOther(fs), root)


@pytest.mark.rule("CRASH-FS-12")
class TestUncodedPlaces:
    @staticmethod
    def _raised(path: str, code: int) -> BaseException:
        try:
            raise OSError(code, "Input/output error", path)
        except OSError as exc:
            return exc

    def test_one_place_whatever_the_fault(self) -> None:
        """The same raise, with another path and errno, is the same place; another function
        is another place; a process's text is normalised the same way."""
        first, second = self._raised("/tmp/a/1.log", 5), self._raised("/tmp/b/22.log", 28)
        assert error_place(first) == error_place(second)
        assert error_place(first).startswith("OSError at test_search_honesty.py:_raised")

        def elsewhere() -> BaseException:
            try:
                raise OSError(5, "x")
            except OSError as exc:
                return exc

        assert error_place(elsewhere()) != error_place(first)
        assert error_place("OSError: [Errno 5] failed on /tmp/x/7.db") == error_place(
            "OSError: [Errno 28] failed on /var/y/z.db"
        )

    def test_a_start_that_raises_its_own_exception_on_every_fault_is_one_failure(self) -> None:
        """A repository that wraps any start-up failure in a ``RuntimeError`` escapes that way
        on every fault its factory call meets (EACCES, ENOSPC, EIO, on every call): one
        failure, where it comes from, not one per fault kind."""
        found = explore_fs(_factory(UncodedStartupError), budget=math.inf, seed=0)
        uncoded = [f for f in found.failures if f.kind.startswith("uncoded:")]
        assert [f.kind for f in uncoded] == [
            "uncoded:RuntimeError at test_generic_faults.py:__init__"
        ], [str(f) for f in found.failures]
        assert found.fault_runs > 5


def _ops(ops: Sequence[FileOp]) -> list[str]:
    return [op.describe() for op in ops]


def test_the_toy_trace_is_what_the_tests_assume() -> None:
    assert ACKED == (5, 7, 9) and len(_ops(OPS)) == 9
