"""scopecheck installed into a user's project changes nothing they did not ask for (INSTALL-2):
their ``models`` package, their Hypothesis profile and ``--strict-markers`` survive, with the
plugin registered and with scopecheck's conformance suite in the same session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.user_project import write_user_project

ROOT = Path(__file__).resolve().parents[2]


def pytest_in(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


@pytest.mark.rule("INSTALL-2")
def test_the_user_projects_own_tests_pass_untouched(
    tmp_path: Path, wheel_env: dict[str, str]
) -> None:
    project = write_user_project(tmp_path / "user")
    result = pytest_in(project, wheel_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10 passed" in result.stdout, result.stdout
    assert "scopecheck" not in result.stdout.lower(), result.stdout  # no warnings, no noise


@pytest.mark.rule("INSTALL-2")
def test_the_plugin_form_runs_beside_the_users_tests_and_changes_nothing(
    tmp_path: Path, wheel_env: dict[str, str]
) -> None:
    """Asked for, the conformance suite runs in the user's session (under --strict-markers,
    its ``rule`` markers registered by the plugin), and the user's own tests still see their
    profile and their ``models``."""
    project = write_user_project(tmp_path / "user")
    result = pytest_in(
        project,
        wheel_env,
        f"--scopecheck-backend={ROOT}/examples/good_backend.py:make_backend",
        "--pyargs",
        "scopecheck.conformance.test_storage_cases",
        "scopecheck.conformance.test_machine",
        "tests",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed > 10 + 20, summary
