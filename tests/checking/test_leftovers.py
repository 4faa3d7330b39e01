"""Leftovers are judged by what a store does, not by a file's name (HYGIENE-4); every failure
carries the rule its check broke (a leftover is HYGIENE-n, never its step's LIST-1); and one
failure never hides the others (CHECK-9).

The stores are ``tests/data/scratch_backends.py``: one that keeps a scratch file
``Data.fs.tmp`` beside its data for its whole life, as ZODB's FileStorage does, one that makes
it at its first commit (with and without declaring it), and one that leaves a temp file at
every commit and also loses a reopened Session's fifth commit.  The machines run through
:func:`~scopecheck.run.fuzz.fuzz_backend` without crash exploration, with fixed examples.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from scopecheck.backends.adapters import LoadedBackend, load
from scopecheck.machines import hygiene
from scopecheck.models.errors import UsageError
from scopecheck.planted import all_mutants, run_mutant
from scopecheck.run.fuzz import BackendReport, fuzz_backend
from scopecheck.run.validate import (
    Failure,
    PhaseReport,
    Verdict,
    failures_of,
    machine_settings,
    summary_lines,
)

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = f"{ROOT}/tests/data/scratch_backends.py"


def _run(
    factory: str, tmp_path: Path, *, examples: int = 12, shrink: bool = False, **kw: Any
) -> tuple[LoadedBackend, BackendReport]:
    """The storage machine (or ``machine_kind``) over ``factory`` of the scratch stores, for
    ``examples`` examples from seed 0; without ``shrink``, failures are saved as found."""
    loaded = load(f"{SCRATCH}:{factory}")
    report = fuzz_backend(
        attrs.evolve(loaded.backend, crash=None), budget=120, seed=0,
        settings=machine_settings(), failures_dir=tmp_path, profile="ci", examples=examples,
        shrink_deadline=None if shrink else time.perf_counter(), **kw,
    )  # fmt: skip
    return loaded, report


def _rules(report: BackendReport) -> list[tuple[str, ...]]:
    return [f.rules for f in failures_of(report.saved, "machine")]


# -- what is a leftover ----------------------------------------------------------------------


def _said(leftovers: hygiene.Leftovers) -> list[str]:
    return [str(finding) for finding in leftovers.findings()]


@pytest.mark.rule("HYGIENE-4", "HYGIENE-1")
def test_a_file_a_store_makes_when_it_opens_is_its_own_until_it_piles_up(tmp_path: Path) -> None:
    """A temp-named file that appears while a Session is opened is its store's; reopening
    that reuses it is fine, one that makes another beside it is a finding, and a temp-named
    file that appears at any other time is left over by that operation (HYGIENE-1)."""
    folder = tmp_path / "s.fs"
    leftovers = hygiene.Leftovers(str(tmp_path))

    def opens(*names: str) -> None:
        def make() -> None:
            folder.mkdir(exist_ok=True)
            for name in names:
                (folder / name).write_bytes(b"")

        leftovers.opening(make, lambda _: "s")

    opens("Data.fs", "Data.fs.tmp")
    assert _said(leftovers) == []
    opens("Data.fs.tmp")  # opened again, emptied: the same file, reused
    assert _said(leftovers) == []
    (folder / "commit.tmp").write_bytes(b"")  # made by something else: a commit's leftover
    (found,) = _said(leftovers)
    assert "(HYGIENE-1): ['s.fs/commit.tmp']" in found
    (folder / "commit.tmp").unlink()
    opens("Data.fs.tmp.2")
    (found,) = _said(leftovers)
    assert "HYGIENE-4" in found and "['s.fs/Data.fs.tmp.2']" in found
    assert "beside ['s.fs/Data.fs.tmp']" in found
    opens("Data.fs.tmp.3")
    (folder / "Data.fs.tmp.3").unlink()  # gone by the end of the step: no finding
    assert _said(leftovers) == []


@pytest.mark.rule("HYGIENE-4")
def test_a_stores_file_that_survives_its_delete_is_left_over(tmp_path: Path) -> None:
    """After ``delete()``, what the Session's openings made and is still there is left over:
    a finding here when its path does not name the Session (one that does is HYGIENE-2's)."""
    leftovers = hygiene.Leftovers(str(tmp_path))

    def create() -> None:
        (tmp_path / "s1.fs").mkdir()
        (tmp_path / "s1.fs" / "Data.fs.tmp").write_bytes(b"")
        (tmp_path / ".tmp-7").write_bytes(b"")

    leftovers.opening(create, lambda _: "s1")
    (tmp_path / "s1.fs" / "Data.fs.tmp").unlink()
    (tmp_path / "s1.fs").rmdir()
    leftovers.deleted("s1")
    (found,) = _said(leftovers)
    assert "HYGIENE-4" in found and "['.tmp-7']" in found
    leftovers.deleted("s1")
    assert _said(leftovers) == []  # said once


@pytest.mark.rule("HYGIENE-4")
def test_declared_files_match_from_the_right(tmp_path: Path) -> None:
    """``own_files`` patterns match a path under the root from its right end, ``*`` within
    one name; a declared file is never a candidate."""
    assert hygiene.declared("s.fs/Data.fs.tmp", ("Data.fs.tmp",))
    assert hygiene.declared("s.fs/Data.fs.tmp", ("*.fs/Data.fs.tmp",))
    assert not hygiene.declared("s.fs/Data.fs.tmp", ("*.db/Data.fs.tmp",))
    assert not hygiene.declared("a/s.fs/x.tmp", ("a/*.tmp",))
    (tmp_path / "s.fs").mkdir()
    (tmp_path / "s.fs" / "Data.fs.tmp").write_bytes(b"")
    (tmp_path / "s.fs" / "x.tmp").write_bytes(b"")
    leftovers = hygiene.Leftovers(str(tmp_path), ("*.fs/Data.fs.tmp",))
    assert leftovers.temps() == {"s.fs/x.tmp"}


@pytest.mark.rule("HYGIENE-4")
def test_a_declaration_that_is_no_tuple_of_patterns_is_one_line() -> None:
    with pytest.raises(UsageError) as info:
        load(f"{SCRATCH}:make_wrongly_declared_backend")
    assert "own_files" in info.value.message and "HYGIENE-4" in info.value.message


@pytest.mark.rule("HYGIENE-4", "HYGIENE-1")
def test_a_scratch_file_kept_for_the_stores_life_passes_and_one_a_commit_makes_fails(
    tmp_path: Path,
) -> None:
    """The store whose ``Data.fs.tmp`` appears when it opens passes (restarts included); the
    same file made by the first commit is a leftover of that commit (HYGIENE-1), until the
    adapter declares it its own."""
    loaded, kept = _run("make_backend", tmp_path / "kept")
    assert kept.failures == 0 and kept.steps > 100, kept.reproducers
    assert loaded.counts.restarts > 0
    _, lazy = _run("make_lazy_backend", tmp_path / "lazy")
    assert _rules(lazy) == [("HYGIENE-1",)]
    assert "'s1.fs/Data.fs.tmp'" in failures_of(lazy.saved, "machine")[0].error
    loaded, declared = _run("make_declared_lazy_backend", tmp_path / "declared")
    assert loaded.capabilities.own_files == ("*.fs/Data.fs.tmp",)
    assert declared.failures == 0, declared.reproducers


#: Each planted leftover bug and the rule it breaks; the HYGIENE-2 and HYGIENE-3 ones, whose
#: checks only report through the machine's findings now, run with SCOPECHECK_LONG=1 (the
#: fork machine's stray is also the quick ``test_a_forks_stray_is_reported_under_its_own_rule``).
LEFTOVER_BUGS = {
    "jsonl-publish-leaves-temp": "HYGIENE-1",
    "jsonl-delete-leaves-sidecars": "HYGIENE-2",
    "jsonl-fork-leaves-lock": "HYGIENE-3",
    "jsonl-opening-keeps-scratch": "HYGIENE-4",
}
_LONG = pytest.mark.long


@pytest.mark.rule("HYGIENE-1", "HYGIENE-2", "HYGIENE-3", "HYGIENE-4")
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=_LONG if rule in ("HYGIENE-2", "HYGIENE-3") else ())
        for name, rule in sorted(LEFTOVER_BUGS.items())
    ],
)
def test_every_planted_leftover_is_caught_under_its_rule(name: str) -> None:
    (mutant,) = [m for m in all_mutants() if m.name == name]
    result = run_mutant(mutant)
    assert result.caught, result.error
    assert f"({LEFTOVER_BUGS[name]})" in result.error, result.error


