"""Planted bugs that leave files behind (HYGIENE-1..4): the state every read returns is right,
and only the machines' look at the disk sees them.  Each is the real JSONL backend, over a
:class:`~scopecheck.planted.seams.ForwardingFileSystem` breaking one call or behind a repository
whose public ``fork`` does one thing more."""

from __future__ import annotations

from typing import Any

from scopecheck.backends.registry import Backend, JsonlWorld
from scopecheck.impl.fs import ForwardingFileSystem
from scopecheck.impl.jsonl import JsonlRepository, JsonlStorage, session_paths
from scopecheck.models.fork import ForkOptions
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import jsonl_over


class KeepsScopesFolders(ForwardingFileSystem):
    """``remove`` of a ``.scopes`` folder does nothing: delete() leaves the sidecars."""

    def remove(self, path: str, recursive: bool = False, force: bool = False) -> None:
        if path.endswith(session_paths.SCOPES_SUFFIX):
            return
        self.inner.remove(path, recursive=recursive, force=force)


class PublishKeepsTemp(ForwardingFileSystem):
    """The atomic publish copies ``<file>.tmp`` over its target and never removes it."""

    def rename(self, source: str, target: str) -> None:
        if not source.endswith(session_paths.TEMP_SUFFIX):
            self.inner.rename(source, target)
            return
        self.inner.write_file(target, self.inner.read_bytes(source))
        self.inner.fsync_file(target)


class ForkLeavesLock(JsonlRepository):
    """``fork`` marks its source with ``<source>.lock`` while it copies, and never removes it."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        self.fs.write_file(self.path_of(source_id) + ".lock", b"")
        return super().fork(source_id, options)


#: At most this many scratch files per Session (a bound for the loop naming the next).
SCRATCH_LIMIT = 10_000


class OpeningKeepsScratch(JsonlRepository):
    """Every ``create`` and ``open`` makes a new scratch file ``<file>.tmp.<n>`` for the handle
    it returns and never removes it or uses it again: one more file per opening."""

    def _scratch(self, session_id: str) -> None:
        main = self.path_of(session_id)
        for number in range(1, SCRATCH_LIMIT):
            path = f"{main}{session_paths.TEMP_SUFFIX}.{number}"
            if not self.fs.exists(path):
                self.fs.write_file(path, b"")
                return

    def create(self, session_id: str) -> JsonlStorage:
        storage = super().create(session_id)
        self._scratch(session_id)
        return storage

    def open(self, session_id: str) -> JsonlStorage:
        storage = super().open(session_id)
        self._scratch(session_id)
        return storage


def _fork_lock_world(clock: Any) -> JsonlWorld:
    return JsonlWorld(clock, repository_class=ForkLeavesLock)


def _scratch_world(clock: Any) -> JsonlWorld:
    return JsonlWorld(clock, repository_class=OpeningKeepsScratch)


register(
    Mutant(
        "jsonl-fork-leaves-lock",
        "jsonl",
        "fork() leaves a <source>.lock beside its source (HYGIENE-3)",
        lambda: Backend("jsonl[fork-leaves-lock]", _fork_lock_world, "JSONL, fork lock kept"),
        caught_by="fork-machine",
    )
)
register(
    Mutant(
        "jsonl-delete-leaves-sidecars",
        "jsonl",
        "delete() removes the main log but leaves its .scopes folder (HYGIENE-2)",
        lambda: jsonl_over("delete-leaves-sidecars", KeepsScopesFolders, "JSONL, keeps .scopes"),
    )
)
register(
    Mutant(
        "jsonl-publish-leaves-temp",
        "jsonl",
        "the atomic publish leaves its <file>.tmp behind after the rename (HYGIENE-1)",
        lambda: jsonl_over("publish-leaves-temp", PublishKeepsTemp, "JSONL, keeps temp files"),
    )
)
register(
    Mutant(
        "jsonl-opening-keeps-scratch",
        "jsonl",
        "every open() makes a new <file>.tmp.<n> scratch file and never removes it (HYGIENE-4)",
        lambda: Backend("jsonl[opening-keeps-scratch]", _scratch_world, "JSONL, scratch piles up"),
    )
)
