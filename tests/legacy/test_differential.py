"""Backend importer vs. model importer on generated legacy files (LEGACY-11, LEGACY-2..8).

Hypothesis builds small v1/v2/v3 files over every record type — random trees, folded records,
labels on discarded targets, compactions whose firstKeptEntryId may be off the branch, invalid
lane fields, usage with ints and floats — and the two separately written importers must agree:
both fail as corrupt, or both produce the same records byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scopecheck.impl.jsonl.codec import encode_write
from scopecheck.impl.jsonl.legacy import import_legacy
from scopecheck.models.errors import CorruptError
from scopecheck.models.legacy import import_log
from scopecheck.models.payload import canonical_bytes
from tests.legacy.conftest import counter_ids

TYPES = (
    "message",
    "custom",
    "custom_message",
    "branch_summary",
    "compaction",
    "model_change",
    "thinking_level_change",
    "active_tools_change",
    "session_info",
    "label",
)
#: Record types with messages and lane changes drawn more often, so lanes and tails occur.
WEIGHTED = (*TYPES, "message", "message", "model_change", "thinking_level_change", "label", "label")
numbers = st.one_of(st.integers(0, 1000), st.floats(0, 10, allow_nan=False), st.just("x"))
usages = st.fixed_dictionaries(
    {},
    optional={
        "input": numbers,
        "output": st.integers(0, 50),
        "totalTokens": st.integers(0, 50),
        "cost": st.fixed_dictionaries({}, optional={"total": numbers, "input": numbers}),
    },
)


@st.composite
def legacy_files(draw: st.DrawFn) -> list[bytes]:
    version = draw(st.sampled_from([None, 2, 3]))
    head: dict[str, Any] = {
        "type": "session",
        "id": "s",
        "timestamp": "2025-01-01T00:00:00Z",
        "cwd": "/c",
    }
    if version is not None:
        head["version"] = version
    lines = [orjson.dumps(head)]
    ids: list[str] = []
    parents: dict[str, str | None] = {}
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(WEIGHTED))
        rec: dict[str, Any] = {"type": kind, "timestamp": f"2025-01-01T00:00:{i:02d}.5Z"}
        if version is not None:
            rec["id"] = f"r{i}"
            # mostly a chain (so lanes and compaction tails occur), sometimes a branch
            rec["parentId"] = (
                draw(st.one_of(st.just(ids[-1]), st.sampled_from([None, *ids]))) if ids else None
            )
        earlier = (
            draw(st.one_of(st.sampled_from(ids[-3:]), st.sampled_from(ids))) if ids else "nope"
        )
        if kind == "message":
            role = draw(st.sampled_from(["user", "assistant", "toolResult", "hookMessage"]))
            message: dict[str, Any] = {"role": role, "content": f"c{i}"}
            if draw(st.booleans()):
                message["usage"] = draw(usages)
            rec["message"] = message
        elif kind == "custom":
            rec["customType"] = "t"
            if draw(st.booleans()):
                rec["data"] = {"n": i}
        elif kind == "custom_message":
            rec.update(customType="cm", content=[{"type": "text", "text": "x"}])
            if draw(st.booleans()):
                rec["details"] = {"d": 1}
            if draw(st.booleans()):
                rec["display"] = draw(st.booleans())
        elif kind == "branch_summary":
            rec["fromId"] = draw(st.sampled_from(["root", earlier]))
            rec["summary"] = draw(st.sampled_from(["", "bs"]))
            if draw(st.booleans()):
                rec["usage"] = draw(usages)
            if draw(st.booleans()):
                rec["fromHook"] = True
        elif kind == "compaction":
            rec.update(summary="sum", tokensBefore=i)
            if version is None:
                rec["firstKeptEntryIndex"] = draw(st.integers(-1, i + 2))
            elif draw(st.booleans()):
                line: list[str] = []  # the parent's ancestry: mostly on-branch, else anything
                node = rec["parentId"]
                while node is not None:
                    line.append(node)
                    node = parents[node]
                rec["firstKeptEntryId"] = draw(st.sampled_from(line)) if line else earlier
            if draw(st.booleans()):
                rec["usage"] = draw(usages)
            if draw(st.booleans()):
                rec["details"] = [1]
        elif kind == "model_change":
            rec["provider"] = draw(st.sampled_from(["p", "q", ""]))
            rec["modelId"] = draw(st.sampled_from(["m", "n", ""]))
        elif kind == "thinking_level_change":
            rec["thinkingLevel"] = draw(st.sampled_from(["off", "high", "xhigh", "bogus"]))
        elif kind == "active_tools_change":
            rec["activeToolNames"] = draw(st.sampled_from([["a", "b"], [1], "x", []]))
        elif kind == "session_info":
            if draw(st.booleans()):
                rec["name"] = draw(st.sampled_from(["", "name", 3]))
        elif kind == "label":
            rec["targetId"] = ids[0] if ids and draw(st.booleans()) else earlier
            if draw(st.booleans()):
                rec["label"] = draw(st.sampled_from(["", "L", "M"]))
        if version is not None:
            ids.append(rec["id"])
            parents[rec["id"]] = rec["parentId"]
        lines.append(orjson.dumps(rec))
    return lines


def backend(lines: list[bytes]) -> list[bytes] | str:
    try:
        imported = import_legacy("/x/s.jsonl", lines, "s", counter_ids)
    except CorruptError as exc:
        return f"corrupt at line {exc.details.get('line')}"
    return [canonical_bytes(rec) for rec in imported.records]  # as the importer writes them


def model(lines: list[bytes]) -> list[bytes] | str:
    try:
        log = import_log(lines, "s", counter_ids)
    except CorruptError as exc:
        return f"corrupt at line {exc.details.get('line')}"
    return [encode_write(item) for item in log]


@pytest.mark.rule("LEGACY-11", "LEGACY-2", "LEGACY-4", "LEGACY-5", "LEGACY-6", "LEGACY-7")
@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(legacy_files())
def test_backend_and_model_importers_agree(lines: list[bytes]) -> None:
    assert backend(lines) == model(lines)


_CORRUPTIONS: list[tuple[str, Any]] = [
    ("timestamp", 5),
    ("timestamp", "not a time"),
    ("type", "bogus"),
    ("parentId", "no-such-record"),
    ("id", ""),
]


@st.composite
def corrupt_legacy_files(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """A generated legacy file with one record (1-based line ``n``) or the header broken."""
    lines = draw(legacy_files())
    n = draw(st.integers(1, len(lines)))
    record = orjson.loads(lines[n - 1])
    if n == 1:
        record["type"] = draw(st.sampled_from(["message", "Session"]))
    else:
        field, bad = draw(st.sampled_from(_CORRUPTIONS))
        record[field] = bad
    lines[n - 1] = orjson.dumps(record)
    return lines, n


@pytest.mark.rule("LEGACY-1", "LEGACY-11")
@given(corrupt_legacy_files())
def test_both_importers_reject_a_broken_record_at_the_same_line(
    case: tuple[list[bytes], int],
) -> None:
    """Anything malformed fails the open as ``corrupt`` naming its line, the same line in the
    backend and the model.  (A broken field can be legal where it is ignored -- an id in a v1
    file without ids -- so off the header the two must agree, corrupt or not.)"""
    lines, n = case
    verdict = backend(lines)
    assert verdict == model(lines)
    if n == 1:
        assert verdict == "corrupt at line 1"


@pytest.mark.rule("LEGACY-11")
def test_lane_config_takes_the_nearest_tool_list() -> None:
    """The imported lane config carries the model, thinking level and *tool list* nearest the
    final record (REFERENCE §8), in both importers."""
    from scopecheck.models.writes import SetValue

    def rec(i: int, kind: str, parent: str | None, **extra: Any) -> bytes:
        stamp = f"2025-01-01T00:00:{i:02d}Z"
        return orjson.dumps(
            {"type": kind, "id": f"r{i}", "parentId": parent, "timestamp": stamp, **extra}
        )

    head = {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z"}
    lines = [
        orjson.dumps({**head, "cwd": "/c"}),
        rec(1, "model_change", None, provider="p", modelId="m"),
        rec(2, "thinking_level_change", "r1", thinkingLevel="high"),
        rec(3, "active_tools_change", "r2", activeToolNames=["read"]),
        rec(4, "active_tools_change", "r3", activeToolNames=["bash", "edit"]),
        rec(5, "message", "r4", message={"role": "user", "content": "hi"}),
    ]
    assert backend(lines) == model(lines)
    configs = [
        c.write.value
        for c in import_log(lines, "s", counter_ids)
        if isinstance(c.write, SetValue) and c.write.address.namespace == "pi.lane.config"
    ]
    assert configs == [
        {
            "model": {"provider": "p", "modelId": "m"},
            "thinkingLevel": "high",
            "activeToolNames": ["bash", "edit"],
        }
    ]