# -- the rule a failure carries --------------------------------------------------------------


@pytest.mark.rule("HYGIENE-1", "CHECK-9")
def test_a_leftover_is_reported_under_its_own_rule_never_its_steps(tmp_path: Path) -> None:
    """A temp file a commit leaves is HYGIENE-1 in the reproducer, the verdict's failure, its
    JSON and its summary -- not the rules of the step that made it (LIST-1 for the first)."""
    _, report = _run("make_lazy_backend", tmp_path)
    (record,) = [orjson.loads(Path(path).read_bytes()) for path in report.reproducers]
    assert record["rules"] == ["HYGIENE-1"]
    (failure,) = failures_of(report.saved, "machine")
    assert (failure.rule, failure.rules) == ("HYGIENE-1", ("HYGIENE-1",))
    verdict = Verdict(
        "scratch", {"machine": PhaseReport("failed", "steps", {"steps": 1})}, (failure,)
    )
    assert [f["rule"] for f in verdict.as_json()["failures"]] == ["HYGIENE-1"]
    lines = summary_lines(verdict)
    assert any(line.startswith("HYGIENE-1 (machine): MismatchError: temp files") for line in lines)
    assert not any("LIST-1" in line for line in lines)


@pytest.mark.rule("HYGIENE-3", "CHECK-9")
def test_a_forks_stray_is_reported_under_its_own_rule(tmp_path: Path) -> None:
    (mutant,) = [m for m in all_mutants() if m.name == "jsonl-fork-leaves-lock"]
    report = fuzz_backend(
        mutant.make(), budget=60, seed=0, settings=machine_settings(), failures_dir=tmp_path,
        profile="ci", examples=10, machine_kind="fork", shrink_deadline=time.perf_counter(),
    )  # fmt: skip
    assert [f.rules for f in failures_of(report.saved, "forks")] == [("HYGIENE-3",)]


