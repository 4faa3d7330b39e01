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


#: The public modules (docs/api.md, "What is public"): a user imports these and nothing else.
PUBLIC = ("scopecheck", "scopecheck.conformance", "scopecheck.pytest_plugin", "scopecheck.examples")

#: Pages written for a project's own contributors, which may name internal modules.
CONTRIBUTOR_PAGES = ("contributing.md", "mutation.md", "jsonl-open.md")


def _is_public(module: str) -> bool:
    """``scopecheck`` itself, or one of the other public modules or a module inside it."""
    return module == "scopecheck" or any(
        module == public or module.startswith(public + ".") for public in PUBLIC[1:]
    )


def _python_packages() -> dict[str, Path]:
    """Every installed package that holds Python modules: its name and its ``__init__.py``."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    mapped = config["setuptools"]["package-dir"]
    found = {}
    for name in config["setuptools"]["packages"]:
        top = max((k for k in mapped if name == k or name.startswith(k + ".")), key=len, default="")
        base = ROOT / mapped[top] if top else ROOT
        rest = name[len(top) :].lstrip(".") if top else name
        folder = base.joinpath(*rest.split(".")) if rest else base
        if any(folder.glob("*.py")):
            found[name] = folder / "__init__.py"
    return found


@pytest.mark.rule("INSTALL-1")
def test_every_package_says_whether_it_is_public() -> None:
    """A package is public (docs/api.md lists it) or its docstring opens a paragraph with
    "Internal:", so whoever reads it knows whether a user may import it."""
    packages = _python_packages()
    assert "scopecheck.models" in packages and "scopecheck.cli" in packages
    unmarked = []
    for name, init in sorted(packages.items()):
        if _is_public(name):
            continue
        source = init.read_text(encoding="utf-8") if init.exists() else ""
        doc = ast.get_docstring(ast.parse(source)) or ""
        if not any(paragraph.startswith("Internal:") for paragraph in doc.split("\n\n")):
            unmarked.append(name)
    assert unmarked == []
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = page.split("## What is public", 1)[1].split("\n## ", 1)[0]
    for module in PUBLIC:
        assert f"`{module}`" in listed


@pytest.mark.rule("INSTALL-1")
def test_user_pages_name_only_public_modules() -> None:
    """The README and the user's pages under docs/ import and run only public modules
    (``from scopecheck.impl… import`` in a user's page would teach an internal path)."""
    pages = [ROOT / "README.md"] + [
        page for page in sorted((ROOT / "docs").glob("*.md")) if page.name not in CONTRIBUTOR_PAGES
    ]
    pattern = re.compile(r"(?:from|import|python -m|-p)\s+(scopecheck(?:\.[A-Za-z_]+)*)")
    internal = [
        f"{page.name}: {module}"
        for page in pages
        for module in pattern.findall(page.read_text(encoding="utf-8"))
        if not _is_public(module)
    ]
    assert internal == []
