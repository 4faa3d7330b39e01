"""``scopecheck inspect`` on legacy files: what an import would produce, read-only (LEGACY-12)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from scopecheck.tools.inspect_jsonl import inspect_command, inspect_session, render
from tests.legacy.conftest import DATA, TRANSCRIPTS, RepoFactory, install_transcript, write_legacy


@pytest.mark.rule("LEGACY-12", "LEGACY-1")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_inspect_reports_the_import_of_a_real_transcript_without_touching_it(
    name: str, root: Path, make_repo: RepoFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = install_transcript(name, root)
    path = root / f"{sid}.jsonl"
    before = path.read_bytes()
    report = inspect_session(str(path))
    assert path.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [path.name]
    storage = make_repo().open(sid)
    snap = storage.snapshot()
    assert report["open"] == "succeeds" and report["notes"] == []
    assert report["entries"] == len(snap.entries)
    assert report["message_count"] == snap.stats.message_count
    assert report["next_seq"] == storage.legacy.next_seq if storage.legacy else False
    assert [(v["namespace"], v["key"]) for v in report["values"]] == [
        (k[1], k[2]) for k, _ in snap.values
    ]
    assert report["usage_totals"]["input"] == snap.stats.usage.input
    assert report["usage_totals"]["costTotal"] == snap.stats.usage.cost_total
    text = render(report)
    assert "legacy session file (v1)" in text and "usage row seq" in text
    assert inspect_command(str(path), as_json=True) == 0
    assert orjson.loads(capsys.readouterr().out)["entries"] == len(snap.entries)
    assert path.read_bytes() == before


@pytest.mark.rule("LEGACY-12")
def test_inspect_reads_the_original_file_names_and_damaged_files(tmp_path: Path) -> None:
    copy = tmp_path / "large-session.jsonl"
    shutil.copyfile(DATA / "large-session.jsonl", copy)
    report = inspect_session(str(copy))
    assert report["open"] == "succeeds" and "fails as corrupt" in report["notes"][0]
    bad = write_legacy(tmp_path / "bad", "b", [{"type": "mystery", "id": "x", "parentId": None}])
    before = bad.read_bytes()
    report = inspect_session(str(bad))
    assert report["open"].startswith("fails:") and ":2:" in report["open"]
    assert "open fails" in render(report)
    assert inspect_command(str(bad), as_json=False) == 1
    assert bad.read_bytes() == before
