"""A commit whose outcome the backend cannot know (CRASH-FS-14): an append-then-fsync store
whose fsync fails keeps the record it wrote, and says ``outcome_unknown``.  Small subclasses
of ``examples/good_file_backend.py`` at its ``persist`` seam, what a user would write:

* keeps the line and says ``outcome_unknown``, refusing commits until reopened: passes every
  fault run (CRASH-FS-9's strict "never visible" does not apply to it);
* the same, saying ``io_error``: the failed commit reappears (CRASH-FS-9, severity
  ``reappears``), the old verdict of every careful append-then-fsync store;
* says ``outcome_unknown`` but goes on acknowledging commits on the same handle: CRASH-FS-14;
* says ``outcome_unknown`` but a reopen in the same process reads its memory, without the
  failed commit, while the next process reads the file, with it: two readers disagree --
  CRASH-FS-14;
* says ``outcome_unknown`` and keeps the failed transaction's first write alone: a reopen
  reads a part of it -- CRASH-FS-14, a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from scopecheck.crashsim.generic_faults import fault_runs
from scopecheck.crashsim.generic_sweep import trace, workload
from scopecheck.examples import good_file_backend as good
from scopecheck.models.errors import StorageIOError
from scopecheck.run.severity import severity_of

Factory = Callable[..., Any]


class RereadingRepository(good.FileRepository):
    """Reads the Session's file on every open, so a reader after a commit of unknown outcome
    sees what the file holds, as the next process will (the example keeps its first read in
    memory, which is right only when a failed commit is never in the file)."""

    def open(self, session_id: str) -> Any:
        if session_id in self.sessions and session_id not in self.open_ids:
            self.sessions[session_id] = None
        return super().open(session_id)


def _with_storage(storage: type[Any], base: type[Any] = RereadingRepository) -> Factory:
    repository = type(f"{storage.__name__}Repository", (base,),
                      {"storage_class": storage})  # fmt: skip

    def make(clock: Any, *, fs: Any, root: str) -> Any:
        return repository(clock, fs, root)

    return make


class KeepsAndSaysUnknown(good.FileStorage):
    """After a failed fsync the line stays in the file (it cannot be taken back: the OS may
    write it or not); the commit fails with ``outcome_unknown`` and the handle refuses."""

    code = "outcome_unknown"
    refuses = True

    def persist(self, line: bytes) -> None:
        try:
            self.fs.append(self.handle, line)
        except StorageIOError:
            self.cut_back("an append failed and could not be cut back")
            raise
        try:
            self.fs.fsync(self.handle)
        except StorageIOError as exc:
            self.size += len(line)  # the line is in the file, whatever becomes of it
            if self.refuses:
                self.unusable = "an fsync failed: the last commit may or may not be kept"
            raise StorageIOError(self.code, f"fsync failed, outcome unknown: {exc}") from exc
        self.size += len(line)


class KeepsAndSaysIoError(KeepsAndSaysUnknown):
    code = "io_error"


class KeepsAndGoesOn(KeepsAndSaysUnknown):
    refuses = False


class KeepsPartAndSaysUnknown(KeepsAndSaysUnknown):
    """Says ``outcome_unknown`` but what stays in the file is the failed transaction's first
    write alone, as a whole line: no reopen may read a part of a transaction."""

    def persist(self, line: bytes) -> None:
        try:
            super().persist(line)
        except StorageIOError as exc:
            record = orjson.loads(line)
            if exc.code == "outcome_unknown" and len(record["w"]) > 1:
                part = orjson.dumps({"t": record["t"], "w": record["w"][:1]}) + b"\n"
                self.fs.truncate(self.handle, self.size - len(line))
                self.fs.append(self.handle, part)
                self.size += len(part) - len(line)
            raise


def _failures(
    storage: type[Any], seeds: range = range(3), base: type[Any] = RereadingRepository
) -> list[Any]:
    factory = _with_storage(storage, base)
    found = []
    for seed in seeds:
        report = fault_runs(factory, trace(factory, workload(seed, 6)), max_failures=3)
        found += report.failures
    return found


@pytest.mark.rule("CRASH-FS-14", "CRASH-FS-9")
def test_a_store_that_keeps_a_failed_commit_and_says_outcome_unknown_passes() -> None:
    assert _failures(KeepsAndSaysUnknown) == []


@pytest.mark.rule("CRASH-FS-9", "CHECK-10")
def test_the_same_store_saying_io_error_fails_as_a_failed_commit_that_reappears() -> None:
    found = _failures(KeepsAndSaysIoError)
    assert found and {f.rule for f in found} == {"CRASH-FS-9"}
    assert {severity_of(f.rule, f.kind) for f in found} == {"reappears"}


@pytest.mark.rule("CRASH-FS-14")
def test_acknowledging_on_the_handle_after_outcome_unknown_fails() -> None:
    found = _failures(KeepsAndGoesOn)
    assert "CRASH-FS-14" in {f.rule for f in found}
    assert any("must refuse commits until the Session is opened again" in f.problem
               for f in found)  # fmt: skip


@pytest.mark.rule("CRASH-FS-14")
def test_readers_that_disagree_after_outcome_unknown_fail() -> None:
    found = _failures(KeepsAndSaysUnknown, base=good.FileRepository)
    assert found and {f.rule for f in found} == {"CRASH-FS-14"}
    assert any("after the restart" in f.problem for f in found)


@pytest.mark.rule("CRASH-FS-14", "CHECK-10")
def test_a_part_of_a_commit_of_unknown_outcome_fails_as_a_loss() -> None:
    found = _failures(KeepsPartAndSaysUnknown)
    assert found and {f.rule for f in found} <= {"CRASH-FS-14"}
    assert {severity_of(f.rule, f.kind) for f in found} == {"lost"}
