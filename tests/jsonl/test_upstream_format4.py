"""Files written by the upstream TypeScript storage (format 4, storage version 1) open with
exactly the state upstream itself reads back (``tests/data/upstream-format4``: each folder's
``upstream-state.json``), field by field, and ``scopecheck inspect`` reports no problem in
them (WRITE-9, STATS-4, JSONL-23, JSONL-24)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.load import load_session
from scopecheck.models.addresses import value
from scopecheck.models.writes import set_value
from scopecheck.tools.inspect_jsonl import inspect_session

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "upstream-format4"
CASES = sorted(d.name for d in FIXTURES.iterdir() if d.is_dir() and not d.name.startswith("_"))


def expected(case: str) -> dict[str, Any]:
    state: dict[str, Any] = orjson.loads((FIXTURES / case / "upstream-state.json").read_bytes())
    return state


def install(case: str, root: Path) -> str:
    """Copy the fixture's session file into ``root`` as ``<id>.jsonl``; its id."""
    source = next((FIXTURES / case).glob("*.jsonl"))
    session_id = str(expected(case)["header"]["id"])
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, root / f"{session_id}.jsonl")
    return session_id


def upstream_view(storage: Any) -> dict[str, Any]:
    """Our Session as upstream's reader shows it (``upstream-state.json``'s shape)."""
    snapshot = storage.snapshot()
    usage_rows = []
    for row in snapshot.usage:
        shown: dict[str, Any] = {"id": row.id, "usage": orjson.loads(row.usage_json)}
        if row.entry_id is not None:
            shown["entryId"] = row.entry_id
        shown["adjustment"] = row.adjustment
        if row.details_json is not None:
            shown["details"] = orjson.loads(row.details_json)
        shown["seq"] = row.seq
        usage_rows.append(shown)
    totals = snapshot.stats.usage
    return {
        "entries": [
            {
                "id": e.id,
                "parentId": e.parent_id,
                "type": e.type,
                "seq": e.seq,
                "timestamp": e.timestamp,
                "payload": orjson.loads(e.payload_json),
            }
            for e in snapshot.entries
        ],
        "usage": usage_rows,
        "values": {
            f"{ns}\0{key}": {"seq": v.seq, "value": orjson.loads(v.value_json)}
            for (scope, ns, key), v in snapshot.values
            if scope is None
        },
        "lists": {
            f"{ns}\0{key}": [{"seq": e.seq, "value": orjson.loads(e.value_json)} for e in elements]
            for (scope, ns, key), elements in snapshot.lists
            if scope is None
        },
        "stats": {
            "messageCount": snapshot.stats.message_count,
            "usage": {
                "input": totals.input,
                "output": totals.output,
                "cacheRead": totals.cache_read,
                "cacheWrite": totals.cache_write,
                "totalTokens": totals.total_tokens,
                "cost": {
                    "input": totals.cost_input,
                    "output": totals.cost_output,
                    "cacheRead": totals.cost_cache_read,
                    "cacheWrite": totals.cost_cache_write,
                    "total": totals.cost_total,
                },
            },
        },
    }


@pytest.mark.rule("WRITE-9", "STATS-4", "JSONL-23", "JSONL-24")
@pytest.mark.parametrize("case", CASES)
def test_every_upstream_file_opens_with_exactly_upstreams_state(case: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    session_id = install(case, root)
    want = expected(case)
    fs = OsFileSystem()
    header = load_session(fs, str(root / f"{session_id}.jsonl"), session_id).main.header
    assert header == want["header"]
    repo = JsonlRepository(str(root), fs, lambda: 1_800_000_000_000)
    storage = repo.open(session_id)
    got = upstream_view(storage)
    for name in ("entries", "usage", "values", "lists", "stats"):
        assert got[name] == want[name], name
    (probe,) = storage.commit([set_value(value("scopecheck.probe"), 1)])
    assert probe.seq == want["nextSeq"]


@pytest.mark.rule("JSONL-21", "JSONL-23")
@pytest.mark.parametrize("case", CASES)
def test_inspect_reads_every_upstream_file_without_a_problem(case: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    session_id = install(case, root)
    before = (root / f"{session_id}.jsonl").read_bytes()
    report = inspect_session(str(root / f"{session_id}.jsonl"))
    assert report["open"] == "succeeds", report
    assert report["problems"] == [] and report["notes"] == []
    assert (root / f"{session_id}.jsonl").read_bytes() == before
