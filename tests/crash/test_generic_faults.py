"""Single I/O faults in the generic sweep (crashsim/generic_faults.py, rules CRASH-FS-9..11):
no false alarm on backends that handle them (our JSONL backend, the file-backed example), and
planted bugs — small subclasses of ``examples/good_file_backend.py``, what a user would get
wrong — each caught under its rule with a record ``scopecheck replay`` reruns.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import orjson
import pytest

from scopecheck.crashsim.faults import faults_for
from scopecheck.crashsim.generic_faults import fault_runs
from scopecheck.crashsim.generic_sweep import jsonl_factory, replay_record, sweep, trace, workload
from scopecheck.examples import good_file_backend as good
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import StorageIOError, usage

Factory = Callable[..., Any]
SEEDS = range(4)


def _factory(repository: type[Any]) -> Factory:
    def make(clock: Any, *, fs: Any, root: str) -> Any:
        return repository(clock, fs, root)

    return make


def _with_storage(storage: type[Any]) -> Factory:
    return _factory(type(f"{storage.__name__}Repository", (good.FileRepository,), {
        "storage_class": storage}))  # fmt: skip


LONG = os.environ.get("SCOPECHECK_LONG_CRASH") == "1"


@pytest.mark.rule("CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.skipif(not LONG, reason="long sweep: set SCOPECHECK_LONG_CRASH=1")
@pytest.mark.parametrize("seed", range(4, 12))
@pytest.mark.parametrize(
    "factory", [jsonl_factory, good.make_backend], ids=["jsonl", "good-file-example"]
)
def test_longer_workloads_pass_every_fault_run(factory: Factory, seed: int) -> None:
    """Twenty-transaction workloads (about 80-120 fault runs each, ~1 s)."""
    report = fault_runs(factory, trace(factory, workload(seed, 20)), max_failures=5)
    assert not report.failures, "\n".join(str(f) for f in report.failures)
    assert report.runs > 50


# -- planted bugs ------------------------------------------------------------------------------


class FsyncErrorIgnored(good.FileStorage):  # type: ignore[misc]
    """(a) Acknowledges a commit whose fsync failed: the line is only in the page cache."""

    def persist(self, line: bytes) -> None:
        try:
            self.fs.append(self.handle, line)
        except StorageIOError:
            self.cut_back("an append failed and could not be cut back")
            raise
        with contextlib.suppress(StorageIOError):
            self.fs.fsync(self.handle)  # "it was written, wasn't it?"
        self.size += len(line)


class PartialLineLeft(good.FileStorage):  # type: ignore[misc]
    """(b) Leaves the bytes of a failed append in the log: the next commit's line lands after
    them, and the log holds a line that is neither."""

    def persist(self, line: bytes) -> None:
        self.fs.append(self.handle, line)  # no cut back when this fails part-way
        try:
            self.fs.fsync(self.handle)
        except StorageIOError:
            self.cut_back("")
            self.unusable = "an fsync failed"
            raise
        self.size += len(line)


class DropsAfterFailure(good.FileStorage):  # type: ignore[misc]
    """(c) After a failed append it "reconnects" lazily and, meanwhile, acknowledges the next
    commit without writing it: the handle keeps accepting and silently drops one."""

    reconnecting = False

    def persist(self, line: bytes) -> None:
        if self.reconnecting:
            self.reconnecting = False
            return
        try:
            super().persist(line)
        except StorageIOError:
            self.reconnecting = True
            raise


class UncodedStartupError(good.FileRepository):  # type: ignore[misc]
    """Wraps any startup failure in its own exception type: no stable code to act on."""

    def __init__(self, clock: Any, fs: Any, root: str) -> None:
        try:
            super().__init__(clock, fs, root)
        except StorageIOError as exc:
            raise RuntimeError(f"cannot start: {exc}") from None


class DeleteIgnoresUnlinkError(good.FileRepository):  # type: ignore[misc]
    """Acknowledges a delete whose unlink failed: the Session comes back on the next start."""

    def delete(self, session_id: str) -> None:
        if check_session_id(session_id) in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        with contextlib.suppress(StorageIOError):
            self.fs.unlink(self.path(session_id))  # "it will be gone soon enough"
        del self.sessions[session_id]
        self.fs.fsync_dir(self.root)


PLANTED: list[tuple[str, Factory, str]] = [
    ("fsync-error-ignored", _with_storage(FsyncErrorIgnored), "CRASH-FS-9"),
    ("partial-line-left", _with_storage(PartialLineLeft), "CRASH-FS-10"),
    ("drops-after-failure", _with_storage(DropsAfterFailure), "CRASH-FS-10"),
    ("uncoded-startup-error", _factory(UncodedStartupError), "CRASH-FS-11"),
    ("delete-ignores-unlink-error", _factory(DeleteIgnoresUnlinkError), "CRASH-FS-11"),
]


def _fault_failures(factory: Factory, rule: str) -> tuple[int, Any, list[str]]:
    """The first fault failure under ``rule`` over the seeded workloads, and every rule seen."""
    seen: list[str] = []
    for seed in SEEDS:
        report = fault_runs(factory, trace(factory, workload(seed, 6)), max_failures=100)
        seen += [f.rule for f in report.failures]
        for found in report.failures:
            if found.rule == rule:
                return seed, found, seen
    return -1, None, seen


# -- no false alarms -----------------------------------------------------------------------------


@pytest.mark.rule("CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "factory", [jsonl_factory, good.make_backend], ids=["jsonl", "good-file-example"]
)
def test_backends_that_handle_io_errors_pass_every_fault_run(factory: Factory, seed: int) -> None:
    """Every mutating call of the workload (create, commits, restarts, delete, create again)
    fails once with each fault its kind can have; every run passes and every fault fired."""
    tr = trace(factory, workload(seed, 6))
    report = fault_runs(factory, tr, max_failures=5)
    assert not report.failures, "\n".join(str(f) for f in report.failures)
    assert report.runs == sum(len(faults_for(op.kind)) for op in tr.ops) > 0
    # every run reopened the disk it left at the fault (none was skipped), and power-loss
    # images wherever the persistence model gives one that differs from that disk
    assert report.images > report.runs


# -- planted bugs --------------------------------------------------------------------------------


@pytest.mark.rule("CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.parametrize(("name", "factory", "rule"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_io_error_bug_is_caught_under_its_rule_and_replays(
    name: str, factory: Factory, rule: str
) -> None:
    """Each planted bug passes every crash state of workload 0 (it is an I/O-error bug only) but
    a fault run catches it under its rule; its reproducer replays to the same failure."""
    _seed, found, seen = _fault_failures(factory, rule)
    assert found is not None, f"{name} escaped {rule}; rules seen: {sorted(set(seen))}"
    record = found.to_json()
    assert record["run"] == "fault" and record["variant"].startswith("fault:")
    still, text = replay_record(orjson.loads(orjson.dumps(record)), factory)
    assert still, text
    assert f"FAILED {rule}" in text


@pytest.mark.rule("CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.parametrize(("name", "factory", "rule"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_io_error_bugs_pass_the_crash_states(
    name: str, factory: Factory, rule: str
) -> None:
    """Without fault runs the crash sweep cannot see these bugs: the new rules add the teeth."""
    report = sweep(factory, workload(1, 6), seed=1, faults=False)
    assert not report.failures, str(report.failures[0])
    assert report.fault_runs == 0


@pytest.mark.rule("CRASH-FS-9")
def test_sweep_counts_fault_runs_and_reports_them_like_crash_states() -> None:
    report = sweep(_with_storage(FsyncErrorIgnored), workload(0, 6), seed=0, max_failures=1)
    (found,) = report.failures
    assert found.rule == "CRASH-FS-9" and found.run == "fault"
    assert report.fault_runs > 0 and report.states > 0
    assert "power loss" in found.problem and "fault at call" in str(found)


@pytest.mark.rule("CRASH-FS-10")
def test_replay_of_a_fault_reproducer_against_a_fixed_backend_says_so() -> None:
    _seed, found, _ = _fault_failures(_with_storage(PartialLineLeft), "CRASH-FS-10")
    record = found.to_json()
    still, text = replay_record(record, good.make_backend)
    assert not still, text
    assert "every check passes" in text


def partial_line_left(clock: Any, *, fs: Any, root: str) -> Any:
    """A module-level factory of the (b) bug, for a reproducer's ``spec``."""
    return _with_storage(PartialLineLeft)(clock, fs=fs, root=root)


