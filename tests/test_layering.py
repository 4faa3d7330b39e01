"""Nothing imports upwards, and everything imports the installed names.

models/ imports neither impl/ nor crashsim/ nor the product surface; impl/ and crashsim/ never
import the reference model (the oracle) nor tests/ (BRIEF "The model is the oracle"; ARCH-1).
The folders install as ``scopecheck.models``, ``scopecheck.impl`` and ``scopecheck.crashsim``
(INSTALL-1): no file of the project imports a bare ``models``, ``impl`` or ``crashsim``, which in a
user's venv would be the user's own package.
"""

from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The top-level folders that install under ``scopecheck.`` (pyproject's package-dir).
MAPPED = ("models", "impl", "crashsim")

#: The product surface: every ``scopecheck.*`` module that is not one of the mapped folders.
SURFACE = "scopecheck"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def imports_of(folder: str) -> dict[str, set[str]]:
    paths = sorted((ROOT / folder).rglob("*.py"))
    return {str(path.relative_to(ROOT)): _imports(path) for path in paths}


def _is(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def _surface(name: str) -> bool:
    """``name`` is a product-surface module (the CLI, machines, validation runner, …)."""
    return _is(name, SURFACE) and not any(_is(name, f"scopecheck.{f}") for f in MAPPED)


def offenders(folder: str, forbidden: tuple[str, ...], *, surface: bool = True) -> list[str]:
    return [
        f"{path} imports {name}"
        for path, names in imports_of(folder).items()
        for name in sorted(names)
        if any(_is(name, bad) for bad in forbidden) or (surface and _surface(name))
    ]


@pytest.mark.rule("ARCH-1")
def test_models_import_neither_backends_nor_crashsim() -> None:
    """The model cannot share a backend's bug through an import."""
    forbidden = ("scopecheck.impl", "scopecheck.crashsim", "tests")
    assert offenders("models", forbidden) == []


@pytest.mark.rule("ARCH-1")
def test_backends_never_import_the_reference_model_or_tests() -> None:
    """Backends do not consult the oracle (crashsim may: it checks recovered states with it)."""
    forbidden = (
        "scopecheck.models.reference",
        "scopecheck.models.fork_model",
        "scopecheck.crashsim",
        "tests",
    )
    assert offenders("impl", forbidden) == []


@pytest.mark.rule("ARCH-1")
def test_crashsim_never_imports_tests_or_the_cli() -> None:
    assert offenders("crashsim", ("tests",)) == []


@pytest.mark.rule("INSTALL-1")
@pytest.mark.parametrize("folder", [*MAPPED, "scopecheck", "tests", "examples"])
def test_nothing_imports_a_bare_top_level_folder(folder: str) -> None:
    """Inside a user's venv ``models`` is the user's package: every import names the installed
    ``scopecheck.<folder>`` instead."""
    bare = tuple(MAPPED)
    assert offenders(folder, bare, surface=False) == []


@pytest.mark.rule("INSTALL-1")
def test_internal_modules_never_import_the_public_facade() -> None:
    """``scopecheck/__init__.py`` re-exports from the modules; a module importing the facade back
    would make ``import scopecheck.models.errors`` circular."""
    found = [
        f"{path} imports scopecheck"
        for folder in (*MAPPED, "scopecheck")
        for path, names in imports_of(folder).items()
        if "scopecheck" in names and not path.endswith("scopecheck/__init__.py")
    ]
    assert found == []


@pytest.mark.rule("INSTALL-1")
@pytest.mark.parametrize("folder", [*MAPPED, "examples", "spec"])
def test_each_folder_installs_into_the_package_from_where_it_is(folder: str) -> None:
    """pyproject's package-dir installs the top-level folder as ``scopecheck.<folder>``, and
    nothing under ``scopecheck/`` holds a second copy or a link: one file, one module name
    (tests/packaging/test_layout.py checks the editable install and mypy see the same)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["package-dir"][f"scopecheck.{folder}"] == folder
    assert not os.path.lexists(ROOT / "scopecheck" / folder)


#: Where the classes planted bugs may subclass come from.
_BACKEND_MODULES = ("scopecheck.impl", "scopecheck.models", "scopecheck.examples")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _catalogue_modules() -> list[tuple[Path, Any]]:
    import importlib

    from scopecheck.planted import all_mutants

    all_mutants()
    found = []
    for path in sorted((ROOT / "scopecheck" / "planted").glob("*.py")):
        name = "scopecheck.planted" + ("" if path.stem == "__init__" else f".{path.stem}")
        found.append((path, importlib.import_module(name)))
    return found


@pytest.mark.rule("ARCH-3")
def test_planted_bugs_use_only_public_seams() -> None:
    """A catalogue module touches no private name of anything but itself, and a class planted
    over a backend class neither overrides nor calls that class's private methods."""
    import inspect

    problems: list[str] = []
    for path, module in _catalogue_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                problems.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
        for class_node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            cls = getattr(module, class_node.name, None)
            if not inspect.isclass(cls):
                continue
            backend_private = {
                name
                for base in cls.__mro__[1:]
                if base.__module__.startswith(_BACKEND_MODULES)
                for name in vars(base)
                if _private(name)
            }
            for node in ast.walk(class_node):
                if isinstance(node, ast.FunctionDef) and node.name in backend_private:
                    problems.append(f"{path.name}:{node.lineno} overrides {node.name}")
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in backend_private
                ):
                    problems.append(f"{path.name}:{node.lineno} uses self.{node.attr}")
    assert problems == []


@pytest.mark.rule("ARCH-3")
def test_backends_know_nothing_of_the_catalogue() -> None:
    """No backend module imports the catalogue or names it: nothing in impl/ exists for it."""
    assert offenders("impl", ("scopecheck.planted",), surface=False) == []
    mentions = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "impl").rglob("*.py"))
        if any(word in path.read_text().lower() for word in ("planted", "mutant", "catalogue"))
    ]
    assert mentions == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in (*MAPPED, "examples"):
        parts.insert(0, "scopecheck")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def private_reads(path: Path, text: str | None = None) -> list[str]:
    """``from M import _x`` and ``M._x`` in ``path``, for ``M`` a project module other than the
    file's own: what one module reads of another's private names."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    tree = ast.parse(path.read_text() if text is None else text)
    modules: dict[str, str] = {}  # local name -> project module it is bound to
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if not _is(base, SURFACE):
                continue
            for alias in node.names:
                if _private(alias.name) and base != here:
                    found.append(f"imports {base}.{alias.name}")
                elif _is_module(f"{base}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is(alias.name, SURFACE) and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain: list[str] = []
            base_node: ast.expr = node.value
            while isinstance(base_node, ast.Attribute):
                chain.insert(0, base_node.attr)
                base_node = base_node.value
            if isinstance(base_node, ast.Name) and base_node.id in modules:
                target = ".".join([modules[base_node.id], *chain])
                if target != here:
                    found.append(f"reads {target}.{node.attr}")
    return [f"{path.relative_to(ROOT)} {what}" for what in found]


@pytest.mark.rule("ARCH-3")
def test_no_module_reads_another_modules_private_name() -> None:
    """A name shared between modules is public where it lives (or in a small shared module):
    no module of the package -- models/, impl/, crashsim/, examples/ or scopecheck/ -- and no
    test imports another module's ``_name`` (``from M import _name``) or reads it
    (``M._name``).  Backend internals stay free to change, no tool or planted bug reaches past
    a public seam, and a test checks what a caller can reach."""
    found = {
        read
        for folder in (*MAPPED, "examples", "scopecheck", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for read in private_reads(path)
    }
    assert sorted(found) == []


def test_private_reads_sees_both_forms() -> None:
    """The check above finds an import of a private name and a private attribute of a module,
    and lets a module use its own."""
    source = (
        "from scopecheck.crashsim import generic_sweep as gs\n"
        "from scopecheck.crashsim.fs_session import _hidden\n"
        "from scopecheck.crashsim.generic_faults import _own\n"
        "gs._private_thing\n"
    )
    assert private_reads(ROOT / "crashsim" / "generic_faults.py", source) == [
        "crashsim/generic_faults.py imports scopecheck.crashsim.fs_session._hidden",
        "crashsim/generic_faults.py reads scopecheck.crashsim.generic_sweep._private_thing",
    ]
