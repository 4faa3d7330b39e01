"""One home and one name for every module (INSTALL-1): the top-level folders (``models/``,
``impl/``, ``crashsim/``, ``examples/``, ``spec/``) install as ``scopecheck.<folder>`` through
pyproject's package-dir, with no link anywhere in the repository, and the editable install,
mypy, the sdist and the wheel all see each file once, under its ``scopecheck.`` name
(docs/contributing.md, "Layout and imports")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
#: Top-level folder -> the package it installs as.
MAPPED = {folder: name for name, folder in SETUPTOOLS["package-dir"].items()}
#: The folders whose Python files mypy checks (spec/ holds none).
CODE = ("scopecheck", "models", "impl", "crashsim", "examples")
REINSTALL = (
    'install the checkout with `pip install -e ".[test]" --config-settings editable_mode=strict`, '
    "and again after adding, moving or deleting a file in a mapped folder (docs/contributing.md)"
)


def tracked(*folders: str) -> list[str]:
    """The files git tracks under ``folders`` (repository-relative, '/'-separated)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *folders],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return sorted(name for name in out.decode().split("\0") if name)


def module_name(path: str) -> str:
    """The import name of a tracked file: ``models/scope.py`` is ``scopecheck.models.scope``."""
    folder, _, rest = path.partition("/")
    parts = [MAPPED.get(folder, folder), *rest.removesuffix(".py").split("/")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.mark.rule("INSTALL-1")
def test_no_file_in_the_repository_is_a_symlink() -> None:
    """A checkout without symlink support (Windows without core.symlinks) is the same tree,
    and no tool that does not follow links sees another one."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    links = [entry.split("\t", 1)[1] for entry in out.split("\0") if entry.startswith("120000 ")]
    assert links == []


@pytest.mark.rule("INSTALL-1")
def test_the_package_list_is_every_folder_that_holds_python() -> None:
    """The package list is explicit (find cannot rename a folder): every folder holding a
    tracked Python file is listed, and every listed package is a folder that exists."""
    holding = {module_name(path).rpartition(".")[0] for path in tracked(*CODE)
               if path.endswith(".py") and not path.endswith("/__init__.py")}  # fmt: skip
    holding |= {module_name(p) for p in tracked(*CODE) if p.endswith("/__init__.py")}
    listed = set(SETUPTOOLS["packages"])
    assert sorted(holding - listed) == [], "add these to [tool.setuptools] packages"
    mapped_root = {name: ROOT / folder for folder, name in MAPPED.items()}
    for package in sorted(listed):
        parent = max((n for n in mapped_root if package == n or package.startswith(n + ".")),
                     key=len, default=None)  # fmt: skip
        base = mapped_root[parent] if parent else ROOT / "scopecheck"
        rest = package.removeprefix(parent or "scopecheck").strip(".")
        assert (base / rest.replace(".", "/")).is_dir(), package


#: A file of each mapped package, to find through the import system.
PROBE = {"scopecheck.spec": "rules/core.toml"}


@pytest.mark.rule("INSTALL-1")
@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_the_editable_install_imports_the_checkout_folders(where: str, tmp_path: Path) -> None:
    """``scopecheck.models.__file__`` & co. resolve into the checkout's own folders, from the
    checkout (where ``scopecheck/`` itself is on sys.path) and from any other directory."""
    probes = {name: PROBE.get(name, "__init__.py") for name in MAPPED.values()}
    code = (
        "import importlib, json, os, sys\n"
        "found = {}\n"
        "for name, probe in json.loads(sys.argv[1]).items():\n"
        "    paths = importlib.import_module(name).__path__\n"
        "    found[name] = [os.path.join(p, probe) for p in paths\n"
        "                   if os.path.exists(os.path.join(p, probe))][0]\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(probes)],
        cwd=ROOT if where == "checkout" else tmp_path,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for folder, name in MAPPED.items():
        assert Path(found[name]).resolve() == ROOT / folder / probes[name], (name, found[name])


@pytest.mark.rule("INSTALL-1")
def test_mypy_checks_each_module_once_under_its_installed_name() -> None:
    """mypy, run from the checkout with the project's configuration, finds every tracked
    Python file of the package exactly once, under its ``scopecheck.`` name: no file is a
    second module (``models.reference`` beside ``scopecheck.models.reference``) and none is
    missed.  Only mypy's source discovery runs here; CI type-checks with ``mypy`` itself."""
    code = (
        "import json, os\n"
        "from mypy.main import process_options\n"
        "sources, _ = process_options([])\n"
        "print(json.dumps([[s.module, os.path.realpath(s.path)] for s in sources if s.path]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sources = [(module, Path(path)) for module, path in json.loads(done.stdout)]
    files = [path for _, path in sources if path.suffix == ".py"]
    assert len(files) == len(set(files)), "a file is checked under two module names"
    checked = {str(path.relative_to(ROOT)): module for module, path in sources
               if path.suffix == ".py"}  # fmt: skip
    expected = {path: module_name(path) for path in tracked(*CODE) if path.endswith(".py")}
    assert sorted(set(expected) - set(checked)) == [], REINSTALL
    assert sorted(set(checked) - set(expected)) == [], REINSTALL
    assert checked == expected


@pytest.mark.rule("INSTALL-1")
def test_the_sdist_holds_no_links_and_the_wheel_built_from_it_holds_every_folder(
    sdist: Path, wheel: Path
) -> None:
    """The wheel is built from the sdist (``conftest.dists``), so what it holds the sdist
    carried; every tracked file of a mapped folder is in it under ``scopecheck/<folder>/``,
    except the spec's mutation triage (docs/mutation.md), which is not package data."""
    with tarfile.open(sdist) as archive:
        assert [m.name for m in archive.getmembers() if m.issym() or m.islnk()] == []
    with zipfile.ZipFile(wheel) as archive:
        inside = set(archive.namelist())
    expected = {f"scopecheck/{path}" for path in tracked(*MAPPED)
                if not path.startswith("spec/mutation/")}  # fmt: skip
    assert sorted(expected - inside) == []


@pytest.mark.rule("INSTALL-1")
def test_every_editable_install_the_project_runs_or_documents_is_strict() -> None:
    """The README's quick start, the docs and CI install the checkout the one way that gives
    mypy and editors the mapped folders (docs/contributing.md)."""
    pages = [ROOT / "README.md", ROOT / ".ci" / "run", *sorted((ROOT / "docs").glob("*.md"))]
    installs = [
        (page.name, line.strip())
        for page in pages
        for line in page.read_text(encoding="utf-8").splitlines()
        if "pip install" in line and " -e " in line
    ]
    assert len(installs) >= 3
    assert [i for i in installs if "--config-settings editable_mode=strict" not in i[1]] == []
