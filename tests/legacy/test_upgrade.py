"""The first non-empty commit rewrites a legacy file as format 4 (LEGACY-9, LEGACY-10, JSONL-19),
and a process crash anywhere in that first commit recovers an allowed state."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.crashsim.tracing_fs import TracingFileSystem
from scopecheck.impl.fs import ForwardingFileSystem, OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import StorageIOError
from scopecheck.models.fold import Transaction
from scopecheck.models.legacy import import_log
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import append_list, insert_entry, set_value
from scopecheck.planted.seams import over_fs
from tests.jsonl.test_crash_sweep import MUTATING, CrashAt, CrashingFs, SimulatedCrash
from tests.legacy.conftest import (
    TRANSCRIPTS,
    RepoFactory,
    counter_ids,
    install_transcript,
    msg,
    write_legacy,
)

SID = "legacy-1"
OP = ephemeral_scope("op-1")


def main_lines(root: Path, sid: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (root / f"{sid}.jsonl").read_bytes().splitlines()]


@pytest.mark.rule("LEGACY-9", "JSONL-19", "JSONL-1")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_first_session_write_rewrites_real_transcript_as_format_4(
    name: str, root: Path, make_repo: RepoFactory
) -> None:
    sid = install_transcript(name, root)
    fs = TracingFileSystem(OsFileSystem())
    storage = make_repo(fs).open(sid)
    imported = storage.snapshot()
    assert storage.legacy is not None
    next_seq = storage.legacy.next_seq
    fs.trace.clear()
    (done,) = storage.commit([insert_entry("caller", imported.entries[-1].id, "message", {})])
    assert done.seq == next_seq
    main = str(root / f"{sid}.jsonl")
    ops = [op for op, path in fs.trace if path in (main, main + ".tmp")]
    assert ops[:4] == ["write", "fsync_file", "rename", "open_append"], fs.trace
    lines = main_lines(root, sid)
    assert lines[0]["kind"] == "header" and lines[0]["v"] == 4
    assert lines[0]["nextSeq"] == next_seq
    assert [rec["seq"] for rec in lines[1:]] == list(range(1, next_seq + 1))
    usage_rows = [rec for rec in lines if rec.get("kind") == "usage"]
    assert len(usage_rows) == 1 and usage_rows[0]["details"] == {"source": "v3-import"}
    assert usage_rows[0]["adjustment"] is True
    after = storage.snapshot()
    assert after.entries[:-1] == imported.entries and after.usage == imported.usage
    storage.close()
    reopened = make_repo().open(sid)
    assert reopened.legacy is None
    assert reopened.snapshot() == after


@pytest.mark.rule("LEGACY-10", "JSONL-19", "JSONL-2")
def test_first_scoped_write_rewrites_then_goes_to_its_sidecar(
    root: Path, make_repo: RepoFactory
) -> None:
    install_transcript("large-session", root, session_id=SID)
    storage = make_repo().open(SID)
    assert storage.legacy is not None
    next_seq = storage.legacy.next_seq
    committed = storage.commit(
        [append_list(value_list("frames", "r", OP), "f1"), set_value(value("m", "k", OP), 1)]
    )
    assert [c.seq for c in committed] == [next_seq, next_seq + 1]
    lines = main_lines(root, SID)
    assert lines[0]["nextSeq"] == next_seq
    assert all("scopeId" not in rec for rec in lines)
    assert lines[-1]["seq"] == next_seq - 1
    sidecar = root / f"{SID}.jsonl.scopes" / "scope-op-1.scope"
    side = sidecar.read_bytes().splitlines()
    assert len(side) == 2 and orjson.loads(side[1])[0]["seq"] == next_seq
    expected = storage.snapshot()
    storage.close()
    assert make_repo().open(SID).snapshot() == expected


@pytest.mark.rule("LEGACY-9")
def test_failed_rewrite_leaves_the_legacy_file_and_a_later_commit_retries(
    root: Path, make_repo: RepoFactory
) -> None:
    path = write_legacy(root, SID, [msg("m1", None)])
    before = path.read_bytes()
    failing = {"on": True}

    def fault(op: str, target: str) -> OSError | None:
        if failing["on"] and op == "rename":
            return OSError(5, "injected")
        return None

    storage = make_repo(TracingFileSystem(OsFileSystem(), fault)).open(SID)
    imported = storage.snapshot()
    with pytest.raises(StorageIOError):
        storage.commit([set_value(value("a", "b"), 1)])
    assert path.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [f"{SID}.jsonl"]
    assert storage.snapshot() == imported and storage.legacy is not None
    failing["on"] = False
    assert storage.commit([set_value(value("a", "b"), 1)])[0].seq == 3
    assert main_lines(root, SID)[0]["nextSeq"] == 3


# -- crash exploration ---------------------------------------------------------------------

WORKLOAD: list[list[Any]] = [
    [append_list(value_list("frames", "r", OP), "f1"), set_value(value("memo", "m", OP), 1)],
    [set_value(value("pi.op.state", "op-1"), "running")],
]


def expected_states(lines: list[bytes], sid: str) -> list[Snapshot]:
    """The model's snapshots: import, then after each workload commit (timestamps 1000)."""
    model = ReferenceRepository()
    log = [Transaction(c.seq, c.timestamp, (c.write,)) for c in import_log(lines, sid, counter_ids)]
    model.logs[sid] = log
    session = model.open(sid)
    states = [session.snapshot()]
    for writes in WORKLOAD:
        session.commit(writes, 1000)
        states.append(session.snapshot())
    return states


