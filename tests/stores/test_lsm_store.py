"""SQLite's LSM engine writes its database file through a shared writable mapping (mmap on by
default): crash images built from that file, whose contents the trace cannot see, are never
judged as the store's failure (CRASH-SYS-17) -- the same store with ``mmap=0``, every byte of
it traced, gets the failures its source predicts, and the mapped one gets no other.  Long:
each runs the store's fixed crash exploration, about a minute and a half."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from scopecheck.crashsim.explore import Exploration
from scopecheck.process.syscall_crash import SyscallSource

ROOT = Path(__file__).resolve().parents[2]
STORE = "scopecheck.examples.stores.lsm_store"


def _explore(factory: str) -> tuple[SyscallSource, Exploration]:
    spec = f"{STORE}:{factory}"
    source = SyscallSource(spec, (sys.executable, "-m", "scopecheck", "serve", spec), str(ROOT))
    return source, source.explore(math.inf, 1)


@pytest.mark.long
@pytest.mark.rule("CRASH-SYS-17", "CRASH-SYS-8")
def test_images_built_from_the_mapped_database_are_not_judged() -> None:
    """A process crash built from a ``db`` the trace could not see would lose acknowledged
    steps (CRASH-FS-2) where a real kill at that call loses nothing: those crash points are
    judged on a kill run's disk, or counted as not judgeable, naming the file; the failures
    that remain are those of the traced setting."""
    source, found = _explore("make_backend")
    rules = {f.rule for f in found.failures}
    limits = found.findings.limits
    assert rules == {"CRASH-FS-6", "CRASH-FS-9"}, [str(f) for f in found.failures]
    assert source.kill_checks > 0
    assert any(t.startswith("not judgeable:") and "<root>/s.lsm/db" in t for t in limits), limits
    assert found.coverage.points_unjudged > 0


@pytest.mark.long
@pytest.mark.rule("CRASH-FS-6", "CRASH-FS-9")
def test_with_mmap_off_the_store_gets_the_failures_its_source_predicts() -> None:
    """``write_safety`` NORMAL syncs the log only at a checkpoint: a power loss loses
    acknowledged commits (CRASH-FS-6); a commit whose log write failed stays in the in-memory
    tree, published by ``lsmTreeEndTransaction`` whatever the outcome, and comes back
    (CRASH-FS-9).  Every crash point is judged."""
    _, found = _explore("make_nommap_backend")
    rules = {f.rule for f in found.failures}
    assert rules == {"CRASH-FS-6", "CRASH-FS-9"}, [str(f) for f in found.failures]
    unjudged = [t for t in found.findings.limits if t.startswith("not judgeable:")]
    assert not [t for t in unjudged if "s.lsm/db " in t or "s.lsm/db," in t], unjudged