def test_an_old_reproducer_without_rules_takes_its_last_steps() -> None:
    """A machine reproducer written before records carried ``rules`` is read as before."""
    from scopecheck.run.fuzz import SavedFailure

    record = {
        "kind": "machine",
        "error": "MismatchError: x",
        "program": "state = M()\nstate.append_batch(sid='s1', writes=[])\nstate.teardown()",
    }
    (failure,) = failures_of([SavedFailure(record, "f.json")], "machine")
    assert failure.rules == ("LIST-1", "SEQ-1")


# -- one failure never hides the others ------------------------------------------------------


@pytest.mark.rule("CHECK-9")
def test_one_failure_never_hides_the_others(tmp_path: Path) -> None:
    """A temp file left by the first commit of nearly every example is reported once; the
    machine goes on past it -- its steps, examples and restarts counting -- and reports the
    store's second bug, reached only after five commits and a reopen."""
    seen: list[tuple[int, int]] = []
    loaded, report = _run(
        "make_leaky_backend", tmp_path, examples=20,
        on_progress=lambda r: seen.append((r.failures, r.steps)),
    )  # fmt: skip
    rules = _rules(report)
    assert rules.count(("HYGIENE-1",)) == 1, rules
    assert any(rule != ("HYGIENE-1",) for rule in rules), rules
    assert report.repeats > 0 and loaded.counts.restarts > 0
    found_at = next(steps for failures, steps in seen if failures)
    assert report.steps > found_at, (found_at, report.steps)


@pytest.mark.rule("CHECK-9", "INSTALL-12")
def test_the_same_seed_does_the_same_work_past_a_failure(tmp_path: Path) -> None:
    """Going on after a failure keeps ``--examples`` fixed work: two runs of the store whose
    first commit leaves its scratch file, same seed and examples, make the same steps,
    examples, repeats and restarts and report the same failure."""
    runs = [_run("make_lazy_backend", tmp_path / name, shrink=True) for name in "ab"]
    (first, one), (second, other) = runs
    assert (one.steps, one.examples, one.repeats) == (other.steps, other.examples, other.repeats)
    assert one.repeats > 0 and first.counts.restarts == second.counts.restarts > 0
    assert _rules(one) == _rules(other) == [("HYGIENE-1",)]


@pytest.mark.long
@pytest.mark.rule("CHECK-9", "HYGIENE-1")
def test_validate_goes_on_after_a_leftover(tmp_path: Path) -> None:
    """``scopecheck validate`` of the leaky store: the machine phase counts its steps past the
    leftover, the restarts phase runs, and the verdict lists the leftover as HYGIENE-1 beside
    the second bug."""
    from scopecheck.run.validate import validate

    verdict = validate(
        f"{SCRATCH}:make_leaky_backend", budget=120, failures_dir=tmp_path, examples=30
    )
    machine = verdict.phases["machine"]
    assert machine.status == "failed" and machine.counts["steps"] > 100, machine
    assert verdict.phases["restarts"].status == "ran", verdict.phases["restarts"]
    rules = [f.rule for f in verdict.failures if f.phase == "machine"]
    assert rules.count("HYGIENE-1") == 1 and len(rules) > 1, rules
    assert "LIST-1" not in rules
    assert isinstance(verdict.failures[0], Failure)
