"""Legacy import: a legacy file opens read-only as its format-4 import (LEGACY-1..LEGACY-8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.impl.jsonl.legacy import uuid7_ids
from scopecheck.models.addresses import value
from scopecheck.models.errors import CorruptError
from scopecheck.models.writes import set_value
from tests.legacy.conftest import (
    TRANSCRIPTS,
    RepoFactory,
    install_transcript,
    msg,
    write_legacy,
)

SID = "legacy-1"


def rich_records() -> list[dict[str, Any]]:
    """A v3 file using every record type (see the expected import in the test below)."""
    usage = {"input": 1, "output": 2, "cost": {"total": 0.5}}
    return [
        msg("m1", None),
        {
            "type": "model_change",
            "id": "mc",
            "parentId": "m1",
            "provider": "anthropic",
            "modelId": "x",
        },
        {"type": "thinking_level_change", "id": "tl", "parentId": "mc", "thinkingLevel": "high"},
        msg("m2", "tl", role="assistant", usage=usage),
        {"type": "session_info", "id": "si", "parentId": "m2", "name": "first"},
        {"type": "label", "id": "lb", "parentId": "si", "targetId": "m1", "label": "start"},
        {
            "type": "custom_message",
            "id": "cm",
            "parentId": "lb",
            "customType": "note",
            "content": "hello",
            "display": True,
        },
        {"type": "custom", "id": "cu", "parentId": "cm", "customType": "ext", "data": {"k": 1}},
        {
            "type": "branch_summary",
            "id": "bs",
            "parentId": "m1",
            "fromId": "root",
            "summary": "sum",
            "usage": {"input": 10},
        },
        {
            "type": "compaction",
            "id": "cp",
            "parentId": "cu",
            "firstKeptEntryId": "m2",
            "summary": "compacted",
            "tokensBefore": 5,
        },
        {"type": "session_info", "id": "si2", "parentId": "cp", "name": "second"},
        {"type": "label", "id": "lb2", "parentId": "si2", "targetId": "tl", "label": "moved"},
        {"type": "active_tools_change", "id": "at", "parentId": "si2", "activeToolNames": ["read"]},
    ]


def ms(second: int) -> int:
    return 1_735_689_600_000 + second * 1000


@pytest.mark.rule("LEGACY-3", "LEGACY-4", "LEGACY-5", "LEGACY-6", "LEGACY-7", "LEGACY-8")
def test_v3_file_imports_entries_values_and_usage(root: Path, make_repo: RepoFactory) -> None:
    write_legacy(root, SID, rich_records())
    storage = make_repo().open(SID)
    snap = storage.snapshot()
    entries = [(e.id, e.parent_id, e.type, e.seq, e.timestamp) for e in snap.entries]
    assert entries == [
        ("imp-0", None, "message", 1, ms(1)),
        ("imp-1", "imp-0", "message", 2, ms(4)),  # parent tl folds into m1
        ("imp-2", "imp-1", "message", 3, ms(7)),  # parent lb → si → m2
        ("imp-3", "imp-2", "custom", 4, ms(8)),
        ("imp-4", "imp-0", "branch_summary", 5, ms(9)),
        ("imp-5", "imp-3", "compaction", 6, ms(10)),
    ]
    payloads = [e.payload for e in snap.entries]
    assert payloads[2] == {
        "message": {
            "role": "custom",
            "customType": "note",
            "content": "hello",
            "display": True,
            "timestamp": ms(7),
        }
    }
    assert payloads[3] == {"customType": "ext", "data": {"k": 1}}
    assert payloads[4] == {
        "fromId": None,
        "summary": "sum",
        "usage": {"input": 10},
        "fromHook": False,
    }
    assert payloads[5]["retainedTail"] == [
        payloads[1]["message"],
        payloads[2]["message"],
    ]
    assert list(payloads[5]) == ["summary", "retainedTail", "tokensBefore", "fromHook"]
    values = {(k[1], k[2]): (v.seq, v.value) for k, v in snap.values}
    assert values == {
        ("pi.session.name", ""): (7, "second"),
        ("pi.entry.label", "imp-0"): (8, "moved"),
        ("pi.branch.tip", "main"): (9, "imp-5"),
        ("pi.lane.config", "main"): (
            10,
            {
                "model": {"provider": "anthropic", "modelId": "x"},
                "thinkingLevel": "high",
                "activeToolNames": ["read"],
            },
        ),
        ("pi.lane.state", "main"): (
            11,
            {"currentOperationId": None, "lastOperationId": None, "inbox": []},
        ),
    }
    (row,) = snap.usage
    assert (row.id, row.seq, row.adjustment, row.entry_id) == ("imp-6", 12, True, None)
    assert orjson.loads(row.details_json or b"null") == {"source": "v3-import"}
    assert row.usage["input"] == 11 and row.usage["cost"]["total"] == 0.5
    assert snap.stats.usage.input == 11 and snap.stats.message_count == 3
    committed = storage.commit([set_value(value("after", "x"), 1)])
    assert committed[0].seq == 13  # nextSeq follows the import


@pytest.mark.rule("LEGACY-1")
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_open_reads_and_close_never_change_a_byte(
    name: str, root: Path, make_repo: RepoFactory
) -> None:
    sid = install_transcript(name, root)
    path = root / f"{sid}.jsonl"
    before = path.read_bytes()
    repo = make_repo()
    storage = repo.open(sid)
    storage.snapshot()
    assert storage.commit([]) == ()  # an empty commit upgrades nothing (LEGACY-9)
    storage.close()
    assert path.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [f"{sid}.jsonl"]
    assert repo.list() == [sid]


@pytest.mark.rule("LEGACY-1")
def test_unterminated_final_line_is_ignored(root: Path, make_repo: RepoFactory) -> None:
    path = write_legacy(root, SID, [msg("m1", None)])
    path.write_bytes(path.read_bytes() + orjson.dumps(msg("m2", "m1"))[:-5])
    storage = make_repo().open(SID)
    assert [e.id for e in storage.snapshot().entries] == ["imp-0"]
    assert storage.legacy is not None and storage.legacy.torn


BAD: dict[str, tuple[list[Any], int]] = {
    "not-json": ([msg("m1", None), "RAW{oops"], 3),
    "unknown-type": ([msg("m1", None), {"type": "mystery", "id": "x", "parentId": "m1"}], 3),
    "unknown-parent": ([msg("m1", "nope")], 2),
    "later-parent": ([msg("m1", "m2"), msg("m2", None)], 2),
    "duplicate-id": ([msg("m1", None), msg("m1", None)], 3),
    "bad-timestamp": ([{**msg("m1", None), "timestamp": "yesterday"}], 2),
    "label-target": (
        [
            msg("m1", None),
            {"type": "label", "id": "l", "parentId": "m1", "targetId": "zz", "label": "x"},
        ],
        3,
    ),
    "off-branch": (
        [
            msg("m1", None),
            msg("m2", None),
            {
                "type": "compaction",
                "id": "c",
                "parentId": "m2",
                "firstKeptEntryId": "m1",
                "summary": "s",
                "tokensBefore": 1,
            },
        ],
        4,
    ),
}


@pytest.mark.rule("LEGACY-1", "LEGACY-4")
@pytest.mark.parametrize("case", sorted(BAD))
def test_damaged_file_fails_open_as_corrupt_with_its_line(
    case: str, root: Path, make_repo: RepoFactory
) -> None:
    records, line = BAD[case]
    path = write_legacy(root, SID, [r for r in records if isinstance(r, dict)])
    if case == "not-json":
        path.write_bytes(path.read_bytes() + b"RAW{oops\n")
    before = path.read_bytes()
    with pytest.raises(CorruptError) as info:
        make_repo().open(SID)
    assert info.value.code == "corrupt"
    assert info.value.details["line"] == line, info.value
    assert path.read_bytes() == before


@pytest.mark.rule("LEGACY-1")
@pytest.mark.parametrize(
    ("header", "why"),
    [({"version": 9}, "unsupported legacy version"), ({"id": "other"}, "names session")],
)
def test_bad_header_fails_open(
    header: dict[str, Any], why: str, root: Path, make_repo: RepoFactory
) -> None:
    write_legacy(root, SID, [msg("m1", None)], **header)
    with pytest.raises(CorruptError, match=why) as info:
        make_repo().open(SID)
    assert info.value.details["line"] == 1


@pytest.mark.rule("LEGACY-2")
def test_v1_is_a_linear_chain_and_compaction_index_becomes_a_tail(
    root: Path, make_repo: RepoFactory
) -> None:
    records: list[dict[str, Any]] = [
        {"type": "message", "message": {"role": "user", "content": "a"}},
        {"type": "message", "message": {"role": "hookMessage", "content": "h"}},
        {"type": "thinking_level_change", "thinkingLevel": "low"},
        {"type": "message", "message": {"role": "user", "content": "b"}},
        {"type": "compaction", "summary": "s", "tokensBefore": 3, "firstKeptEntryIndex": 2},
        {"type": "compaction", "summary": "t", "tokensBefore": 4, "firstKeptEntryIndex": 0},
    ]
    write_legacy(root, SID, records, version=None)
    snap = make_repo().open(SID).snapshot()
    assert [(e.id, e.parent_id) for e in snap.entries] == [
        ("imp-0", None),
        ("imp-1", "imp-0"),
        ("imp-2", "imp-1"),  # the thinking change folds into imp-1
        ("imp-3", "imp-2"),
        ("imp-4", "imp-3"),
    ]
    assert snap.entries[1].payload["message"]["role"] == "custom"  # v2 → v3
    tail = snap.entries[3].payload["retainedTail"]
    assert [m["content"] for m in tail] == ["h", "b"]  # index 2 = the second record
    assert snap.entries[4].payload["retainedTail"] == []  # index 0 is the header
    values = {k[1] for k, _ in snap.values}
    assert values == {"pi.branch.tip"}  # a thinking level but no model: data-only
    assert snap.usage == ()  # no usage objects, no usage row


@pytest.mark.rule("LEGACY-2")
def test_v3_keeps_a_hook_message_role(root: Path, make_repo: RepoFactory) -> None:
    write_legacy(root, SID, [msg("m1", None, role="hookMessage")])
    snap = make_repo().open(SID).snapshot()
    assert snap.entries[0].payload["message"]["role"] == "hookMessage"
    write_legacy(root, "v2", [msg("m1", None, role="hookMessage")], version=2)
    snap = make_repo().open("v2").snapshot()
    assert snap.entries[0].payload["message"]["role"] == "custom"


@pytest.mark.rule("LEGACY-4", "LEGACY-5", "LEGACY-6")
def test_folding_labels_and_a_discarded_root(root: Path, make_repo: RepoFactory) -> None:
    records = [
        {"type": "session_info", "id": "s0", "parentId": None, "name": "named"},
        msg("m1", "s0"),
        {"type": "label", "id": "l1", "parentId": "m1", "targetId": "m1", "label": "x"},
        {"type": "label", "id": "l2", "parentId": "l1", "targetId": "s0", "label": "root"},
        {"type": "label", "id": "l3", "parentId": "l2", "targetId": "m1", "label": ""},
        {"type": "session_info", "id": "s1", "parentId": "l3"},
        {"type": "model_change", "id": "mc", "parentId": "s1", "provider": "p", "modelId": "m"},
        {"type": "thinking_level_change", "id": "t", "parentId": "mc", "thinkingLevel": "bogus"},
    ]
    write_legacy(root, SID, records)
    snap = make_repo().open(SID).snapshot()
    assert [(e.id, e.parent_id) for e in snap.entries] == [("imp-0", None)]
    # the last session_info has no name; the label on m1 was cleared; the label on s0 has no
    # retained ancestor; the nearest thinking level is invalid, so no lane.
    assert {(k[1], k[2]): v.value for k, v in snap.values} == {("pi.branch.tip", "main"): "imp-0"}


@pytest.mark.rule("LEGACY-6")
def test_header_only_file_has_a_null_tip(root: Path, make_repo: RepoFactory) -> None:
    write_legacy(root, SID, [])
    storage = make_repo().open(SID)
    snap = storage.snapshot()
    assert snap.entries == () and snap.usage == ()
    assert [(k[1], v.seq, v.value) for k, v in snap.values] == [("pi.branch.tip", 1, None)]
    assert storage.commit([set_value(value("a", "b"), 1)])[0].seq == 2


@pytest.mark.rule("LEGACY-3", "LEGACY-9")
def test_default_ids_are_uuid7_and_fresh_per_open(root: Path) -> None:
    from scopecheck.impl.jsonl import JsonlRepository

    write_legacy(root, SID, [msg("m1", None), msg("m2", "m1")])
    first = JsonlRepository(str(root)).open(SID)
    ids = [e.id for e in first.snapshot().entries]
    first.close()
    again = [e.id for e in JsonlRepository(str(root)).open(SID).snapshot().entries]
    assert len(set(ids)) == 2 and ids != again
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)
    assert int(ids[0].replace("-", "")[:12], 16) == 1_735_689_601_000
    assert uuid7_ids(5, 0) != uuid7_ids(5, 0)
    # the first commit persists the ids the open Session exposes (LEGACY-9)
    storage = JsonlRepository(str(root)).open(SID)
    shown = storage.snapshot()
    storage.commit([set_value(value("a", "b"), 1)])
    storage.close()
    assert JsonlRepository(str(root)).open(SID).snapshot().entries == shown.entries
