"""The built wheel, installed apart from the checkout, for the tests that look at scopecheck the
way a user's venv holds it (INSTALL-1, INSTALL-3).

The sdist is built from a copy of the checkout (so the build leaves nothing in it) and the wheel
from that sdist, as CI's .ci/user-view does; the wheel is installed with
``pip install --no-deps --target``: its dependencies are this venv's, and a child process with
``PYTHONPATH`` set to the target imports scopecheck from the wheel, not from the editable
checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What a source copy leaves out: local state, caches, earlier builds and the npm packages of
#: the Node stores (examples/node/stores/*/node_modules).
SKIP = {".git", ".venv", "build", "dist", ".hypothesis", ".scopecheck", "__pycache__",
        "node_modules"}  # fmt: skip
#: Left out at the top only: mutmut's work folder (docs/mutation.md), not the planted-bug
#: catalogue scopecheck/planted/.
SKIP_TOP = {"mutants"}


def _source_copy(dest: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        top = SKIP_TOP if Path(directory) == ROOT else set()
        return {n for n in names if n in SKIP | top or n.endswith((".egg-info", "_cache"))}

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel built from it (``build`` without ``--sdist``/``--wheel``)."""
    base = tmp_path_factory.mktemp("wheel")
    source = _source_copy(base / "source")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(base)],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (sdist,) = base.glob("scopecheck-*.tar.gz")
    (built,) = base.glob("scopecheck-*.whl")
    return sdist, built


@pytest.fixture(scope="session")
def sdist(dists: tuple[Path, Path]) -> Path:
    return dists[0]


@pytest.fixture(scope="session")
def wheel(dists: tuple[Path, Path]) -> Path:
    return dists[1]


@pytest.fixture(scope="session")
def installed(wheel: Path) -> Path:
    """A directory holding the wheel's files as site-packages would."""
    target = wheel.parent / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    return target


@pytest.fixture
def wheel_env(installed: Path) -> Iterator[dict[str, str]]:
    """The environment of a child that imports scopecheck from the installed wheel."""
    yield {**os.environ, "PYTHONPATH": str(installed)}
