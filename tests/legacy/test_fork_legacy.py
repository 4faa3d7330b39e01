"""Forks of legacy Sessions: the legacy bullets of 001 §5 (and §1.3), as named focused tests
(LEGACY-13, LEGACY-15, LEGACY-16).

Every successful fork is compared with the model: ``ReferenceRepository.import_legacy`` (the
model's own importer, ``models/legacy.py``) plus ``models/fork_model.expected_fork``.  The real
transcripts are used wherever the bullet allows; small synthetic files build the data-only case.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

import scopecheck.impl.jsonl.legacy as backend_legacy
import scopecheck.impl.jsonl.storage as jsonl_storage
from scopecheck.crashsim.tracing_fs import MUTATING_OPS, TracingFileSystem
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.legacy import import_legacy
from scopecheck.impl.jsonl.legacy_fork import LegacyCapture
from scopecheck.models.addresses import value
from scopecheck.models.errors import CorruptError, ScopecheckError
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.payload import canonical_bytes
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value
from tests.legacy.conftest import (
    DATA,
    TRANSCRIPTS,
    RepoFactory,
    counter_ids,
    install_transcript,
    msg,
    write_legacy,
)
from tests.legacy.test_differential import legacy_files

SID = "legacy-1"


def complete_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    lines = data.split(b"\n")
    lines.pop()  # the part after the last newline: empty, or an ignored torn line
    return lines


def model_fork(path: Path, sid: str, options: ForkOptions, dest: str) -> Any:
    """The model's destination snapshot for forking the *closed* legacy file at ``path``."""
    model = ReferenceRepository()
    model.import_legacy(sid, complete_lines(path), counter_ids)
    model.fork(sid, options, dest)
    return model.open(dest).snapshot()


def backend_snapshot(repo: JsonlRepository, sid: str) -> Any:
    handle = repo.open(sid)
    try:
        return handle.snapshot()
    finally:
        handle.close()


def code_of(call: Any) -> str:
    with pytest.raises(ScopecheckError) as info:
        call()
    return info.value.code


@pytest.fixture
def index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Temp dir for the fork's disk indexes, so the tests can see them removed."""
    where = tmp_path / "indexes"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    yield where


@pytest.fixture
def no_in_memory_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instrumentation (001 §5): the whole-state in-memory importer must not run on the fork
    path — any call fails the test."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the fork path called the in-memory legacy importer")

    monkeypatch.setattr(jsonl_storage, "import_legacy", forbidden)
    monkeypatch.setattr(backend_legacy, "import_legacy", forbidden)


# -- open legacy sources ------------------------------------------------------------------------


@pytest.mark.rule("LEGACY-13")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_forking_an_open_v3_source_rejects_with_the_clear_pre_upgrade_error(
    name: str, root: Path, make_repo: RepoFactory
) -> None:
    """Both scopes reject with ``legacy_not_upgraded`` while the legacy Session is open; the
    source is untouched, no destination artefact appears and the id stays free."""
    sid = install_transcript(name, root)
    source = root / f"{sid}.jsonl"
    before = source.read_bytes()
    repo = make_repo()
    handle = repo.open(sid)
    tip = handle.get_value(value("pi.branch.tip", "main"))
    assert tip is not None
    for options in (
        TreeFork(id="d"),
        BranchFork("main", id="d"),
        BranchFork("main", entry_id=orjson.loads(tip.value_json), id="d"),
    ):
        with pytest.raises(ScopecheckError) as info:
            repo.fork(sid, options)
        assert info.value.code == "legacy_not_upgraded"
        assert "first non-empty commit" in info.value.message  # says what to do
    assert source.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [f"{sid}.jsonl"]
    assert handle.legacy is not None  # the fork did not upgrade the source itself
    repo.create("d").close()  # the rejected destination id was never reserved


