"""Fixtures for the legacy-import tests: real transcripts copied into a temp repository and a
builder for small synthetic v1/v2/v3 files."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck import data
from scopecheck.impl.fs import FileSystem, OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository

DATA = data.PI_SESSIONS
TRANSCRIPTS = data.TRANSCRIPTS


def counter_ids(timestamp_ms: int, ordinal: int) -> str:
    """Deterministic ids: the same file imports to the same ids every time (LEGACY-3)."""
    del timestamp_ms
    return f"imp-{ordinal}"


def header_id(path: Path) -> str:
    session_id: str = orjson.loads(path.read_bytes().split(b"\n", 1)[0])["id"]
    return session_id


def install_transcript(name: str, root: Path, session_id: str | None = None) -> str:
    """Copy a real transcript into ``root`` as ``<id>.jsonl`` (optionally renamed); its id."""
    source = DATA / f"{name}.jsonl"
    root.mkdir(parents=True, exist_ok=True)
    if session_id is None:
        session_id = header_id(source)
        shutil.copyfile(source, root / f"{session_id}.jsonl")
    else:
        lines = source.read_bytes().split(b"\n")
        head = orjson.loads(lines[0])
        head["id"] = session_id
        lines[0] = orjson.dumps(head)
        (root / f"{session_id}.jsonl").write_bytes(b"\n".join(lines))
    return session_id


def write_legacy(
    root: Path,
    session_id: str,
    records: list[dict[str, Any]],
    version: int | None = 3,
    **header: Any,
) -> Path:
    """A legacy file from record dicts (``timestamp`` defaults to a fixed ISO time)."""
    root.mkdir(parents=True, exist_ok=True)
    head: dict[str, Any] = {
        "type": "session",
        "id": session_id,
        "timestamp": "2025-01-01T00:00:00.000Z",
        "cwd": "/legacy",
    }
    if version is not None:
        head["version"] = version
    head.update(header)
    lines = [orjson.dumps(head)]
    for index, rec in enumerate(records):
        rec = {"timestamp": f"2025-01-01T00:00:{index + 1:02d}.000Z", **rec}
        lines.append(orjson.dumps(rec))
    path = root / f"{session_id}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def msg(ident: str, parent: str | None, role: str = "user", **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": ident}]}
    message.update(extra)
    return {"type": "message", "id": ident, "parentId": parent, "message": message}


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


RepoFactory = Callable[..., JsonlRepository]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "repo"


@pytest.fixture
def make_repo(root: Path) -> RepoFactory:
    """``make_repo(fs=None)``: a repository over ``root`` with deterministic import ids."""
    clock = Clock()

    def make(fs: FileSystem | None = None) -> JsonlRepository:
        return JsonlRepository(
            str(root), fs or OsFileSystem(), clock, cwd="/test", legacy_ids=counter_ids
        )

    return make
