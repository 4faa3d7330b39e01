"""Fixtures for the JSONL tests: repositories over real temp dirs, with optional fault hooks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from scopecheck.crashsim.tracing_fs import TracingFileSystem
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository


class Clock:
    """A deterministic Unix-ms clock: 1000, 1001, ..."""

    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        self.now += 1
        return self.now


RepoFactory = Callable[..., JsonlRepository]


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "repo")


@pytest.fixture
def make_repo(root: str) -> RepoFactory:
    """``make_repo(fault=None)``: a new repository over the same root (a restart)."""
    clock = Clock()

    def make(fault: object = None, tracing: bool = False) -> JsonlRepository:
        fs: object = OsFileSystem()
        if fault is not None or tracing:
            fs = TracingFileSystem(OsFileSystem(), fault)
        return JsonlRepository(root, fs, clock, cwd="/test")  # type: ignore[arg-type]

    return make


def tree(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), for byte-for-byte comparisons."""
    found: dict[str, bytes] = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def sidecar_files(root: str) -> list[str]:
    return sorted(p for p in tree(root) if p.endswith(".scope"))


def unlink_fails(op: str, path: str) -> OSError | None:
    """Fault hook: every sidecar unlink fails with EACCES."""
    if op == "unlink" and path.endswith(".scope"):
        return PermissionError(13, "injected: unlink refused")
    return None
