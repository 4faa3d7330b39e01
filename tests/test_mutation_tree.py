"""The tree mutmut runs in (scopecheck/tools/mutation_tree.py, docs/mutation.md), assembled without
running mutmut: the installed layout as real files, updated in place."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from scopecheck.tools import mutation_tree as mt

ROOT = Path(__file__).resolve().parent.parent


def _files(folder: Path) -> list[Path]:
    return sorted(
        p.relative_to(folder)
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".hypothesis" not in p.parts
    )


def _links(tree: Path) -> list[Path]:
    return [
        Path(root, name)
        for root, dirs, files in os.walk(tree)
        for name in dirs + files
        if Path(root, name).is_symlink()
    ]


def test_the_tree_holds_the_installed_layout_as_real_files(tmp_path: Path) -> None:
    tree = mt.assemble(ROOT, tmp_path / "tree")
    config = tomllib.loads((tree / "pyproject.toml").read_text("utf-8"))
    assert _links(tree) == []
    # Every package-dir folder is a copy under its installed name, file by file.
    for name, folder in config["tool"]["setuptools"]["package-dir"].items():
        installed = tree / Path(*name.split("."))
        originals = _files(ROOT / folder)
        assert originals and originals == _files(installed)
        for relative in originals:
            assert (installed / relative).read_bytes() == (ROOT / folder / relative).read_bytes()
    assert (tree / "scopecheck/models/scope.py").is_file()
    assert (tree / "scopecheck/impl/jsonl/__init__.py").is_file()
    assert (tree / "scopecheck/tools/mutation_tree.py").is_file()
    # mutmut's settings name paths that exist in the tree, and nothing else is there.
    mutmut = config["tool"]["mutmut"]
    for path in mutmut["source_paths"] + mutmut["also_copy"]:
        assert (tree / path).exists(), path
    assert {p.name for p in tree.iterdir()} == {
        "pyproject.toml",
        "scopecheck",
        "spec",
        "examples",
        "tests",
    }
    assert not list(tree.rglob("__pycache__"))


def test_assembling_again_updates_in_place_and_keeps_mutmut_results(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scopecheck").mkdir(parents=True)
    (checkout / "models").mkdir()
    (checkout / "tests").mkdir()
    (checkout / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"scopecheck.models" = "models"\n'
        '[tool.mutmut]\nsource_paths = ["scopecheck/models/"]\nalso_copy = ["scopecheck/"]\n',
        "utf-8",
    )
    (checkout / "scopecheck/__init__.py").write_text("", "utf-8")
    (checkout / "models/a.py").write_text("A = 1\n", "utf-8")
    (checkout / "models/b.py").write_text("B = 1\n", "utf-8")
    tree = mt.assemble(checkout, tmp_path / "tree")
    assert (tree / "scopecheck/models/a.py").read_text("utf-8") == "A = 1\n"
    # The copy keeps the source's time: mutmut compares it with its mutants' files.
    assert (
        os.stat(tree / "scopecheck/models/a.py").st_mtime_ns
        == os.stat(checkout / "models/a.py").st_mtime_ns
    )
    (tree / "mutants").mkdir()
    (tree / "mutants/result").write_text("kept", "utf-8")
    (checkout / "models/a.py").write_text("A = 22\n", "utf-8")
    (checkout / "models/b.py").unlink()
    (checkout / "models/c.py").symlink_to(checkout / "scopecheck/__init__.py")
    mt.assemble(checkout, tree)
    assert (tree / "scopecheck/models/a.py").read_text("utf-8") == "A = 22\n"
    assert not (tree / "scopecheck/models/b.py").exists()
    assert (tree / "scopecheck/models/c.py").is_file() and _links(tree) == []
    assert (tree / "scopecheck/__init__.py").is_file()
    assert (tree / "mutants/result").read_text("utf-8") == "kept"