class _Recording(CrashAt):
    """Counts like :class:`CrashAt` and remembers each mutating operation's name."""

    def __init__(self, target: int, torn: bool) -> None:
        super().__init__(target, torn)
        self.ops: list[str] = []

    def __call__(self, op: str, path: str) -> Any:
        if op in MUTATING:
            self.ops.append(op)
        return super().__call__(op, path)


#: Crash states that left ``<id>.jsonl.tmp`` behind (a crash between the upgrade's temp write
#: and its rename); the reopen must remove it (LEGACY-9).
TEMP_LEFT: list[str] = []


def explore(
    source: Path, sid: str, tmp: Path, repo_class: type[JsonlRepository] = JsonlRepository
) -> tuple[int, list[str]]:
    """Crash at every mutating operation of the first two commits (and mid-append); returns the
    number of crash states explored and a description of each violation."""
    lines = source.read_bytes().splitlines()
    states = expected_states(lines, sid)

    def repo_over(root: Path, fs: Any, cls: type[JsonlRepository] = JsonlRepository) -> Any:
        return cls(str(root), fs, lambda: 1000, cwd="/t", legacy_ids=counter_ids)

    def fresh(root: Path) -> None:
        root.mkdir(parents=True)
        shutil.copyfile(source, root / f"{sid}.jsonl")

    count_root = tmp / "count"
    fresh(count_root)
    counter = _Recording(10**9, False)
    storage = repo_over(count_root, CrashingFs(OsFileSystem(sync=False), counter)).open(sid)
    opened_at = counter.count
    for writes in WORKLOAD:
        storage.commit(writes)
    total = counter.count
    ops = counter.ops
    explored, failures = 0, []
    for target in range(opened_at + 1, total + 1):
        for torn in (False, True):
            if torn and ops[target - 1] != "append":
                continue  # only an append can be torn; the plain crash is the same state
            root = tmp / f"{target}-{torn}"
            fresh(root)
            crash = CrashAt(target, torn)
            acked = 0
            try:
                crashing = CrashingFs(OsFileSystem(sync=False), crash)
                storage = repo_over(root, crashing, repo_class).open(sid)
                for writes in WORKLOAD:
                    storage.commit(writes)
                    acked += 1
            except SimulatedCrash:
                pass
            else:
                continue
            explored += 1
            temp = root / f"{sid}.jsonl.tmp"
            if temp.exists():
                TEMP_LEFT.append(f"op {target} torn={torn}")
            try:
                recovered = repo_over(root, OsFileSystem())
                if recovered.list() != [sid]:
                    failures.append(f"op {target}: listed {recovered.list()}")
                survivor = recovered.open(sid)
                if temp.exists():
                    failures.append(f"op {target} torn={torn}: {temp.name} survived the reopen")
                got = survivor.snapshot()
                if acked == 0 and got != states[0] and got != states[1]:
                    failures.append(f"op {target} torn={torn}: not import or import+tx1")
                if acked == 0 and got == states[1]:
                    # committed only if the sidecar line is complete on disk
                    side = root / f"{sid}.jsonl.scopes" / "scope-op-1.scope"
                    if not side.exists() or len(side.read_bytes().splitlines()) < 2:
                        failures.append(f"op {target}: caller tx visible without its line")
                if acked >= 1 and got not in states[acked : acked + 2]:
                    failures.append(f"op {target} torn={torn}: not an allowed prefix")
                main = (root / f"{sid}.jsonl").read_bytes()
                if b'"scopeId"' in main:
                    failures.append(f"op {target}: scoped record in the main file")
                survivor.commit([set_value(value("after", "crash"), True)])
                after = survivor.snapshot()
                survivor.close()
                if repo_over(root, OsFileSystem()).open(sid).snapshot() != after:
                    failures.append(f"op {target} torn={torn}: commit after recovery lost")
            except Exception as exc:
                failures.append(f"op {target} torn={torn}: {type(exc).__name__}: {exc}")
    return explored, failures


