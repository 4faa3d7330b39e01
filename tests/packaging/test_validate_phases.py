"""``scopecheck validate`` as a backend author meets it: every phase reported, skipped phases
named with their reason, failures that carry what to look at and how to rerun them, and nothing
left behind (INSTALL-5..7)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from scopecheck import validate
from scopecheck.run.fuzz import SavedFailure
from scopecheck.run.validate import PHASES, PhaseReport, failures_of

ROOT = Path(__file__).resolve().parents[2]
GOOD = f"{ROOT}/examples/good_backend.py:make_backend"
BROKEN = f"{ROOT}/examples/broken_backend.py:make_backend"
SQLITE3 = f"{ROOT}/examples/sqlite3_backend.py:make_backend"
FORKS = f"{ROOT}/tests/data/fork_backends.py"


def run_validate(*args: str, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child whose temporary directory is ``tmpdir`` alone."""
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", "validate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        cwd=tmpdir.parent,
    )


class Recorder:
    """A :class:`~scopecheck.run.validate.Progress` that keeps every update."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, str, str]] = []

    def update(self, phase: str, report: PhaseReport) -> None:
        self.updates.append((phase, report.status, report.detail))


@pytest.mark.rule("INSTALL-6")
def test_every_phase_is_reported_and_a_missing_capability_is_skipped_with_its_reason(
    tmp_path: Path,
) -> None:
    """The dict example has no root, no ``reopen()`` and no ``fork()``: it passes, and the
    report says which checks could not run and why, phase by phase, live and at the end."""
    progress = Recorder()
    verdict = validate(GOOD, budget=2, failures_dir=tmp_path, progress=progress)
    assert verdict.passed, verdict.failures
    phases = verdict.as_json()["phases"]
    assert list(phases) == list(PHASES)
    assert phases["machine"]["status"] == "ran" and phases["machine"]["steps"] > 0
    assert phases["conformance"]["status"] == "ran" and phases["conformance"]["cases"] > 40
    assert phases["forks"]["status"] == "skipped"
    assert phases["forks"]["detail"] == "the repository has no fork()"
    assert phases["crash exploration"]["status"] == "skipped"
    assert "neither fs nor root" in phases["crash exploration"]["detail"]
    assert phases["restarts"]["status"] == "skipped"
    assert "no reopen()" in phases["restarts"]["detail"]
    assert phases["restarts"]["handle_reopens"] > 0 and phases["restarts"]["restarts"] == 0
    seen = [phase for phase, _, _ in progress.updates]
    assert set(seen) == set(PHASES)
    assert ("machine", "running") in {(p, s) for p, s, _ in progress.updates}
    assert any(p == "conformance" and "cases" in d for p, _, d in progress.updates)


@pytest.mark.long
@pytest.mark.rule("INSTALL-5", "INSTALL-6")
def test_a_root_factory_is_restarted_over_its_directory_and_nothing_is_left_behind(
    tmp_path: Path,
) -> None:
    """``make_backend(clock, *, root)`` on the standard library's sqlite3: restarts call the
    factory again over the same directory, crash exploration runs from its system calls, and
    the run's temporary directory ends empty.  Long: the default run checks the same on the
    same command (``validate`` of the sqlite3 example with ``--examples``) in
    tests/test_validate_verdict.py's README sample, whose restarts and crash exploration lines
    say ``ran`` with these words and whose temporary directory must end empty."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    failures = tmp_path / "failures"
    result = run_validate(SQLITE3, "--examples", "3", "--json", "--failures-dir", str(failures),
                          tmpdir=tmpdir)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = orjson.loads(result.stdout)
    assert verdict["phases"]["restarts"]["status"] == "ran"
    assert verdict["phases"]["restarts"]["restarts"] > 0
    crash = verdict["phases"]["crash exploration"]
    assert crash["status"] == "ran" and crash["crash_states"] > 0, crash
    assert "system-call trace" in crash["detail"]
    assert sorted(os.listdir(tmpdir)) == []


