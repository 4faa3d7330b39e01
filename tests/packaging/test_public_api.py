"""``from scopecheck import …`` is the whole API a backend author needs (INSTALL-1): every name
in ``__all__`` exists and is documented on docs/api.md, and the README's API screen and every
example import from it alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import scopecheck

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.rule("INSTALL-1")
def test_every_exported_name_exists_and_is_documented() -> None:
    assert len(set(scopecheck.__all__)) == len(scopecheck.__all__)
    missing = [name for name in scopecheck.__all__ if not hasattr(scopecheck, name)]
    assert missing == []
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)[(`.]", page))
    assert sorted(set(scopecheck.__all__) - documented) == []


@pytest.mark.rule("INSTALL-1")
def test_the_runner_is_loaded_only_when_used() -> None:
    """The vocabulary costs attrs and orjson; ``validate`` brings Hypothesis on first use."""
    import subprocess
    import sys

    probe = "import sys, scopecheck; print('hypothesis' in sys.modules, 'pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout
    assert callable(scopecheck.validate) and scopecheck.Verdict.__name__ == "Verdict"


def _scopecheck_imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "scopecheck"}


@pytest.mark.rule("INSTALL-1")
@pytest.mark.parametrize(
    "example", sorted(p.name for p in (ROOT / "examples").glob("*_backend.py"))
)
def test_examples_import_from_the_public_api_alone(example: str) -> None:
    """An example may also build on another example (``scopecheck.examples.*``)."""
    imports = _scopecheck_imports((ROOT / "examples" / example).read_text(encoding="utf-8"))
    assert {m for m in imports if not m.startswith("scopecheck.examples.")} <= {"scopecheck"}


@pytest.mark.rule("INSTALL-1")
def test_the_readme_api_screen_imports_from_scopecheck_and_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    screen = readme.split("## The Python API in one screen", 1)[1].split("```python", 1)[1]
    code = screen.split("```", 1)[0]
    assert _scopecheck_imports(code) == {"scopecheck"}
    exec(compile(code, "README.md", "exec"), {})