@pytest.mark.rule("LEGACY-10", "LEGACY-9", "LEGACY-11", "JSONL-19")
def test_crash_anywhere_in_a_first_scoped_commit_of_a_v3_file(tmp_path: Path) -> None:
    source = write_legacy(tmp_path / "src", SID, [msg("m1", None), msg("m2", "m1", role="x")])
    explored, failures = explore(source, SID, tmp_path / "sweep")
    assert failures == []
    assert explored >= 15  # 14 operations of the first scoped commit + its torn append, …


@pytest.mark.rule("LEGACY-10", "LEGACY-9", "LEGACY-11", "JSONL-19")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_crash_anywhere_in_the_first_commit_of_a_real_transcript(tmp_path: Path, name: str) -> None:
    sid = install_transcript(name, tmp_path / "src", session_id=SID)
    TEMP_LEFT.clear()
    explored, failures = explore(tmp_path / "src" / f"{sid}.jsonl", sid, tmp_path / "sweep")
    assert failures == []
    assert explored >= 15  # 14 operations of the first scoped commit + its torn append, …
    # Crashes after the temp write and before the rename left the temp; each reopen removed it.
    print(f"{name}: {explored} crash states, temp left in {len(TEMP_LEFT)}: {TEMP_LEFT}")
    assert TEMP_LEFT


@pytest.mark.rule("LEGACY-14", "LEGACY-9", "JSONL-13")
def test_temp_left_by_a_crash_before_the_upgrade_rename_is_removed_at_reopen(
    root: Path, make_repo: RepoFactory
) -> None:
    """A crash between the first-commit upgrade's temp write and its rename leaves
    ``<id>.jsonl.tmp`` beside the untouched legacy file; it is never listed, the next open
    removes it, and the Session is still the legacy import (then upgrades normally)."""
    path = write_legacy(root, SID, [msg("m1", None), msg("m2", "m1")])
    before = path.read_bytes()

    crashed: list[str] = []

    def crash_at_rename(op: str, target: str) -> Any:
        """The process dies at the rename: nothing after it runs (no cleanup either)."""
        if crashed or (op == "rename" and target.endswith(".jsonl.tmp")):
            crashed.append(op)
            raise SimulatedCrash(op)
        return None

    storage = make_repo(CrashingFs(OsFileSystem(sync=False), crash_at_rename)).open(SID)
    imported = storage.snapshot()
    with pytest.raises(SimulatedCrash):
        storage.commit([set_value(value("a", "b"), 1)])
    temp = root / f"{SID}.jsonl.tmp"
    assert temp.exists() and path.read_bytes() == before
    repo = make_repo()
    assert repo.list() == [SID]  # never listed
    reopened = repo.open(SID)
    assert not temp.exists()
    assert reopened.legacy is not None and reopened.snapshot() == imported
    reopened.commit([set_value(value("a", "b"), 1)])
    reopened.close()
    assert sorted(p.name for p in root.iterdir()) == [f"{SID}.jsonl"]
    assert make_repo().open(SID).legacy is None


# -- planted bugs the exploration must catch -------------------------------------------------


class _UnlinkBeforeRewrite(ForwardingFileSystem):
    """Planted: the legacy file is removed before the format-4 file is written beside it."""

    def write_file(self, path: str, data: bytes) -> None:
        main = path.removesuffix(".tmp")
        if path.endswith(".jsonl.tmp") and self.inner.exists(main):
            self.inner.unlink(main)
        self.inner.write_file(path, data)


