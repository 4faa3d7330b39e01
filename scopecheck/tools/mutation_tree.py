"""The tree mutmut runs in, and mutmut run there (docs/mutation.md).

mutmut 3 names a mutant by its file's path and imports it from its copy in ``mutants/``, so it
needs ``models/`` as a folder ``models`` inside a folder ``scopecheck`` -- the installed layout,
which the repository does not have: the folders stay at the top and install through pyproject's
package-dir (docs/contributing.md).  This module assembles that layout as real copies in a
scratch tree (default ``.scopecheck/mutation/``, ignored by git) and runs mutmut there:

    <tree>/pyproject.toml          the checkout's, so [tool.mutmut] and pytest's settings apply
    <tree>/scopecheck/             the checkout's scopecheck/, plus for every package-dir entry
    <tree>/scopecheck/models/      ... a copy of models/, impl/, crashsim/, spec/, examples/
    <tree>/spec/, tests/, ...      the rest of [tool.mutmut] also_copy, under their own names
    <tree>/mutants/                mutmut's working copy and results, never touched here

Assembling again updates the tree in place: a file is copied only when its size or time
changed, with its time kept (mutmut regenerates the mutants of a file whose source is newer
than its mutants, and keeps the verdicts of every function whose text is unchanged), and a file
gone from the checkout goes from the tree.  Nothing in the tree is a link.

Usage (from the repository root)::

    python -m scopecheck.tools.mutation_tree                      # assemble only, print the tree
    python -m scopecheck.tools.mutation_tree run --max-children 2 # assemble, then `mutmut run ...`
    python -m scopecheck.tools.mutation_tree run 'scopecheck.models.scope.*'   # a subset by name
    python -m scopecheck.tools.mutation_tree results              # any other mutmut command, as is
    python -m scopecheck.tools.mutation_stats                     # the score, read from the tree

Arguments after the options go to mutmut unchanged; only ``run`` assembles the tree first.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

PACKAGE = "scopecheck"
TREE = Path(".scopecheck/mutation")
# Never copied, and left alone in the tree (caches of the tools that run there).
_IGNORED = frozenset({"__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def _read_pyproject(checkout: Path) -> dict[str, object]:
    path = checkout / "pyproject.toml"
    if not path.is_file():
        raise SystemExit(
            f"{path} not found: run this from the repository root (or pass --checkout)"
        )
    return tomllib.loads(path.read_text("utf-8"))


def _table(data: object, *keys: str) -> dict[str, object]:
    for key in keys:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    return data if isinstance(data, dict) else {}


def layout(checkout: Path) -> dict[Path, Path]:
    """Each path of the tree (relative) -> the checkout's file or folder it is a copy of.

    The mapped folders come from ``[tool.setuptools.package-dir]`` (``scopecheck.models =
    "models"`` -> ``scopecheck/models``), the rest from ``[tool.mutmut] also_copy``.
    """
    pyproject = _read_pyproject(checkout)
    paths: dict[Path, Path] = {
        Path("pyproject.toml"): checkout / "pyproject.toml",
        Path(PACKAGE): checkout / PACKAGE,
    }
    package_dir = _table(pyproject, "tool", "setuptools", "package-dir")
    for name, folder in package_dir.items():
        if name.startswith(PACKAGE + "."):
            paths[Path(*name.split("."))] = checkout / str(folder)
    also_copy = _table(pyproject, "tool", "mutmut").get("also_copy", [])
    for entry in also_copy if isinstance(also_copy, list) else []:
        relative = Path(str(entry))
        if relative.parts and relative.parts[0] != PACKAGE and (checkout / relative).exists():
            paths[relative] = checkout / relative
    return paths


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _copy_file(source: Path, target: Path) -> None:
    if target.is_symlink() or target.is_dir():
        _remove(target)
    elif target.exists():
        have, want = target.stat(), source.stat()
        if have.st_size == want.st_size and have.st_mtime_ns == want.st_mtime_ns:
            return
    shutil.copy2(source, target)  # follows a link: the tree gets the file; keeps the time


def _mirror(source: Path, target: Path, keep: Iterable[str] = ()) -> None:
    """Make ``target`` a copy of ``source``; names in ``keep`` (other copies nested here) stay."""
    if not source.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy_file(source, target)
        return
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        _remove(target)
    target.mkdir(parents=True, exist_ok=True)
    wanted = set(keep)
    for entry in sorted(source.iterdir()):
        if entry.name in _IGNORED or entry.suffix == ".pyc":
            continue
        wanted.add(entry.name)
        _mirror(entry, target / entry.name)
    for entry in list(target.iterdir()):
        if entry.name not in wanted and entry.name not in _IGNORED:
            _remove(entry)


def assemble(checkout: Path = Path("."), tree: Path = TREE) -> Path:
    """Build or update the tree for ``checkout``; returns the tree."""
    paths = layout(checkout)
    for relative, source in sorted(paths.items()):
        # A copy nested in this one (scopecheck/models in scopecheck/) is not an extra file.
        nested = [p.name for p in paths if p.parent == relative]
        _mirror(source, tree / relative, keep=nested)
    return tree


def mutmut_command(args: Sequence[str]) -> list[str]:
    """The command line of ``mutmut ARGS`` with this interpreter (mutmut wants its own
    ``mutmut.__main__`` imported, not run as ``python -m mutmut``)."""
    script = "import sys; from mutmut.__main__ import cli; sys.exit(cli(prog_name='mutmut'))"
    return [sys.executable, "-c", script, *args]


def run_mutmut(args: Sequence[str], tree: Path = TREE) -> int:
    if not (tree / "pyproject.toml").is_file():
        print(
            f"no mutation tree at {tree}: run `python -m scopecheck.tools.mutation_tree run` first"
        )
        return 1
    if importlib.util.find_spec("mutmut") is None:
        print("mutmut is not installed: pip install -e '.[mutation]' (docs/mutation.md)")
        return 1
    return subprocess.run(mutmut_command(args), cwd=tree, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scopecheck.tools.mutation_tree",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tree", type=Path, default=TREE, help=f"default {TREE}")
    parser.add_argument("--checkout", type=Path, default=Path("."), help="default: here")
    parser.add_argument("mutmut_args", nargs=argparse.REMAINDER, help="a mutmut command")
    args = parser.parse_args(argv)
    mutmut_args: list[str] = args.mutmut_args
    if not mutmut_args or mutmut_args[0] == "run":
        assemble(args.checkout, args.tree)
        print(f"mutation tree: {args.tree}")
    if not mutmut_args:
        return 0
    return run_mutmut(mutmut_args, args.tree)


if __name__ == "__main__":
    raise SystemExit(main())
