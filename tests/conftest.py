"""Test-wide setup: the Hypothesis profile comes from $SCOPECHECK_PROFILE (default ``dev``),
and tests marked ``long`` run only with ``SCOPECHECK_LONG=1``.

The default run stays near ten minutes on two cores by keeping one case of each kind of the
long parametrised catalogues (:func:`one_of_each`); ``SCOPECHECK_LONG=1 python -m pytest -n 2``
runs every planted bug and every variant."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import pytest

from scopecheck.run.profiles import load_profile

load_profile()

#: Whether the long tests run too.
LONG = os.environ.get("SCOPECHECK_LONG") == "1"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def go_backend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go example built into a temporary directory (standard library only: no network)."""
    go = shutil.which("go")
    assert go is not None, "the Go example needs go on PATH (.ci/run installs golang-go)"
    out = tmp_path_factory.mktemp("go-backend")
    env = {**os.environ, "GOCACHE": str(out / "cache"), "GOFLAGS": "", "GOPROXY": "off",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}  # fmt: skip
    binary = out / "backend"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=ROOT / "examples" / "go", env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return binary


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh venv without pip or anything else: what a store's maintainer has."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    probe = subprocess.run([python, "-c", "import scopecheck"], capture_output=True)
    assert probe.returncode != 0, "the bare venv can import scopecheck"
    return python


def one_of_each(
    items: Iterable[Any],
    kind: Callable[[Any], object],
    name: Callable[[Any], str],
    slow: Collection[str] = (),
) -> list[Any]:
    """``items`` as pytest parameters named by ``name``: the first of each ``kind`` in the
    default run, every other one marked ``long`` -- and so is an item named in ``slow`` (the
    measured slowest).  A slow item still stands for its kind: when it comes first, none of
    that kind is in the default run, so name in ``slow`` only kinds whose rule has other
    tests there."""
    seen: set[object] = set()
    params = []
    for item in items:
        key = kind(item)
        marks = (pytest.mark.long,) if key in seen or name(item) in slow else ()
        seen.add(key)
        params.append(pytest.param(item, id=name(item), marks=marks))
    return params


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if LONG:
        return
    skip = pytest.mark.skip(reason="long run only: set SCOPECHECK_LONG=1")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)
