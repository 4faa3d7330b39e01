"""Write what upstream writes (JSONL-25): the same logical commits through
:class:`~scopecheck.impl.jsonl.JsonlRepository` give upstream's main log byte for byte.

Each upstream fixture's lines are turned back into the commits that wrote them (one line, one
commit; an object is a one-write commit, an array a commit of its writes), replayed with the
fixture's session id, cwd and clock readings (``createdAt``, each entry's ``timestamp``), with
an empty commit and a reopen in between as the upstream workloads did, and the resulting file
is compared with upstream's.  Nothing is normalised away but what the upstream workload chose:
the id, the cwd and the times, which are fed in rather than masked.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.impl.fs import AppendFile, FileSystem, OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.writes import (
    Write,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    set_value,
)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "upstream-format4"
ENTRY_KEYS = {"kind", "id", "parentId", "type", "seq", "timestamp"}


class Clock:
    """The clock the backend reads; the test sets it to the time upstream's writer read."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def as_write(record: dict[str, Any]) -> Write[Any]:
    """The public constructor call that writes ``record`` (its seq is the backend's to give)."""
    kind = record["kind"]
    if kind == "entry":
        payload = {k: v for k, v in record.items() if k not in ENTRY_KEYS}
        return insert_entry(record["id"], record["parentId"], record["type"], payload)
    if kind == "usage":
        return insert_usage(
            record["id"],
            record["usage"],
            record.get("entryId"),
            record["adjustment"],
            record.get("details"),
        )
    if kind == "value":
        address = value(record["namespace"], record["key"])
        return (
            set_value(address, record["value"]) if record["op"] == "set" else delete_value(address)
        )
    address = value_list(record["namespace"], record["key"])
    return (
        append_list(address, record["value"]) if record["op"] == "append" else delete_list(address)
    )


def commits(main_log: bytes) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    header, *lines = (orjson.loads(line) for line in main_log.splitlines())
    return header, [line if isinstance(line, list) else [line] for line in lines]


def replay_fixture(case: str, root: Path, fs: FileSystem | None = None) -> tuple[bytes, bytes]:
    """(upstream's main log, ours after the same commits)."""
    upstream = next((FIXTURES / case).glob("*.jsonl")).read_bytes()
    header, transactions = commits(upstream)
    clock = Clock()
    clock.now = header["createdAt"]
    repo = JsonlRepository(str(root), fs, clock=clock, cwd=header["cwd"])
    storage = repo.create(header["id"])
    for index, records in enumerate(transactions):
        stamps = {r["timestamp"] for r in records if r["kind"] == "entry"}
        assert len(stamps) <= 1  # upstream reads its clock once per commit, as we do
        clock.now = stamps.pop() if stamps else clock.now + 1
        committed = storage.commit([as_write(r) for r in records])
        assert [c.seq for c in committed] == [r["seq"] for r in records]
        if index == 2:
            assert storage.commit([]) == ()  # an empty commit writes nothing
            storage.close()
            storage = JsonlRepository(str(root), fs, clock=clock, cwd=header["cwd"]).open(
                header["id"]
            )
    storage.close()
    return upstream, (root / f"{header['id']}.jsonl").read_bytes()


def diff(upstream: bytes, ours: bytes) -> str:
    return "\n".join(
        difflib.unified_diff(
            upstream.decode().splitlines(), ours.decode().splitlines(), "upstream", "scopecheck"
        )
    )


@pytest.mark.rule("JSONL-25")
@pytest.mark.parametrize("case", ["values", "entries", "mixed", "mixed_no_usage", "edge_values"])
def test_the_same_commits_write_upstreams_bytes(case: str, tmp_path: Path) -> None:
    upstream, ours = replay_fixture(case, tmp_path)
    assert ours == upstream, diff(upstream, ours)


class RewritingFileSystem(OsFileSystem):
    """Real files; every appended line passes through ``rewrite`` first -- a writer with one
    encoding mistake, planted at the public ``FileSystem`` seam."""

    def __init__(self, rewrite: Callable[[Any], bytes]) -> None:
        super().__init__()
        self._rewrite = rewrite

    def append(self, handle: AppendFile, data: bytes) -> None:
        lines = [self._rewrite(orjson.loads(line)) for line in data.splitlines()]
        super().append(handle, b"".join(line + b"\n" for line in lines))


def usage_timestamp(obj: Any) -> bytes:
    """Usage rows written with a ``timestamp`` of their own, as scopecheck once did (WRITE-9)."""
    for rec in obj if isinstance(obj, list) else [obj]:
        if rec["kind"] == "usage":
            rec["timestamp"] = 1700000000000
    return orjson.dumps(obj)


def ascii_json(obj: Any) -> bytes:
    """Lines written by Python's ``json`` with its default ``ensure_ascii``: ``\\u00fc`` where
    JavaScript writes ``ü`` (the same value, other bytes)."""
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.rule("JSONL-25", "WRITE-9")
@pytest.mark.parametrize(
    ("case", "rewrite", "shows"),
    [
        ("mixed", usage_timestamp, '"timestamp":1700000000000'),
        ("edge_values", ascii_json, "\\u00fc"),
    ],
    ids=["usage-timestamp", "ascii-escapes"],
)
def test_a_writer_with_an_encoding_mistake_is_caught(
    case: str, rewrite: Callable[[Any], bytes], shows: str, tmp_path: Path
) -> None:
    """The byte comparison can fail: each planted writer differs from upstream where its
    mistake is, and nowhere else.  Both files still open (JSONL-23 reads either spelling), so
    only this comparison sees the mistake."""
    upstream, ours = replay_fixture(case, tmp_path, RewritingFileSystem(rewrite))
    assert ours != upstream
    changed = [line for line in diff(upstream, ours).splitlines() if line.startswith("+{")]
    changed += [line for line in diff(upstream, ours).splitlines() if line.startswith("+[")]
    assert changed and all(shows in line for line in changed), diff(upstream, ours)
    session_id = orjson.loads(upstream.split(b"\n")[0])["id"]
    JsonlRepository(str(tmp_path)).open(session_id).close()
