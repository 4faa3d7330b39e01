"""Process-crash sweep of a JSONL fork (FORK-17).

The fork runs over a filesystem that crashes before the k-th mutating operation (an append may
land half its bytes first), for every k.  After each crash a fresh repository over the same
directory must see: the source byte-identical; the destination either absent or complete (equal
to the destination of an uncrashed fork); stray temp files invisible to ``list()``; and a retried
fork succeeding with the same result.  Same crash model as tests/jsonl/test_crash_sweep.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from tests.fork.test_fork_backends import _with_ephemeral
from tests.jsonl.test_crash_sweep import CrashAt, CrashingFs, SimulatedCrash

CLOCK = lambda: 1_750_000_000_000  # noqa: E731


def _build(root: Path) -> None:
    repo = JsonlRepository(str(root), clock=CLOCK, cwd="/")
    storage = repo.create("src")
    _with_ephemeral(storage)
    repo.close()


def _snapshot_of(root: Path, dest: str) -> Any:
    repo = JsonlRepository(str(root), clock=CLOCK, cwd="/")
    try:
        handle = repo.open(dest)
        snap = handle.snapshot()
        handle.close()
        return snap, repo.list()
    finally:
        repo.close()


@pytest.mark.rule("FORK-17", "FORK-14")
@pytest.mark.parametrize(
    "options", [TreeFork(id="d"), BranchFork("main", id="d")], ids=["tree", "branch"]
)
def test_jsonl_fork_crash_sweep(tmp_path: Path, options: ForkOptions) -> None:
    template = tmp_path / "template"
    _build(template)
    source_bytes = (template / "src.jsonl").read_bytes()
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    counter = CrashAt(10**9, False)
    repo = JsonlRepository(
        str(reference), CrashingFs(OsFileSystem(sync=False), counter), CLOCK, cwd="/"
    )
    setup = counter.count  # the repository constructor's own operations
    repo.fork("src", options)
    repo.close()
    total = counter.count - setup
    expected, _ = _snapshot_of(reference, "d")
    states = {"absent": 0, "complete": 0}
    for target in range(1, total + 1):
        for torn in (False, True):
            root = tmp_path / f"{target}-{torn}"
            shutil.copytree(template, root)
            crashing = JsonlRepository(
                str(root),
                CrashingFs(OsFileSystem(sync=False), CrashAt(setup + target, torn)),
                CLOCK,
                cwd="/",
            )
            with pytest.raises(SimulatedCrash):
                crashing.fork("src", options)
            assert (root / "src.jsonl").read_bytes() == source_bytes, (target, torn)
            fresh = JsonlRepository(str(root), clock=CLOCK, cwd="/")
            listed = fresh.list()
            assert set(listed) <= {"src", "d"}, listed
            if "d" in listed:
                states["complete"] += 1
                got, _ = _snapshot_of(root, "d")
                assert got == expected, (target, torn)
            else:
                states["absent"] += 1
                fresh.fork("src", options)  # a retry over leftovers succeeds
                got, _ = _snapshot_of(root, "d")
                assert got == expected, (target, torn)
            fresh.close()
            assert (root / "src.jsonl").read_bytes() == source_bytes
            shutil.rmtree(root)
    print(f"fork crash states ({options.scope}): {total} points x 2, {states}")
    assert states["absent"] > 0 and states["complete"] > 0, states
