"""Planted bugs that leave files behind (HYGIENE-1..3): the state every read returns is right,
and only the machines' look at the disk sees them.  Each is the real JSONL backend, over a
:class:`~scopecheck.planted.seams.ForwardingFileSystem` breaking one call or behind a repository
whose public ``fork`` does one thing more."""

from __future__ import annotations

from typing import Any

from scopecheck.backends.registry import Backend, JsonlWorld
from scopecheck.impl.fs import ForwardingFileSystem
from scopecheck.impl.jsonl import JsonlRepository, session_paths
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


def _fork_lock_world(clock: Any) -> JsonlWorld:
    return JsonlWorld(clock, repository_class=ForkLeavesLock)


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