@pytest.mark.rule("LEGACY-13", "LEGACY-9")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_after_one_normal_commit_upgrades_it_a_fork_succeeds_and_preserves_the_persisted_ids(
    name: str, root: Path
) -> None:
    """With the default (UUIDv7) ids: after the first commit the ids are on disk, and both a
    tree fork and a branch fork at an entry the open Session showed keep exactly those ids."""
    sid = install_transcript(name, root)
    repo = JsonlRepository(str(root), cwd="/t")  # default legacy ids: UUIDv7, fresh per open
    handle = repo.open(sid)
    entries = handle.snapshot().entries
    handle.commit([set_value(value("my-app.note"), "upgrade")])
    assert handle.legacy is None
    tree = repo.fork(sid, TreeFork(id="tree"))
    assert [e.id for e in backend_snapshot(repo, tree).entries] == [e.id for e in entries]
    middle = entries[len(entries) // 2].id
    branch = repo.fork(sid, BranchFork("main", entry_id=middle, id="branch"))
    forked = backend_snapshot(repo, branch)
    assert forked.entries[-1].id == middle
    assert {e.id for e in forked.entries} <= {e.id for e in entries}
    handle.close()


@pytest.mark.rule("LEGACY-13", "LEGACY-11")
def test_upgraded_legacy_fork_matches_the_model(root: Path, make_repo: RepoFactory) -> None:
    """Deterministic ids: the model (own importer, then the same commit) predicts the fork of
    the upgraded Session; before the commit the model rejects exactly as the backend does."""
    sid = install_transcript("large-session", root, session_id=SID)
    source = root / f"{SID}.jsonl"
    model = ReferenceRepository()
    model.import_legacy(sid, complete_lines(source), counter_ids)
    mine, repo = model.open(sid), make_repo()
    handle = repo.open(sid)
    options = BranchFork("main", position="before", id="d")
    assert code_of(lambda: model.fork(sid, options, "d")) == "legacy_not_upgraded"
    assert code_of(lambda: repo.fork(sid, options)) == "legacy_not_upgraded"
    write = [set_value(value("my-app.note"), "upgrade")]
    mine.commit(write, 1)
    handle.commit(write)
    model.fork(sid, options, "d")
    repo.fork(sid, options)
    assert backend_snapshot(repo, "d") == model.open("d").snapshot()
    handle.close()


# -- closed legacy sources -----------------------------------------------------------------------


@pytest.mark.rule("LEGACY-15", "FORK-14", "FORK-4")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_closed_v3_tree_fork_succeeds_through_the_disk_backed_parser_and_leaves_the_source_byte_identical(  # noqa: E501
    name: str,
    root: Path,
    make_repo: RepoFactory,
    index_dir: Path,
    no_in_memory_import: None,
) -> None:
    """Instrumented: the in-memory importer is forbidden, the source is only ever read through
    the fixed-prefix reader, nothing is written beside it, the index is removed; the
    destination equals the model's."""
    sid = install_transcript(name, root)
    source = root / f"{sid}.jsonl"
    before = source.read_bytes()
    fs = TracingFileSystem(OsFileSystem())
    repo = make_repo(fs)
    dest = repo.fork(sid, TreeFork(id="d"))
    assert source.read_bytes() == before
    touched = [(op, p) for op, p in fs.trace if p.startswith(str(source))]
    assert {op for op, _ in touched} <= {"read_prefix"}, touched
    allowed = {str(root / "d.jsonl.tmp"), str(root / "d.jsonl"), str(root)}
    written = {p for op, p in fs.trace if op in MUTATING_OPS}
    assert written <= allowed | {str(root / "d.jsonl.scopes")}, written
    assert list(index_dir.iterdir()) == []  # the disk index is gone
    assert sorted(p.name for p in root.iterdir()) == sorted([f"{sid}.jsonl", "d.jsonl"])
    got = backend_snapshot(make_repo(), dest)
    assert got == model_fork(source, sid, TreeFork(id="d"), "d")
    assert got.stats.usage.total_tokens == 0  # the import usage row is never copied
    header = orjson.loads((root / "d.jsonl").read_bytes().split(b"\n", 1)[0])
    assert header["parentSessionId"] == sid


@pytest.mark.rule("LEGACY-16", "FORK-3")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_closed_v3_branch_fork_with_omitted_entry_id_succeeds_when_a_complete_configured_lane_is_reconstructed(  # noqa: E501
    name: str, root: Path, make_repo: RepoFactory, index_dir: Path, no_in_memory_import: None
) -> None:
    sid = install_transcript(name, root)
    source = root / f"{sid}.jsonl"
    before = source.read_bytes()
    repo = make_repo()
    for position in ("at", "before"):
        options = BranchFork("main", position=position, id=f"d-{position}")
        dest = repo.fork(sid, options)
        got = backend_snapshot(repo, dest)
        assert got == model_fork(source, sid, options, dest)
        lanes = {key[1] for key, _ in got.values}
        assert lanes == {"pi.branch.tip", "pi.lane.config", "pi.lane.state"}
    assert source.read_bytes() == before
    assert list(index_dir.iterdir()) == []


@pytest.mark.rule("LEGACY-16", "FORK-3")
def test_closed_v3_branch_fork_with_a_caller_supplied_id_from_an_earlier_open_rejects(
    root: Path,
) -> None:
    """Default ids are fresh UUIDv7s per parse: the tip id an earlier open showed names nothing
    in the fork's reparse and rejects as ``unknown_entry``; the omitted id still works."""
    sid = install_transcript("large-session", root)
    source = root / f"{sid}.jsonl"
    before = source.read_bytes()
    repo = JsonlRepository(str(root), cwd="/t")
    handle = repo.open(sid)
    shown = handle.snapshot().entries
    handle.close()
    for entry in (shown[-1].id, shown[0].id):
        assert code_of(lambda e=entry: repo.fork(sid, BranchFork("main", entry_id=e))) == (
            "unknown_entry"
        )
    assert sorted(p.name for p in root.iterdir()) == [f"{sid}.jsonl"]
    dest = repo.fork(sid, BranchFork("main", id="d"))
    got = backend_snapshot(repo, dest)
    assert len(got.entries) == len(shown)
    assert {e.id for e in got.entries}.isdisjoint({e.id for e in shown})  # freshly minted
    assert source.read_bytes() == before


@pytest.mark.rule("LEGACY-16", "FORK-2")
def test_closed_v3_data_only_reconstructed_main_rejects(
    root: Path, make_repo: RepoFactory, index_dir: Path
) -> None:
    """No model/thinking history: ``main`` is data-only — branch scope rejects as everywhere,
    tree scope still forks (001 §1.1)."""
    path = write_legacy(
        root,
        SID,
        [
            msg("m1", None),
            {"type": "model_change", "id": "mc", "parentId": "m1", "provider": "p", "modelId": "m"},
            msg("m2", "mc"),
            {"type": "label", "id": "l1", "parentId": "m2", "targetId": "m1", "label": "first"},
        ],
    )
    before = path.read_bytes()
    repo = make_repo()
    assert code_of(lambda: repo.fork(SID, BranchFork("main", id="d"))) == "data_only_branch"
    assert code_of(lambda: repo.fork(SID, BranchFork("side", id="d"))) == "unknown_branch"
    assert sorted(p.name for p in root.iterdir()) == [f"{SID}.jsonl"]
    dest = repo.fork(SID, TreeFork(id="d"))
    got = backend_snapshot(repo, dest)
    assert got == model_fork(path, SID, TreeFork(id="d"), "d")
    assert {k for k, _ in got.values} == {
        (None, "pi.entry.label", "imp-0"),
        (None, "pi.branch.tip", "main"),
    }
    assert path.read_bytes() == before
    assert list(index_dir.iterdir()) == []


@pytest.mark.rule("LEGACY-15", "FORK-14")
def test_closed_legacy_fork_drops_a_torn_final_line_and_never_repairs_it(
    root: Path, make_repo: RepoFactory
) -> None:
    path = write_legacy(
        root,
        SID,
        [
            msg("m1", None),
            {"type": "model_change", "id": "mc", "parentId": "m1", "provider": "p", "modelId": "m"},
            {"type": "thinking_level_change", "id": "t", "parentId": "mc", "thinkingLevel": "low"},
            msg("m2", "t"),
        ],
    )
    path.write_bytes(path.read_bytes() + b'{"type":"message","id":"m3","parentId":"m2"')
    before = path.read_bytes()
    repo = make_repo()
    dest = repo.fork(SID, BranchFork("main", id="d"))
    got = backend_snapshot(repo, dest)
    assert got == model_fork(path, SID, BranchFork("main", id="d"), "d")
    assert [e.id for e in got.entries] == ["imp-0", "imp-1"]
    assert path.read_bytes() == before
    assert not (root / f"{SID}.jsonl.tmp").exists()


@pytest.mark.rule("LEGACY-15")
def test_closed_legacy_fork_of_a_damaged_file_fails_as_corrupt_and_leaves_nothing(
    root: Path, make_repo: RepoFactory, index_dir: Path
) -> None:
    path = write_legacy(root, SID, [msg("m1", None), msg("m2", "nope")])
    before = path.read_bytes()
    with pytest.raises(CorruptError) as info:
        make_repo().fork(SID, TreeFork(id="d"))
    assert info.value.details["line"] == 3
    assert path.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [f"{SID}.jsonl"]
    assert list(index_dir.iterdir()) == []  # index removed on failure too


# -- the disk normaliser agrees with the in-memory importer --------------------------------------


def _capture_records(path: Path, sid: str) -> list[bytes] | str:
    capture = LegacyCapture(OsFileSystem(), str(path), counter_ids)
    try:
        first = [canonical_bytes(r) for _, r in capture.records(sid)]  # as each writes them
        second = [canonical_bytes(r) for _, r in capture.records(sid)]
    except CorruptError:
        return "corrupt"
    finally:
        capture.close()
    assert first == second  # both fork passes see the same ids
    return first


def _import_records(path: Path, sid: str) -> list[bytes] | str:
    try:
        imported = import_legacy(str(path), complete_lines(path), sid, counter_ids)
    except CorruptError:
        return "corrupt"
    return [canonical_bytes(r) for r in imported.records]


@pytest.mark.rule("LEGACY-15", "LEGACY-3", "LEGACY-4", "LEGACY-5", "LEGACY-6", "LEGACY-7")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_disk_normaliser_matches_the_import_of_a_real_transcript(name: str) -> None:
    path = DATA / f"{name}.jsonl"
    sid = orjson.loads(path.read_bytes().split(b"\n", 1)[0])["id"]
    got = _capture_records(path, sid)
    assert got != "corrupt" and len(got) > 900
    assert got == _import_records(path, sid)


@pytest.mark.rule("LEGACY-15", "LEGACY-2", "LEGACY-4", "LEGACY-5", "LEGACY-6", "LEGACY-7")
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=legacy_files())
def test_disk_normaliser_matches_the_import_of_generated_files(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "s.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        assert _capture_records(path, "s") == _import_records(path, "s")


def test_index_files_live_outside_the_repository(root: Path, make_repo: RepoFactory) -> None:
    """The normaliser's index is SQLite's anonymous database (``impl/jsonl/scratch.py``):
    never a file beside the source, and closed with the capture (FORK-18)."""
    sid = install_transcript("large-session", root)
    capture = LegacyCapture(OsFileSystem(), str(root / f"{sid}.jsonl"), counter_ids)
    try:
        next(iter(capture.records(sid)))
        assert capture._conn is not None and capture._conn.filename == ""
        assert sorted(os.listdir(root)) == [f"{sid}.jsonl"]
    finally:
        capture.close()
    assert capture._conn is None


# -- crash exploration of a closed legacy fork ---------------------------------------------------


@pytest.mark.rule("LEGACY-15", "FORK-17", "FORK-14")
@pytest.mark.parametrize("name", TRANSCRIPTS)
@pytest.mark.parametrize(
    "options", [TreeFork(id="d"), BranchFork("main", id="d")], ids=["tree", "branch"]
)
def test_crash_anywhere_in_a_closed_legacy_fork(
    tmp_path: Path, name: str, options: ForkOptions
) -> None:
    """Crash before every mutating operation of the fork (a torn append included; the process
    stays dead, so no cleanup runs): the legacy source is byte-identical, the destination is
    absent or complete (the model's), leftovers are never listed, and a retry succeeds."""
    import shutil

    from tests.jsonl.test_crash_sweep import CrashAt, CrashingFs, SimulatedCrash

    template = tmp_path / "template"
    sid = install_transcript(name, template, session_id=SID)
    source_bytes = (template / f"{SID}.jsonl").read_bytes()
    expected = model_fork(template / f"{SID}.jsonl", sid, options, "d")

    def repo_over(root: Path, fs: Any) -> JsonlRepository:
        return JsonlRepository(str(root), fs, lambda: 1000, cwd="/t", legacy_ids=counter_ids)

    counter = CrashAt(10**9, False)
    count_root = tmp_path / "count"
    shutil.copytree(template, count_root)
    repo = repo_over(count_root, CrashingFs(OsFileSystem(sync=False), counter))
    setup = counter.count
    repo.fork(sid, options)
    total = counter.count - setup
    states = {"absent": 0, "complete": 0}
    for target in range(1, total + 1):
        for torn in (False, True):
            root = tmp_path / f"{target}-{torn}"
            shutil.copytree(template, root)
            crashing = repo_over(
                root, CrashingFs(OsFileSystem(sync=False), CrashAt(setup + target, torn))
            )
            with pytest.raises(SimulatedCrash):
                crashing.fork(sid, options)
            assert (root / f"{SID}.jsonl").read_bytes() == source_bytes, (target, torn)
            fresh = repo_over(root, OsFileSystem())
            listed = fresh.list()
            assert set(listed) <= {SID, "d"}, listed
            if "d" in listed:
                states["complete"] += 1
            else:
                states["absent"] += 1
                fresh.fork(sid, options)  # a retry over the leftovers succeeds
            assert backend_snapshot(fresh, "d") == expected, (target, torn)
            assert (root / f"{SID}.jsonl").read_bytes() == source_bytes
            handle = fresh.open(sid)  # the source still opens as its legacy import
            assert handle.legacy is not None
            handle.close()
            shutil.rmtree(root)
    print(f"closed legacy fork crash states ({name}, {options.scope}): {total} points, {states}")
    assert states["absent"] > 0 and states["complete"] > 0, states


def _corrupt_line(call: Any) -> Any:
    try:
        call()
    except CorruptError as exc:
        return exc.details.get("line")
    return "accepted"


@pytest.mark.rule("LEGACY-15", "LEGACY-2")
@pytest.mark.parametrize(
    ("header", "records", "line"),
    [
        ({"id": "someone-else"}, [msg("m1", None)], 1),
        ({"version": 4}, [msg("m1", None)], 1),
        ({"version": True}, [msg("m1", None)], 1),
        ({}, [msg("m1", None), {"type": "nope", "id": "x", "parentId": "m1"}], 3),
        (None, [], 1),
        (
            {},
            [
                msg("m1", None),
                {
                    "type": "compaction",
                    "id": "c1",
                    "parentId": "m1",
                    "summary": "s",
                    "tokensBefore": 1,
                    "firstKeptEntryId": "elsewhere",
                },
            ],
            3,
        ),
    ],
    ids=[
        "header-names-another-session",
        "version-4",
        "version-true",
        "unknown-type",
        "empty",
        "first-kept-entry-off-the-branch",
    ],
)
def test_disk_normaliser_blames_the_same_line_as_the_import(
    tmp_path: Path, header: dict[str, Any] | None, records: list[dict[str, Any]], line: int
) -> None:
    """A damaged legacy file fails the fork as corrupt at the line the in-memory import names
    (the error tells the user which line to repair, LEGACY-15): a header for another session,
    an unsupported version (4, or ``true`` which equals 1 but is no int), an unknown record
    type, an empty file (missing header), a compaction whose ``firstKeptEntryId`` is not on
    its parent branch (blamed on the compaction's line, LEGACY-8)."""
    if header is None:
        path = tmp_path / f"{SID}.jsonl"
        path.write_bytes(b"")
    else:
        path = write_legacy(tmp_path, SID, records, **header)

    def capture() -> None:
        legacy = LegacyCapture(OsFileSystem(), str(path), counter_ids)
        try:
            list(legacy.records(SID))
        finally:
            legacy.close()

    def imported() -> None:
        import_legacy(str(path), complete_lines(path), SID, counter_ids)

    assert _corrupt_line(capture) == line
    assert _corrupt_line(imported) == line


@pytest.mark.rule("LEGACY-15", "LEGACY-8")
def test_disk_normaliser_projects_an_earlier_compaction_into_a_later_retained_tail(
    tmp_path: Path,
) -> None:
    """A compaction kept by a later compaction appears in that one's retained tail as a
    ``compactionSummary`` message with its summary and tokensBefore, as the import has it."""
    path = write_legacy(
        tmp_path,
        SID,
        [
            msg("m1", None),
            {"type": "compaction", "id": "c1", "parentId": "m1", "summary": "s1",
             "tokensBefore": 10, "firstKeptEntryId": "m1"},
            msg("m2", "c1"),
            {"type": "compaction", "id": "c2", "parentId": "m2", "summary": "s2",
             "tokensBefore": 20, "firstKeptEntryId": "c1"},
        ],
    )  # fmt: skip
    got = _capture_records(path, SID)
    assert got != "corrupt" and got == _import_records(path, SID)
    last = orjson.loads([r for r in got if b'"compaction"' in r][-1])
    assert last["summary"] == "s2" and last["tokensBefore"] == 20
    assert last["retainedTail"] == [
        {"role": "compactionSummary", "summary": "s1", "tokensBefore": 10,
         "timestamp": last["retainedTail"][0]["timestamp"]},
        {"role": "user", "content": [{"type": "text", "text": "m2"}]},
    ]  # fmt: skip


@pytest.mark.rule("LEGACY-15", "LEGACY-8")
def test_disk_normaliser_resolves_a_branch_summary_inside_a_retained_tail(
    tmp_path: Path,
) -> None:
    """A branch summary kept by a compaction appears in its retained tail as a
    ``branchSummary`` message whose ``fromId`` is resolved to the minted id of its nearest
    retained ancestor (here the root message), exactly as the import has it."""
    path = write_legacy(
        tmp_path,
        SID,
        [
            msg("m1", None),
            {"type": "branch_summary", "id": "b1", "parentId": "m1", "summary": "went back",
             "fromId": "m1"},
            msg("m2", "b1"),
            {"type": "compaction", "id": "c1", "parentId": "m2", "summary": "s",
             "tokensBefore": 5, "firstKeptEntryId": "b1"},
        ],
    )  # fmt: skip
    got = _capture_records(path, SID)
    assert got != "corrupt" and got == _import_records(path, SID)
    records = [orjson.loads(r) for r in got]
    minted = {r["message"]["content"][0]["text"]: r["id"] for r in records if r.get("message")}
    compaction = [r for r in records if r.get("type") == "compaction"][-1]
    assert compaction["retainedTail"] == [
        {"role": "branchSummary", "summary": "went back", "fromId": minted["m1"],
         "timestamp": compaction["retainedTail"][0]["timestamp"]},
        {"role": "user", "content": [{"type": "text", "text": "m2"}]},
    ]  # fmt: skip
