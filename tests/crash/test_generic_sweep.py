"""The generic crash sweep (crashsim/generic_sweep.py, rules CRASH-FS-*): no false alarm on
backends known to recover (our JSONL backend, the file-backed example), and one planted bug per
rule, each caught under that rule with a replayable record.

The planted bugs are small subclasses of ``examples/good_file_backend.py`` (what a user would
get wrong) plus a JSONL mutant, run through the same factory interface users write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from scopecheck.backends.factory import takes_filesystem
from scopecheck.crashsim.fs_recorder import RecordingFs
from scopecheck.crashsim.generic_sweep import (
    ROOT,
    SESSION,
    Checker,
    jsonl_factory,
    replay_record,
    sweep,
    trace,
    workload,
)
from scopecheck.crashsim.jsonl_sweep import CrashState, allowed_for
from scopecheck.crashsim.jsonl_workloads import BUNDLED, NAMED
from scopecheck.crashsim.persistence import FileOp, Image, Volume
from scopecheck.crashsim.points import ProcessCrash
from scopecheck.examples import broken_file_backend
from scopecheck.examples import good_file_backend as good
from scopecheck.impl.validation import check_session_id
from scopecheck.models.errors import usage
from scopecheck.models.records import Snapshot
from scopecheck.planted.jsonl_crash import NEW as JSONL_CRASH_MUTANTS

Factory = Callable[..., Any]


def _factory(repository: type[Any]) -> Factory:
    def make(clock: Any, *, fs: Any, root: str) -> Any:
        return repository(clock, fs, root)

    return make


# -- planted bugs, one per rule ------------------------------------------------------------------


class TornTailIsFatal(good.FileRepository):  # type: ignore[misc]
    """Parses every line, the torn last one too: reopen raises after a torn append."""

    def load(self, session_id: str) -> dict[str, Any]:
        for line in self.fs.read_bytes(self.path(session_id)).splitlines():
            orjson.loads(line)
        return super().load(session_id)  # type: ignore[no-any-return]


class LinePerWrite(good.FileStorage):  # type: ignore[misc]
    """Logs each write of a transaction as its own line: a crash between them shows part of
    the transaction."""

    def persist(self, line: bytes) -> None:
        record = orjson.loads(line)
        for item in record["w"]:
            self.fs.append(self.handle, orjson.dumps({"t": record["t"], "w": [item]}) + b"\n")
            self.fs.fsync(self.handle)


class LinePerWriteRepository(good.FileRepository):  # type: ignore[misc]
    storage_class = LinePerWrite


class SeqFromLiveRecords(good.FileRepository):  # type: ignore[misc]
    """After cutting a torn tail, recomputes next_seq from the live records, forgetting the
    seqs of retired and deleted ones (SEQ-7)."""

    def load(self, session_id: str) -> dict[str, Any]:
        content = self.fs.read_bytes(self.path(session_id))
        data: dict[str, Any] = super().load(session_id)
        if not content.endswith(b"\n") and content:
            seqs = [e.seq for e in data["entries"].values()]
            seqs += [u.seq for u in data["usage"].values()]
            seqs += [v.seq for v in data["values"].values()]
            seqs += [el.seq for els in data["lists"].values() for el in els]
            data["next_seq"] = max(seqs, default=0) + 1
        return data


class TornTailIgnored(good.FileRepository):  # type: ignore[misc]
    """Skips the torn last line on open but leaves it on disk: the next append joins it."""

    def repair(self, path: str, complete: bytes) -> None:
        pass


class RepairInPlace(good.FileRepository):  # type: ignore[misc]
    """Cuts the torn tail by rewriting the whole log in place (no temp file, no rename): a
    crash during that rewrite loses acknowledged commits."""

    def repair(self, path: str, complete: bytes) -> None:
        self.fs.write_file(path, complete)
        self.fs.fsync_file(path)


class ForgetsOnRestart(good.FileRepository):  # type: ignore[misc]
    """Never reads the log back: a restart starts every Session empty."""

    def load(self, session_id: str) -> dict[str, Any]:
        from scopecheck.models.records import UsageTotals

        return {
            "next_seq": 1,
            "ids": set(),
            "entries": {},
            "usage": {},
            "values": {},
            "lists": {},
            "messages": 0,
            "totals": UsageTotals(),
        }


class DeleteNotDurable(good.FileRepository):  # type: ignore[misc]
    """Unlinks the log but never fsyncs the directory: after power loss a deleted Session can
    come back (or its old data show up in the Session created again)."""

    def delete(self, session_id: str) -> None:
        if check_session_id(session_id) in self.open_ids:
            raise usage("already_open", f"session {session_id!r} is open")
        self.fs.unlink(self.path(session_id))
        del self.sessions[session_id]


def _jsonl_ack_before_fsync(clock: Any, *, fs: Any, root: str) -> Any:
    _, repo = JSONL_CRASH_MUTANTS["jsonl-ack-before-fsync"]
    return repo(root, fs, clock, cwd="/crash")


PLANTED: list[tuple[str, Factory, str]] = [
    ("torn-tail-is-fatal", _factory(TornTailIsFatal), "CRASH-FS-1"),
    ("line-per-write", _factory(LinePerWriteRepository), "CRASH-FS-2"),
    ("seq-from-live-records", _factory(SeqFromLiveRecords), "CRASH-FS-3"),
    ("torn-tail-ignored", _factory(TornTailIgnored), "CRASH-FS-4"),
    ("repair-in-place", _factory(RepairInPlace), "CRASH-FS-5"),
    ("example-no-fsync", broken_file_backend.make_backend, "CRASH-FS-6"),
    ("jsonl-ack-before-fsync", _jsonl_ack_before_fsync, "CRASH-FS-6"),
    ("delete-not-durable", _factory(DeleteNotDurable), "CRASH-FS-6"),
    ("forgets-on-restart", _factory(ForgetsOnRestart), "CRASH-FS-7"),
]


def _first_failure(factory: Factory, rule: str | None = None, seeds: int = 4) -> Any:
    """The first failure (under ``rule``, if given) over the first ``seeds`` workloads."""
    for seed in range(seeds):
        report = sweep(
            factory, workload(seed, 6), seed=seed, max_failures=1 if rule is None else 50
        )
        for found in report.failures:
            if rule is None or found.rule == rule:
                return seed, found
    return None, None


# -- no false alarms -----------------------------------------------------------------------------


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-2", "CRASH-FS-3", "CRASH-FS-4", "CRASH-FS-5")
@pytest.mark.rule("CRASH-FS-6", "CRASH-FS-7", "CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(
    "factory", [jsonl_factory, good.make_backend], ids=["jsonl", "good-file-example"]
)
def test_backends_that_recover_pass_every_crash_state(factory: Factory, seed: int) -> None:
    """Seeded workloads (restarts, retirements, delete and create again) in unsynced mode,
    then once per single I/O fault."""
    report = sweep(factory, workload(seed, 8), seed=seed)
    assert not report.failures, str(report.failures[0])
    assert report.states > 100 and report.recovery_states > 0 and report.fault_runs > 0


@pytest.mark.rule("CRASH-FS-2", "CRASH-FS-5", "CRASH-FS-6", "CRASH-FS-9", "CRASH-FS-10")
@pytest.mark.parametrize("name", NAMED)
def test_jsonl_named_crash_workloads_pass_the_generic_sweep(name: str) -> None:
    """The JSONL sweep's crash bullets (sidecars, retirement, torn tails, repository delete)
    also pass the format-blind oracle, crash states and single I/O faults: the generic sweep
    agrees with the JSONL one (CRASH-1..12)."""
    report = sweep(jsonl_factory, BUNDLED[name](), seed=1)
    assert not report.failures, str(report.failures[0])
    assert report.states > report.ops > 0 and report.fault_runs > 0


@pytest.mark.rule("CRASH-FS-5")
def test_a_crashed_recovery_leaves_no_descriptor_open() -> None:
    """A crash kills the process and its descriptors with it: the checker crashes a recovery
    while it holds the log open (before the fsync of the cut of a torn line) and the reused
    sandbox keeps no open file from it; the next open still gives the uninterrupted state."""
    checker = Checker(good.make_backend, trace(good.make_backend, workload(1, 3)), "unsynced")
    image = Image({"s.log": b'{"t":1,"w":[]}\n{"t":2'})  # the log of Session "s", torn
    checker.box.load(image)
    recorder = RecordingFs(checker.box.fs)
    repo = good.make_backend(checker.clock, fs=recorder, root=ROOT)
    storage = repo.open(SESSION)
    want = storage.snapshot()
    storage.close()
    crash_at = [op.kind for op in recorder.ops].index("fsync")  # the cut's handle is open
    assert checker._crash_in_recovery(image, crash_at, 0, want) is None
    open_files = checker.box.fake.open_files
    assert not [fd for fd, files in enumerate(open_files) if fd > 2 and files]


@pytest.mark.rule("CRASH-FS-5")
def test_a_crash_that_leaves_a_disk_already_opened_is_not_opened_twice() -> None:
    """A crash of a recovery before its first write, or at an fsync, leaves a disk whose open
    was made already (the crash image, or what an earlier crash left): the checker answers it
    with that open, and every crash point gets the answer a fresh open gives."""
    opens = []

    def counting(clock: Any, *, fs: Any, root: str) -> Any:
        opens.append(root)
        return good.make_backend(clock, fs=fs, root=root)

    checker = Checker(counting, trace(good.make_backend, workload(1, 3)), "unsynced")
    image = Image({"s.log": b'{"t":1,"w":[]}\n{"t":2'})  # the log of Session "s", torn
    checker.box.load(image)
    recorder = RecordingFs(checker.box.fs)
    repo = good.make_backend(checker.clock, fs=recorder, root=ROOT)
    storage = repo.open(SESSION)
    want = storage.snapshot()
    storage.close()
    points = range(len(recorder.ops) + 1)
    fresh = [checker._crash_in_recovery(image, i, 0, want) for i in points]
    fresh_opens, opens[:] = len(opens), []
    reopened = [image]
    shared = [checker._crash_in_recovery(image, i, 0, want, reopened) for i in points]
    assert shared == fresh == [None] * len(fresh)
    assert len(opens) < fresh_opens
    assert len(reopened) == len({str(sorted(d.files.items())) for d in reopened})


@pytest.mark.rule("CRASH-FS-2", "CRASH-FS-5")
def test_an_image_checked_already_is_answered_by_that_check() -> None:
    """A crash point giving the files an earlier point gave, allowing the same states, gets
    the earlier check's answer without a reopen: the same states counted and the same repair
    offered for a power loss during it.  A check that failed is made again."""
    opens = []

    def counting(clock: Any, *, fs: Any, root: str) -> Any:
        opens.append(root)
        return good.make_backend(clock, fs=fs, root=root)

    tr = trace(good.make_backend, workload(1, 3))
    checker = Checker(counting, tr, "unsynced")
    volume = Volume(tr.initial)
    for op in tr.file_ops:
        volume.apply(op)
    final = volume.process_image()
    k, allowed = len(tr.file_ops), allowed_for(tr)(len(tr.file_ops))
    torn = attrs.evolve(final, files={**final.files, "s.log": final.files["s.log"] + b'{"t":9'})
    assert checker.check(CrashState(k, ProcessCrash(), torn, allowed)) is None
    states, made = checker.states, len(opens)
    assert checker.repaired is not None and states > 1  # the cut of the torn line, crashed
    again = attrs.evolve(torn, files=dict(torn.files))
    assert checker.check(CrashState(k, ProcessCrash(), again, allowed)) is None
    assert len(opens) == made and checker.states == 2 * states
    assert checker.repaired is not None and checker.repaired[0] is again
    for _ in range(2):  # a state none of these allows: judged, and failed, each time
        made = len(opens)
        assert checker.check(CrashState(k, ProcessCrash(), torn, (0,))) is not None
        assert len(opens) > made


@pytest.mark.rule("CRASH-FS-5")
def test_a_power_loss_image_opened_already_in_a_recovery_is_not_opened_twice() -> None:
    """Power loss during the recoveries of two crash points that gave the same image leaves
    the same files: the second is answered by the first's open; a different Session wanted of
    the same files is a new judgement (and here a failure)."""
    opens = []

    def counting(clock: Any, *, fs: Any, root: str) -> Any:
        opens.append(root)
        return good.make_backend(clock, fs=fs, root=root)

    checker = Checker(counting, trace(good.make_backend, workload(1, 3)), "unsynced")
    image = Image({"s.log": b'{"t":1,"w":[]}\n{"t":2'})  # the log of Session "s", torn
    checker.box.load(image)
    want = checker._reopen()
    assert isinstance(want, Snapshot)
    ops = [FileOp("sync", "s.log")]
    assert checker.check_power_loss_in_recovery(3, "strict", ops, 0, "strict", image, want) is None
    made = len(opens)
    assert checker.check_power_loss_in_recovery(5, "strict", ops, 0, "strict", image, want) is None
    assert len(opens) == made and checker.states == checker.recovery_states == 2
    other = checker.check_power_loss_in_recovery(5, "strict", ops, 0, "strict", image, None)
    assert other is not None and other.rule == "CRASH-FS-5" and len(opens) > made


# -- planted bugs --------------------------------------------------------------------------------


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-2", "CRASH-FS-3", "CRASH-FS-4")
@pytest.mark.rule("CRASH-FS-5", "CRASH-FS-6", "CRASH-FS-7")
@pytest.mark.parametrize(("name", "factory", "rule"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_bug_is_caught_under_its_rule_and_replays(
    name: str, factory: Factory, rule: str
) -> None:
    """The sweep reports the planted bug under its rule; the record replays to that failure."""
    _seed, found = _first_failure(factory, rule)
    assert found is not None, f"{name} escaped rule {rule}: {_first_failure(factory)[1]}"
    record = found.to_json()
    still, text = replay_record(orjson.loads(orjson.dumps(record)), factory)
    assert still, text
    assert rule in text


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-6", "CRASH-COV-5")
def test_replay_rebuilds_the_recorded_image_and_shows_a_fixed_recovery() -> None:
    """A replay reopens the recorded image byte for byte with the backend as it is now: a
    backend whose recovery was fixed passes it; one that now writes differently is told that
    the recorded image still loses data and that its fix shows in a new exploration."""
    _seed, torn = _first_failure(PLANTED[0][1], "CRASH-FS-1")
    still, text = replay_record(torn.to_json(), good.make_backend)
    assert still is False and "every check passes" in text, text
    _seed, unsynced = _first_failure(broken_file_backend.make_backend)
    still, text = replay_record(unsynced.to_json(), good.make_backend)
    assert still is True and "now makes other operations" in text, text


# -- detecting support ---------------------------------------------------------------------------


def _clock_only(clock: Any) -> Any:
    return None


def _kwargs_only(clock: Any, **options: Any) -> Any:
    return None


def _fs_only(clock: Any, *, fs: Any) -> Any:
    return None


@pytest.mark.rule("CRASH-FS-8")
def test_filesystem_support_is_read_from_the_signature() -> None:
    """``fs`` and ``root`` by name (keyword-only or not); ``**kwargs`` is not guessed at."""
    assert takes_filesystem(good.make_backend) and takes_filesystem(jsonl_factory)
    assert not takes_filesystem(_clock_only)
    assert not takes_filesystem(_kwargs_only)
    assert not takes_filesystem(_fs_only)
    assert not takes_filesystem(42)


class WritesOutsideRoot(good.FileRepository):  # type: ignore[misc]
    """Keeps a lock file beside the root: the crash images could not hold it."""

    def create(self, session_id: str) -> Any:
        self.fs.write_file(self.root + ".lock", b"")
        return super().create(session_id)


@pytest.mark.rule("CRASH-FS-7")
def test_a_file_outside_root_is_reported_not_silently_lost() -> None:
    report = sweep(_factory(WritesOutsideRoot), workload(0, 2))
    (found,) = report.failures
    assert found.rule == "CRASH-FS-7" and "outside the root" in found.problem


@pytest.mark.rule("CRASH-FS-7")
def test_a_backend_that_takes_fs_but_writes_the_real_disk_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given ``fs`` and ``root``, the sqlite3 example ignores ``fs`` and writes real files at the
    root: the sweep refuses it (no crash state of such a backend can be built) and removes what
    it wrote, instead of reporting whatever the real disk happens to hold."""
    from scopecheck.crashsim import generic_sweep
    from scopecheck.examples.sqlite3_backend import make_backend as real_io

    root = tmp_path / "sessions"
    monkeypatch.setattr(generic_sweep, "ROOT", str(root))

    def bypassing(clock: Any, *, fs: Any, root: str) -> Any:
        del fs
        return real_io(clock, root=root)

    with pytest.raises(generic_sweep.WorkloadFailed, match="instead of going through fs"):
        generic_sweep.trace(bypassing, workload(1, 3))
    assert not root.exists()
