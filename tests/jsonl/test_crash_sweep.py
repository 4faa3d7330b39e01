"""A process-crash sweep over every mutating file operation of a JSONL workload.

This is not the crash simulator (``crashsim/jsonl_sweep.py`` models lost unsynced data on
pyfakefs and runs this same workload as ``process-crash-mix``); it models a
*process* crash on a real directory: everything written before the crash point is on disk, the
operation at the crash point does not happen, or — for an append — only a prefix of its bytes
does.  After each crash a fresh repository opens the directory and the recovered state must be
the Memory backend's state after the acknowledged commits, or after those plus the one in
flight; never anything else (BRIEF "Crash points are enumerated").  A further commit and reopen
must work.  The two crash-only planted bugs fail this sweep.  Real fsyncs are skipped (a process
crash loses nothing that was written), but every fsync call is still a crash point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scopecheck.crashsim.jsonl_workloads import BUNDLED
from scopecheck.crashsim.tracing_fs import MUTATING_OPS, TracingFileSystem
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.memory import MemoryRepository
from scopecheck.models.addresses import value
from scopecheck.models.records import Snapshot
from scopecheck.models.writes import set_value

#: Shared with the pyfakefs crash simulator's bundled workload ``process-crash-mix``.
WORKLOAD: list[list[Any]] = [
    list(step.writes) for step in BUNDLED["process-crash-mix"]().steps if step.op == "commit"
]

MUTATING = MUTATING_OPS


class SimulatedCrash(BaseException):
    """The process dies here (a BaseException, so no ``except Exception`` swallows it)."""


class CrashAt:
    """Crash at the ``target``-th mutating operation; ``torn`` makes an append write half of
    its bytes first. The process stays dead: every operation after the crash point raises
    too, so no ``except``/``finally`` cleanup (e.g. ``publish`` removing its temp file) can
    touch the disk after the crash, which a real crash would never allow."""

    def __init__(self, target: int, torn: bool) -> None:
        self.target = target
        self.torn = torn
        self.count = 0
        self.dead = False

    def __call__(self, op: str, path: str) -> Any:
        if self.dead:
            raise SimulatedCrash(f"already crashed ({op} {path})")
        if op not in MUTATING:
            return None
        self.count += 1
        if self.count == self.target:
            self.dead = True
            if op == "append" and self.torn:
                return (_TornThenCrash(), None)
            raise SimulatedCrash(f"crash before {op} {path}")
        return None


class _TornThenCrash(OSError):
    pass


class CrashingFs(TracingFileSystem):
    """Turns the torn-append marker into a partial write followed by the crash."""

    def append(self, handle: Any, data: bytes) -> None:
        partial = self._maybe_fail("append", handle.path)
        if partial is not None:
            self.inner.append(handle, data[: max(1, len(data) // 2)])
            raise SimulatedCrash(f"crash in the middle of append {handle.path}")
        self.inner.append(handle, data)


def expected_states() -> list[Snapshot]:
    repo = MemoryRepository(lambda: 1000)
    storage = repo.create("s")
    states = [storage.snapshot()]
    for writes in WORKLOAD:
        storage.commit(writes)
        states.append(storage.snapshot())
    return states


def count_operations(tmp: Path) -> int:
    counter = CrashAt(10**9, False)
    repo = JsonlRepository(
        str(tmp / "count"), CrashingFs(OsFileSystem(sync=False), counter), lambda: 1000, cwd="/t"
    )
    storage = repo.create("s")
    for writes in WORKLOAD:
        storage.commit(writes)
    return counter.count


def sweep(tmp: Path, repo_class: type[JsonlRepository]) -> list[str]:
    """Run every crash point; returns a description of each violation."""
    states = expected_states()
    failures = []
    total = count_operations(tmp)
    for target in range(1, total + 1):
        for torn in (False, True):
            root = str(tmp / f"{target}-{torn}")
            acknowledged = 0
            created = False
            try:
                repo = repo_class(
                    root,
                    CrashingFs(OsFileSystem(sync=False), CrashAt(target, torn)),
                    lambda: 1000,
                    cwd="/t",
                )
                storage = repo.create("s")
                created = True
                for writes in WORKLOAD:
                    storage.commit(writes)
                    acknowledged += 1
            except SimulatedCrash:
                pass
            else:
                continue  # the crash point was not reached (torn variant of a non-append)
            survivor = repo_class(root, OsFileSystem(), lambda: 1000, cwd="/t")
            if "s" not in survivor.list():
                if created:
                    failures.append(f"op {target} torn={torn}: session vanished")
                continue
            try:
                recovered = survivor.open("s")
                got = recovered.snapshot()
                allowed = states[acknowledged : acknowledged + 2]
                if got not in allowed:
                    failures.append(
                        f"op {target} torn={torn}: state after {acknowledged} acked commits "
                        "is not an allowed prefix"
                    )
                    continue
                recovered.commit([set_value(value("after", "crash"), True)])
                after = recovered.snapshot()
                recovered.close()
                again = repo_class(root, OsFileSystem(), lambda: 1000, cwd="/t").open("s")
                if again.snapshot() != after:
                    failures.append(f"op {target} torn={torn}: commit after recovery was lost")
            except Exception as exc:
                failures.append(f"op {target} torn={torn}: {type(exc).__name__}: {exc}")
    return failures


@pytest.mark.rule("JSONL-9", "JSONL-10", "JSONL-11", "JSONL-12", "JSONL-18")
def test_every_process_crash_point_recovers_an_acknowledged_prefix(tmp_path: Path) -> None:
    """At every mutating operation (and mid-append), recovery yields an allowed prefix."""
    assert sweep(tmp_path, JsonlRepository) == []


# The crash-only planted bugs are caught by the crash simulator (tests/test_mutants.py runs
# their Mutant.check); this real-directory sweep stays as a check on a real filesystem.