@pytest.mark.rule("CRASH-FS-10")
def test_scopecheck_replay_reruns_a_fault_reproducer_by_its_spec() -> None:
    """``scopecheck replay`` of a saved fault record loads the backend from ``spec`` and shows
    the fault, the steps and the files at the end of the run."""
    from scopecheck.run.replay import replay_crash

    _seed, found, _ = _fault_failures(partial_line_left, "CRASH-FS-10")
    spec = f"{Path(__file__).resolve()}:partial_line_left"
    record = attrs.evolve(found, target={"spec": spec}).to_json()
    still, text = replay_crash(orjson.loads(orjson.dumps(record)))
    assert still, text
    assert "no crash" in text and "files on disk at the end of the run" in text
    assert "FAILED CRASH-FS-10" in text


class MarksFirstStart(good.FileRepository):  # type: ignore[misc]
    """Writes a marker on the first start in this process only: rerun, its calls differ."""

    started: ClassVar[list[bool]] = []

    def __init__(self, clock: Any, fs: Any, root: str) -> None:
        super().__init__(clock, fs, root)
        if not MarksFirstStart.started:
            MarksFirstStart.started.append(True)
            fs.write_file(f"{self.root}/started.marker", b"1")


@pytest.mark.rule("CRASH-FS-7")
def test_a_fault_that_never_fires_is_reported_not_counted_as_passing() -> None:
    MarksFirstStart.started.clear()
    factory = _factory(MarksFirstStart)
    tr = trace(factory, workload(0, 2))
    report = fault_runs(factory, tr, max_failures=100)
    unfired = [f for f in report.failures if "never fired" in f.problem]
    assert unfired and all(f.rule == "CRASH-FS-7" for f in unfired)