@pytest.mark.rule("INSTALL-6", "FORK-7")
def test_a_backend_with_fork_gets_the_fork_machine_and_the_fork_cases(tmp_path: Path) -> None:
    """With ``fork()`` the forks phase runs; a fork that carries operation state into the
    destination (planted through the public API) fails it, in the machine and the cases."""
    good = validate(f"{FORKS}:make_backend", budget=3, failures_dir=tmp_path)
    assert good.passed, good.failures
    forks = good.phases["forks"]
    assert forks.status == "ran" and forks.counts["fork_machine_steps"] > 0
    assert "fork conformance cases passed" in forks.detail

    leaky = validate(f"{FORKS}:make_leaky_fork", budget=3, failures_dir=tmp_path, examples=40)
    assert not leaky.passed and leaky.phases["forks"].status == "failed"
    in_forks = [f for f in leaky.failures if f.phase == "forks"]
    assert any(f.reproducer.startswith("scopecheck replay") for f in in_forks)
    assert any("test_fork_cases.py" in f.test for f in in_forks)
    assert all(f.rule and f.rule.startswith(("FORK-", "SEQ-")) for f in in_forks)
    assert any("pi.op.state" in f.message for f in in_forks)


@pytest.mark.rule("INSTALL-7")
def test_a_conformance_failure_carries_its_diff_and_a_command_that_reruns_that_case(
    tmp_path: Path,
) -> None:
    """The broken example's retirement bug: the case names its rules, shows the assertion and
    its diff, and the printed command reruns exactly that case, which fails again."""
    verdict = validate(BROKEN, budget=1, failures_dir=tmp_path)
    cases = [f for f in verdict.failures if f.phase == "conformance"]
    assert cases, verdict.failures
    case = next(f for f in cases if "RETIRE-2" in f.rules)
    assert case.error.startswith(("assert", "AssertionError")), case.error
    assert "contains" in case.message or "Differing" in case.message, case.message
    assert not re.search(r"\.py:\d+: AssertionError$", case.error), case.error
    command = shlex.split(case.reproducer)
    assert command[:3] == ["python", "-m", "pytest"]
    rerun = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, timeout=300, check=False
    )
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    assert "1 failed" in rerun.stdout and "passed" not in rerun.stdout


def test_a_crash_failure_without_a_rule_keeps_the_rest_of_the_verdict() -> None:
    """A crash explorer may report a failure it cannot attribute: it is listed with no rule,
    never a ``KeyError`` that throws away the machine's findings."""
    saved = SavedFailure({"kind": "crash", "backend": "x", "error": "no rule here"}, "crash.json")
    (failure,) = failures_of([saved], "crash exploration")
    assert failure.rule is None and failure.error == "no rule here"
    assert failure.reproducer == "scopecheck replay crash.json"


@pytest.mark.rule("INSTALL-10", "INSTALL-15")
def test_the_plugins_machine_phase_counts_steps_and_examples_as_validate_does(
    tmp_path: Path,
) -> None:
    """``pytest --scopecheck-backend=...`` run from a user's directory (no file name of the
    suite in its node ids) ends with the verdict, whose machine line gives the steps and
    examples the machine ran, worded as ``validate`` words them."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "scopecheck.pytest_plugin",
         "-p", "no:cacheprovider", f"--scopecheck-backend={GOOD}",
         "--pyargs", "scopecheck.conformance.test_machine"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("  machine:")]
    found = re.fullmatch(r"  machine: +ran ([\d,]+) steps, ([\d,]+) examples", line)
    assert found is not None, line
    steps, examples = (int(group.replace(",", "")) for group in found.groups())
    assert steps >= examples > 0, line


@pytest.mark.rule("INSTALL-10", "INSTALL-15")
def test_the_plugins_forks_phase_counts_the_fork_machine_and_its_cases_as_validate_does(
    tmp_path: Path,
) -> None:
    """For a user's repository with ``fork()`` the forks phase runs the fork machine and the
    fork cases; its line gives the machine's steps and examples, as ``validate`` words them,
    and how many fork cases passed (the machine's own test is not one of them)."""
    (tmp_path / "jsonl_backend.py").write_text(
        "import scopecheck\n\n\ndef make_backend(clock, *, root):\n"
        "    return scopecheck.JsonlRepository(root, clock=clock)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "scopecheck.pytest_plugin",
         "-p", "no:cacheprovider", "--scopecheck-backend=jsonl_backend.py:make_backend",
         "--pyargs", "scopecheck.conformance.test_fork_machine",
         "scopecheck.conformance.test_fork_cases"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    passed = int(re.search(r"(\d+) passed", result.stdout).group(1))  # type: ignore[union-attr]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("  forks:")]
    found = re.fullmatch(
        r"  forks: +ran fork machine: ([\d,]+) steps, ([\d,]+) examples; (\d+) fork cases passed",
        line,
    )
    assert found is not None, line
    steps, examples, cases = (int(group.replace(",", "")) for group in found.groups())
    assert steps >= examples > 0, line
    assert cases == passed - 1 > 0, (line, passed)
