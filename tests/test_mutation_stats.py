"""The mutation-score reader (scopecheck/tools/mutation_stats.py, docs/mutation.md) on synthetic
mutmut records: it must never report a score mutmut's own verdicts do not support."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from scopecheck.run.profiles import load_profile
from scopecheck.tools import mutation_stats as ms


def _meta(root: Path, path: str, verdicts: dict[str, int | None]) -> None:
    target = root / "mutants" / (path + ".meta")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(orjson.dumps({"exit_code_by_key": verdicts}))


def test_scores_per_package_leave_triaged_and_unrun_mutants_out(tmp_path: Path) -> None:
    _meta(
        tmp_path,
        "scopecheck/models/a.py",
        {"scopecheck.models.a.x_f__mutmut_1": 1, "scopecheck.models.a.x_f__mutmut_2": 0},
    )
    _meta(
        tmp_path,
        "scopecheck/impl/b.py",
        {
            "scopecheck.impl.b.x_g__mutmut_1": 1,
            "scopecheck.impl.b.x_g__mutmut_2": 36,  # timeout: detected
            "scopecheck.impl.b.x_g__mutmut_3": 0,  # triaged equivalent
            "scopecheck.impl.b.x_g__mutmut_4": 33,  # no tests: a survivor
            "scopecheck.impl.b.x_g__mutmut_5": None,  # not checked
        },
    )
    verdicts = ms.load_verdicts(tmp_path / "mutants")
    triage = [ms.Equivalent("scopecheck.impl.b.x_g__mutmut_3", "same behaviour")]
    scores = ms.score_packages(verdicts, triage)
    assert scores["models"].score == 0.5
    impl = scores["impl"]
    assert (impl.killed, impl.timeout, impl.no_tests, impl.equivalent) == (1, 1, 1, 1)
    assert impl.not_checked == 1 and impl.score == pytest.approx(2 / 3)
    assert ms.cross_check({"killed": 2, "survived": 2, "timeout": 1, "total": 7}, verdicts) == []
    assert ms.cross_check({"killed": 3, "survived": 2, "timeout": 1, "total": 7}, verdicts)


def test_triage_entries_need_a_reason_and_a_known_kind(tmp_path: Path) -> None:
    path = tmp_path / "triage.toml"
    path.write_text('[[equivalent]]\nname = "m.x"\nreason = ""\n', "utf-8")
    with pytest.raises(ValueError, match="no reason"):
        ms.load_triage(path)
    path.write_text('[[equivalent]]\nname = "m.x"\nreason = "r"\nkind = "maybe"\n', "utf-8")
    with pytest.raises(ValueError, match="kind"):
        ms.load_triage(path)
    assert ms.load_triage(Path("spec/mutation/triage.toml"))  # the repository's list parses


def test_samples_are_stable_and_nested() -> None:
    names = [f"scopecheck.impl.m.x_f__mutmut_{i}" for i in range(2000)]
    every_24 = {n for n in names if ms.in_sample(n, 24)}
    every_6 = {n for n in names if ms.in_sample(n, 6)}
    assert every_24 <= every_6 and 0 < len(every_24) < len(every_6) < len(names)
    assert ms.parse_samples(["6", "impl=24"]) == {"models": 6, "impl": 24}


def test_mutmut_runs_get_the_derandomised_mutation_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = os.environ.get("SCOPECHECK_PROFILE") or (
        "mutation" if "MUTANT_UNDER_TEST" in os.environ else "dev"
    )
    monkeypatch.delenv("SCOPECHECK_PROFILE", raising=False)
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    try:
        chosen = load_profile()
        assert chosen.derandomize and chosen.database is None and chosen.max_examples < 100
    finally:
        load_profile(before)
