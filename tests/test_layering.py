"""Nothing imports upwards: the model is independent of the backends and of crashsim.

models/ imports neither impl/ nor crashsim/ nor scopecheck/; impl/ and crashsim/ never import
the reference model (the oracle) nor tests/ (BRIEF "The model is the oracle"; ARCH-1).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports_of(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path} imports {name}"
        for path, names in imports_of(package).items()
        for name in sorted(names)
        if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
    ]


@pytest.mark.rule("ARCH-1")
def test_models_import_neither_backends_nor_crashsim() -> None:
    """The model cannot share a backend's bug through an import."""
    assert offenders("models", ("impl", "crashsim", "scopecheck", "tests")) == []


@pytest.mark.rule("ARCH-1")
def test_backends_never_import_the_reference_model_or_tests() -> None:
    """Backends do not consult the oracle (crashsim may: it checks recovered states with it)."""
    forbidden = ("models.reference", "models.fork_model", "crashsim", "tests", "scopecheck")
    assert offenders("impl", forbidden) == []


@pytest.mark.rule("ARCH-1")
def test_crashsim_never_imports_tests_or_the_cli() -> None:
    assert offenders("crashsim", ("tests", "scopecheck")) == []
