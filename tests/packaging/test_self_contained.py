"""Everything a test, workload or command reads is in the project (INSTALL-8): no module or
test names a path outside the checkout or the installed package, so a fresh clone anywhere
runs the whole suite."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folders whose Python files are code or tests.
FOLDERS = ("models", "impl", "crashsim", "scopecheck", "tests", "examples")
#: Fragments of a path outside the project: the shared folder beside a checkout, and this
#: machine's work tree.
OUTSIDE = ("../shared", "shared/data", "/work/")


def string_constants(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
    return found


def python_files() -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


@pytest.mark.rule("INSTALL-8")
def test_no_code_or_test_names_a_path_outside_the_project() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in python_files()
        for line, text in string_constants(path)
        if any(fragment in text for fragment in OUTSIDE) and path.name != Path(__file__).name
    ]
    assert offenders == []


@pytest.mark.rule("INSTALL-8")
def test_the_scan_sees_every_package_and_test_file() -> None:
    """The scan cannot pass by reading nothing: it covers the folders it claims to."""
    seen = {path.relative_to(ROOT).parts[0] for path in python_files()}
    assert seen == set(FOLDERS)
    assert len(python_files()) > 150


@pytest.mark.rule("INSTALL-8")
def test_the_bundled_data_is_in_the_package() -> None:
    from scopecheck.data import PI_SESSIONS, TRANSCRIPTS, pi_session

    assert PI_SESSIONS.is_relative_to(ROOT / "scopecheck")
    for name in TRANSCRIPTS:
        assert pi_session(name).stat().st_size > 100_000
