"""The SQLite round judges an image once per number of acknowledged commits (CRASH-SQL-3): a
crash point that gives files an earlier point with as many acknowledged commits gave is
answered by that judgement, and a failed image is judged again at every point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scopecheck.crashsim import sqlite_sweep
from scopecheck.crashsim.persistence import Volume
from scopecheck.crashsim.points import ProcessCrash, Strict
from scopecheck.crashsim.sqlite_sweep import Origin, SqliteRound, record_workload
from scopecheck.crashsim.workload import make_workload


@pytest.fixture
def sqlite_round(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SqliteRound, list[Any]]]:
    judged: list[Any] = []
    judge = sqlite_sweep.judge_image

    def counting(*args: Any, **kwargs: Any) -> Any:
        judged.append(args[1])
        return judge(*args, **kwargs)

    monkeypatch.setattr(sqlite_sweep, "judge_image", counting)
    workload = make_workload(1, transactions=3)
    box = sqlite_sweep.SqliteSandbox("per-file", None)
    try:
        rec = record_workload(box, workload)
        origin = Origin({"transactions": len(workload)}, 0, {"layout": "per-file"})
        yield SqliteRound(box, rec, workload, origin), judged
    finally:
        box.cleanup()


@pytest.mark.rule("CRASH-SQL-3")
def test_an_image_judged_already_is_answered_by_that_judgement(
    sqlite_round: tuple[SqliteRound, list[Any]],
) -> None:
    rnd, judged = sqlite_round
    end = len(rnd.ops)
    volume = Volume(rnd.base)
    for op in rnd.ops:
        volume.apply(op)
    image = volume.process_image()
    assert rnd.check(end, ProcessCrash(), image) is None
    assert rnd._last is not None and len(judged) == 1
    first = rnd._last[2]
    assert rnd.check(end, "data-kept", image) is None  # the same files, as many commits
    assert len(judged) == 1 and rnd.states == 2
    assert rnd._last == (end, "data-kept", first)  # offered for a crash of its recovery


@pytest.mark.rule("CRASH-SQL-9")
def test_files_a_recovery_crash_left_already_are_answered_by_their_reopen(
    sqlite_round: tuple[SqliteRound, list[Any]],
) -> None:
    rnd, judged = sqlite_round
    end = len(rnd.ops)
    volume = Volume(rnd.base)
    for op in rnd.ops:
        volume.apply(op)
    image = volume.process_image()
    assert rnd.check(end, ProcessCrash(), image) is None and rnd._last is not None
    rnd._recovered[(end, ProcessCrash())] = rnd._recovered[(end - 1, ProcessCrash())] = rnd._last[2]
    for k in (end, end - 1, end):
        assert rnd.check_recovery(k, ProcessCrash(), rnd.ops, 0, Strict(), image) is None
    assert len(judged) == 2 and rnd.recovery_states == 3


@pytest.mark.rule("CRASH-SQL-3")
def test_a_failed_image_is_judged_again(sqlite_round: tuple[SqliteRound, list[Any]]) -> None:
    rnd, judged = sqlite_round
    end = len(rnd.ops)
    lost = Volume(rnd.base).process_image()  # every acknowledged commit lost
    for _ in range(2):
        failure = rnd.check(end, ProcessCrash(), lost)
        assert failure is not None and failure.rule == "CRASH-SQL-3"
    assert len(judged) == 2 and rnd._last is None
