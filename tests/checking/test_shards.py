"""One validation split across CI jobs and merged (FLEET-4, FLEET-5).

The proof that matters is the end-to-end one: ``validate --examples N`` run whole, and the same
run as shards joined by ``scopecheck merge``, made exactly the same conformance cases, crash
points and fault runs -- no unit twice, none left out -- and every figure of the fixed work adds
up to the whole run's.  Then what a merge must refuse or flag: a shard missing (incomplete,
never passed), a shard given twice or reports of different runs (a one-line error), shards
that planned different work (incomplete), and a shard's failure (the merged verdict fails).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import orjson
import pytest

from scopecheck.backends.adapters import load
from scopecheck.crashsim.shards import Shard, Units
from scopecheck.run.merge import merge_verdicts
from scopecheck.run.validate import VERSION, PhaseReport, Verdict

ROOT = Path(__file__).resolve().parents[2]
GOOD = f"{ROOT}/examples/good_file_backend.py:make_backend"
BROKEN = f"{ROOT}/examples/broken_file_backend.py:make_backend"
SCHEMA = json.loads((ROOT / "scopecheck/schemas/verdict.schema.json").read_text())


def scopecheck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def validate_json(tmp_path: Path, spec: str, *extra: str, name: str) -> dict[str, Any]:
    done = scopecheck("validate", spec, "--examples", "1", "--json", *extra, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    (tmp_path / name).write_text(done.stdout)
    data: dict[str, Any] = orjson.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


@pytest.mark.rule("FLEET-4")
def test_shard_parse_and_positions() -> None:
    assert Shard.parse("2/4") == Shard(2, 4)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0", "-1/2", ""):
        with pytest.raises(ValueError, match="K/N"):
            Shard.parse(bad)
    owners = [[s.index for s in (Shard(k, 3) for k in (1, 2, 3)) if s.owns(p)] for p in range(10)]
    assert all(len(found) == 1 for found in owners)  # each position has exactly one owner
    assert [found[0] for found in owners] == [1, 2, 3, 1, 2, 3, 1, 2, 3, 1]


@pytest.mark.rule("FLEET-4")
def test_three_explorer_shards_make_the_whole_fixed_exploration_once() -> None:
    """The crash explorer of a factory taking ``fs`` and ``root``: three shards of the fixed
    exploration check the crash points and make the fault runs of one whole exploration, each
    once, and their states add up to its states."""
    explorer = load(GOOD).backend.crash
    assert explorer is not None
    whole_states, whole_runs, records = explorer.explore_with_faults(math.inf, 0)
    assert records == []
    whole = dict(explorer.units)
    states = runs = 0
    made: dict[str, list[str]] = {kind: [] for kind in whole}
    for k in (1, 2, 3):
        s, r, records = explorer.explore_with_faults(math.inf, 0, shard=Shard(k, 3))
        assert records == [] and explorer.coverage is not None and explorer.coverage.complete
        states, runs = states + s, runs + r
        for kind, units in explorer.units.items():
            assert units.total == whole[kind].total and units.digest == whole[kind].digest
            made[kind] += units.ids
    for kind, ids in made.items():
        assert len(ids) == len(set(ids)), f"{kind} made twice"
        assert sorted(ids) == sorted(whole[kind].ids) and len(ids) == whole[kind].total > 0
    assert (states, runs) == (whole_states, whole_runs)
    with pytest.raises(ValueError, match="fixed"):
        explorer.explore_with_faults(5.0, 0, shard=Shard(1, 2))


@pytest.mark.rule("FLEET-4", "FLEET-5")
def test_two_validate_shards_merge_to_exactly_the_whole_run(tmp_path: Path) -> None:
    whole = validate_json(tmp_path, GOOD, name="whole.json")
    shards = [
        validate_json(tmp_path, GOOD, "--shard", f"{k}/2", name=f"shard{k}.json") for k in (1, 2)
    ]
    assert [s["shard"] for s in shards] == [{"count": 2, "indices": [k]} for k in (1, 2)]
    merged_run = scopecheck("merge", "shard1.json", "shard2.json", "--json", cwd=tmp_path)
    assert merged_run.returncode == 0, merged_run.stdout + merged_run.stderr
    merged = orjson.loads(merged_run.stdout)
    jsonschema.validate(merged, SCHEMA)
    assert merged["outcome"] == "passed" and merged["shard"] == {"count": 2, "indices": [1, 2]}
    assert set(whole["units"]) == set(merged["units"]) == {
        "conformance cases", "crash points", "fault runs",
    }  # fmt: skip
    for kind, units in whole["units"].items():
        parts = [set(s["units"][kind]["ids"]) for s in shards]
        assert not parts[0] & parts[1], f"{kind}: made by both shards"
        assert parts[0] | parts[1] == set(units["ids"]), f"{kind}: not the whole run's"
        assert merged["units"][kind]["ids"] == sorted(
            units["ids"], key=lambda u: (0, int(u), "") if u.isdigit() else (1, 0, u)
        )
        assert merged["units"][kind]["total"] == units["total"] == len(units["ids"]) > 0
    for figure in ("conformance_tests", "crash_states", "crash_fault_runs", "kill_runs"):
        assert merged[figure] == whole[figure], figure
    assert merged["crash_coverage"] == whole["crash_coverage"]
    # The machines are a random search: each shard runs its own seed's examples.
    assert merged["phases"]["machine"]["examples"] == 2 * whole["phases"]["machine"]["examples"]
    human = scopecheck("merge", "shard1.json", "shard2.json", cwd=tmp_path)
    assert human.returncode == 0 and human.stdout.startswith("PASSED")
    assert "shards:            1, 2 of 2 -- " in human.stdout

    # A shard missing: the merged verdict is incomplete, never passed, and says which.
    alone = scopecheck("merge", "shard1.json", "--json", cwd=tmp_path)
    assert alone.returncode == 1
    partial = orjson.loads(alone.stdout)
    assert partial["outcome"] == "incomplete"
    for phase in ("conformance", "crash exploration"):
        assert partial["phases"][phase]["status"] == "incomplete"
        assert "made by no shard (shard 2/2 missing)" in partial["phases"][phase]["detail"]

    # Reports that are not the shards of one run: one line, exit 2, nothing merged.
    (tmp_path / "seed5.json").write_bytes(orjson.dumps({**shards[1], "seed": 5}))
    for args, said in [
        (("shard1.json", "shard1.json"), "shard 1/2 is given twice"),
        (("shard1.json", "seed5.json"), "--seed differs"),
        (("shard1.json", "whole.json"), "a report of a whole run is no shard"),
        (("shard1.json", "nothing.json"), "nothing.json: no such report"),
    ]:
        refused = scopecheck("merge", *args, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


def test_shard_mistakes_on_the_command_line(tmp_path: Path) -> None:
    for args, said in [
        (("--shard", "1/2"), "--shard needs --examples N"),
        (("--shard", "3/2", "--examples", "1"), "--shard '3/2': give K/N"),
    ]:
        refused = scopecheck("validate", GOOD, *args, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1
    (tmp_path / "old.json").write_text('{"version": 2}')
    (tmp_path / "junk.json").write_text("not json")
    for name, said in [
        ("old.json", f"not a version-{VERSION} verdict"),
        ("junk.json", "not a JSON"),
    ]:
        refused = scopecheck("merge", name, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


@pytest.mark.rule("FLEET-5")
def test_a_failure_in_one_shard_fails_the_merged_verdict(tmp_path: Path) -> None:
    shards = [
        validate_json(tmp_path, BROKEN, "--shard", f"{k}/2", name=f"b{k}.json") for k in (1, 2)
    ]
    assert any(not s["passed"] for s in shards)
    merged_run = scopecheck("merge", "b1.json", "b2.json", "--json", cwd=tmp_path)
    assert merged_run.returncode == 1
    merged = orjson.loads(merged_run.stdout)
    assert merged["outcome"] == "failed"
    found = sorted(orjson.dumps(f) for s in shards for f in s["failures"])
    assert sorted(orjson.dumps(f) for f in merged["failures"]) == found and found


def _shard_verdict(index: int, ids: tuple[str, ...], plan: str) -> Verdict:
    units = {"crash points": Units(4, ids, plan)}
    phases = {"crash exploration": PhaseReport("ran", "", {"crash_states": len(ids)})}
    return Verdict("b", phases, shards=(Shard(index, 2),), examples=1, units=units)


@pytest.mark.rule("FLEET-5")
def test_shards_that_planned_differently_or_overlap_are_not_joined() -> None:
    def pair(first: tuple[str, ...], second: tuple[str, ...], plans: str = "aa") -> Verdict:
        return merge_verdicts(
            [_shard_verdict(1, first, plans[0]), _shard_verdict(2, second, plans[1])]
        )

    joined = pair(("0", "2"), ("1", "3"))
    assert joined.outcome == "passed" and joined.units["crash points"].ids == ("0", "1", "2", "3")
    assert joined.phases["crash exploration"].counts == {"crash_states": 4}

    differ = pair(("0", "2"), ("1", "3"), "ab")
    crash = differ.phases["crash exploration"]
    assert differ.outcome == "incomplete" and crash.status == "incomplete"
    assert "the shards planned different crash points" in crash.detail

    twice = pair(("0", "1"), ("1", "3"))
    assert twice.outcome == "incomplete"
    assert "1 crash points were made by two shards" in twice.phases["crash exploration"].detail

    short = pair(("0",), ("1", "3"))
    assert short.outcome == "incomplete"
    assert "1 of 4 crash points made by no shard (a shard stopped short of its share)" in (
        short.phases["crash exploration"].detail
    )


@pytest.mark.rule("FLEET-5")
def test_a_shard_that_skipped_crash_exploration_leaves_its_share_uncovered() -> None:
    """A runner without strace skips crash exploration: the other shard's crash points are
    not the whole plan, and the merged phase says which shard made none."""
    skipped = Verdict(
        "b", {"crash exploration": PhaseReport("skipped", "strace not found")},
        shards=(Shard(2, 2),), examples=1,
    )  # fmt: skip
    merged = merge_verdicts([_shard_verdict(1, ("0", "2"), "a"), skipped])
    crash = merged.phases["crash exploration"]
    assert merged.outcome == "incomplete" and crash.status == "incomplete"
    assert "2 of 4 crash points made by no shard (shard 2/2 made none" in crash.detail
    assert "strace not found" in crash.detail


def test_a_verdict_survives_its_json() -> None:
    """``merge`` reads verdicts back from ``--json``: the round trip keeps every field."""
    verdict = attrs.evolve(
        _shard_verdict(2, ("1", "3"), "a"), required=("crash exploration",), seed=3, budget=9.0
    )
    assert Verdict.from_json(verdict.as_json()).as_json() == verdict.as_json()


@pytest.mark.rule("FLEET-5")
def test_joined_phases_keep_the_soonest_first_failure_and_sum_the_rest() -> None:
    """Shards run side by side: the merged first failure is the soonest of theirs, work and
    the fault runs' time are summed, and the timings stay out of the detail line."""
    from scopecheck.run.merge import join_phase
    from scopecheck.run.validate import PhaseReport

    joined = join_phase([
        PhaseReport("failed", "a", {"crash_states": 5, "fault_run_ms": 10,
                                    "first_failure_ms": 900}, 2.0),
        PhaseReport("failed", "b", {"crash_states": 7, "fault_run_ms": 20,
                                    "first_failure_ms": 300}, 3.0),
    ])  # fmt: skip
    assert joined.counts == {"crash_states": 12, "fault_run_ms": 30, "first_failure_ms": 300}
    assert "ms" not in joined.detail.split(";")[0] and "12 crash states" in joined.detail