class _ScopedIntoMain(ForwardingFileSystem):
    """Planted: scoped transactions are appended to the main file."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._mains: dict[str, Any] = {}

    def append(self, handle: Any, data: bytes) -> None:
        if handle.path.endswith(".scope"):
            main = handle.path.split(".jsonl.scopes/")[0] + ".jsonl"
            if main not in self._mains:
                self._mains[main] = self.inner.open_append(main)
            handle = self._mains[main]
        self.inner.append(handle, data)


UnlinkBeforeRewrite = over_fs("unlink-before-rewrite", _UnlinkBeforeRewrite)
ScopedIntoMain = over_fs("scoped-into-main", _ScopedIntoMain)


@pytest.mark.rule("LEGACY-9", "LEGACY-10")
@pytest.mark.parametrize("repo_class", [UnlinkBeforeRewrite, ScopedIntoMain])
def test_crash_exploration_catches_planted_upgrade_bugs(
    tmp_path: Path, repo_class: type[JsonlRepository]
) -> None:
    source = write_legacy(tmp_path / "src", SID, [msg("m1", None)])
    _, failures = explore(source, SID, tmp_path / "sweep", repo_class)
    assert failures != []


@pytest.mark.rule("LEGACY-9", "LEGACY-1")
def test_upgrade_drops_a_torn_tail_and_a_stray_scopes_directory(
    root: Path, make_repo: RepoFactory
) -> None:
    path = write_legacy(root, SID, [msg("m1", None), msg("m2", "m1")])
    path.write_bytes(path.read_bytes() + b'{"type":"message","id":"m3"')
    stray = root / f"{SID}.jsonl.scopes"
    stray.mkdir()
    (stray / "scope-old.scope").write_bytes(
        b'{"v":4,"kind":"scope_header","sessionId":"legacy-1","scopeId":"old","storageVersion":1}\n'
        b'{"kind":"value","op":"set","seq":99,"namespace":"n","key":"k","value":1,"scopeId":"old"}\n'
    )
    storage = make_repo().open(SID)
    imported = storage.snapshot()
    assert [e.id for e in imported.entries] == ["imp-0", "imp-1"]
    assert imported.values == tuple(v for v in imported.values if v[0][0] is None)
    (done,) = storage.commit([set_value(value("a", "b"), 1)])
    assert done.seq == 4  # entries 1-2, tip 3: the stray sidecar's seq 99 never counted
    assert not stray.exists()
    assert path.read_bytes().endswith(b"\n") and b'"m3"' not in path.read_bytes()
    storage.close()
    reopened = make_repo().open(SID)
    assert reopened.snapshot().entries == imported.entries
    assert reopened.commit([set_value(value("a", "c"), 2)])[0].seq == 5


# -- 000 §9.3, legacy bullet ----------------------------------------------------------------------


V3_RECORDS: list[dict[str, Any]] = [
    msg("m1", None),
    {"type": "model_change", "id": "mc", "parentId": "m1", "provider": "p", "modelId": "m"},
    {"type": "thinking_level_change", "id": "tl", "parentId": "mc", "thinkingLevel": "high"},
    msg("m2", "tl", role="assistant", usage={"input": 3, "output": 4, "totalTokens": 7}),
    {"type": "session_info", "id": "si", "parentId": "m2", "name": "legacy v3"},
]


@pytest.mark.rule("LEGACY-17", "JSONL-19", "LEGACY-9", "LEGACY-10")
@pytest.mark.parametrize("first", ["session", "scoped"])
def test_legacy_v3_first_session_write_and_first_scoped_write_paths_both_produce_valid_v4_state(
    root: Path, make_repo: RepoFactory, first: str
) -> None:
    """Both first-write paths of a v3 file leave a main file that loads as format 4 (no
    corruption, header v4 with nextSeq, seqs 1..nextSeq-1), the scoped write only in its
    sidecar, and a reopen equal to the model (its own importer plus the same commit)."""
    from scopecheck.impl.jsonl.load import load_session

    path = write_legacy(root, SID, V3_RECORDS, version=3)
    lines = path.read_bytes().splitlines()
    writes: list[Any] = (
        [set_value(value("my-app.state"), 1)]
        if first == "session"
        else [set_value(value("memo", "m", OP), 1)]
    )
    model = ReferenceRepository()
    model.import_legacy(SID, lines, counter_ids)
    mine = model.open(SID)
    storage = make_repo().open(SID)
    assert [c.seq for c in storage.commit(writes)] == [c.seq for c in mine.commit(writes, 1)]
    storage.close()
    load = load_session(OsFileSystem(), str(path), SID)
    load.raise_if_corrupt()
    assert load.main.header is not None and load.main.header["v"] == 4
    records = main_lines(root, SID)
    assert records[0]["nextSeq"] == 8  # 2 entries, name, tip, config, state, usage
    assert [r["seq"] for r in records[1:]] == list(range(1, 8 + (first == "session")))
    sidecar = root / f"{SID}.jsonl.scopes" / "scope-op-1.scope"
    assert sidecar.exists() == (first == "scoped")
    assert make_repo().open(SID).snapshot() == mine.snapshot()
