"""Static scope typing holds the line: mypy over tests/typing/variance_cases.py is clean.

The cases module marks every required type error with ``# type: ignore[code]`` and mypy runs
with ``warn_unused_ignores``: a weakened rule (say, covariant writes) turns an ignore into an
"unused ignore" error and this test fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "typing" / "variance_cases.py"


def run_mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--warn-unused-ignores",
            "--no-incremental",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.rule("TYPE-1", "TYPE-2", "TYPE-3", "TYPE-4", "TYPE-5", "TYPE-6")
def test_scope_variance_cases_type_check_as_documented() -> None:
    """Session defaults, covariant addresses, invariant writes; mixed commits are type errors."""
    result = run_mypy(CASES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.rule("TYPE-3")
def test_weakened_enforcement_is_detected(tmp_path: Path) -> None:
    """Deleting one expected-error marker makes mypy fail: the check has teeth."""
    text = CASES.read_text()
    marker = (
        'storage.commit([set_value(lane, 1), set_value(output, "o")])  # type: ignore[arg-type]'
    )
    assert marker in text
    planted = ROOT / "tests" / "typing" / "_planted_case.py"
    try:
        planted.write_text(text.replace(marker, marker.split("  #")[0]))
        result = run_mypy(planted)
    finally:
        planted.unlink(missing_ok=True)
    assert result.returncode == 1
    assert "arg-type" in result.stdout
