"""The wheel as a user's venv holds it: one import package, the spec and data inside it, and the
commands working from a directory that is not a checkout (INSTALL-1, INSTALL-3, INSTALL-8)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest

from scopecheck.tools.rules import load_rules


def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


@pytest.mark.rule("INSTALL-1")
def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    top = {name.split("/", 1)[0] for name in names(wheel)}
    assert top == {"scopecheck", wheel.name.split("-py3")[0] + ".dist-info"}, top
    with zipfile.ZipFile(wheel) as archive:
        (top_level,) = [n for n in archive.namelist() if n.endswith("top_level.txt")]
        assert archive.read(top_level).decode().split() == ["scopecheck"]


@pytest.mark.rule("INSTALL-1", "INSTALL-3", "INSTALL-8")
def test_the_wheel_carries_the_top_level_folders_the_rules_and_the_data(wheel: Path) -> None:
    inside = set(names(wheel))
    for required in (
        "scopecheck/models/reference.py",
        "scopecheck/impl/jsonl/storage.py",
        "scopecheck/crashsim/jsonl_sweep.py",
        "scopecheck/examples/good_backend.py",
        "scopecheck/examples/sqlite3_backend.py",
        "scopecheck/examples/node/backend.js",
        "scopecheck/examples/node/backend-promises.js",
        "scopecheck/examples/node/protocol.js",
        "scopecheck/examples/go/backend.go",
        "scopecheck/examples/go/go.mod",
        "scopecheck/process/protocol-1.schema.json",
        "scopecheck/conformance/test_fork_cases.py",
        "scopecheck/data/pi-sessions/large-session.jsonl",
        "scopecheck/data/pi-sessions/before-compaction.jsonl",
        "scopecheck/data/pi-sessions/README.md",
        "scopecheck/py.typed",
        "scopecheck/models/py.typed",
    ):
        assert required in inside, required
    rules = {n.rsplit("/", 1)[1] for n in inside if n.startswith("scopecheck/spec/rules/")}
    assert rules == {Path(rule.file).name for rule in load_rules()}


@pytest.mark.rule("INSTALL-1", "INSTALL-3")
def test_the_installed_wheel_works_outside_a_checkout(
    tmp_path: Path, installed: Path, wheel_env: dict[str, str]
) -> None:
    """From a plain directory: the package is the wheel's, ``rules`` lists every rule and says
    coverage is unavailable, and a bundled example validates by module name."""
    where = run(wheel_env, tmp_path, "-c", "import scopecheck; print(scopecheck.__file__)")
    assert where.stdout.strip() == str(installed / "scopecheck" / "__init__.py"), where

    rules = run(wheel_env, tmp_path, "-m", "scopecheck", "rules", "--json")
    assert rules.returncode == 0, rules.stderr
    document = orjson.loads(rules.stdout)
    assert [r["id"] for r in document["rules"]] == [r.id for r in load_rules()]
    assert document["coverage"].startswith("unavailable: coverage needs the test suite")

    checked = run(
        wheel_env, tmp_path, "-m", "scopecheck", "validate",
        "scopecheck.examples.good_backend:make_backend", "--budget", "2", "--json",
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = orjson.loads(checked.stdout)
    assert verdict["passed"] and verdict["conformance_tests"] > 40
    # Only Hypothesis's own directory (the example database, $SCOPECHECK_DB to move it).
    assert {p.name for p in tmp_path.iterdir()} <= {".hypothesis"}


@pytest.mark.rule("INSTALL-1", "PROC-5")
def test_the_protocol_schema_loads_from_the_installed_wheel(
    tmp_path: Path, installed: Path, wheel_env: dict[str, str]
) -> None:
    """The process protocol's JSON Schema is package data: an implementer reads it from an
    installed scopecheck, outside any checkout."""
    code = "from scopecheck.process.protocol import schema; print(schema()['x-protocol-version'])"
    found = run(wheel_env, tmp_path, "-c", code)
    assert found.returncode == 0 and found.stdout.strip() == "1", found.stderr
