"""A read spy for SQLite forks: bytes read from the source database (001 §1.3, §5 "instrumented
source readers"; SQLITE-15, FORK-16).

001 asks the SQLite fork to stream only what it copies or must classify — SQL-level namespace
prefilters, ancestry and label membership through an index — never source-sized reads of state
it drops.  The spy is :class:`scopecheck.crashsim.sqlite_vfs.RecordingVFS` with ``count_reads``:
every ``xRead`` of every file SQLite opens for the repository (the stage attaches the source through
the same VFS) is recorded, and the bytes read from the source database and its WAL are summed.

:func:`measure` forks two sources with the same options: *lean* (exactly what the fork needs)
and *heavy* (lean plus several MB of state the fork must drop: for a branch fork off-branch
entries and their labels, other lanes, application scalars and lists, op/pending/result rows,
assistant frames, ephemeral scopes and usage; for a tree fork the last five).  A fork that
reads only what it needs reads about as much from both; one that scans and drops reads the
bulk.  :func:`probe` turns that into a verdict; the planted bug ``fork-sqlite-reads-unfiltered``
(scopecheck/planted/fork.py) removes the prefilters and must be caught by it.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from scopecheck.crashsim.sqlite_vfs import RecordingVFS
from scopecheck.models.addresses import value, value_list
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    append_list,
    insert_entry,
    insert_usage,
    set_value,
    usage_value,
)

#: Entries on the forked branch (``main``): what every fork of these sources copies.
MAIN_ENTRIES = 40
#: Rows of each droppable kind in the heavy source, each carrying ``PAD`` bytes.
BULK = 1000
PAD = "x" * 600
#: A fork may read at most this share of the heavy source's extra bytes beyond the lean
#: fork's reads.  B-tree ranges skip the bulk except for interior pages and the leaves at a
#: range's edges (measured: under 2% here); scanning the bulk reads all of it (over 100%).
MAX_SHARE = 0.10


def _idle() -> dict[str, Any]:
    return {"currentOperationId": None, "lastOperationId": None, "inbox": []}


def lean_writes() -> list[list[AnyWrite]]:
    """The ``main`` lane (a chain with labels), the session name, one application value and
    list element (so tree forks copy application state too)."""
    chain: list[AnyWrite] = [
        insert_entry(f"m{i}", None if i == 0 else f"m{i - 1}", "message", {"text": f"m{i}"})
        for i in range(MAIN_ENTRIES)
    ]
    return [
        chain,
        [set_value(value("pi.entry.label", f"m{i}"), f"label {i}") for i in range(0, 40, 4)],
        [
            set_value(value("pi.branch.tip", "main"), f"m{MAIN_ENTRIES - 1}"),
            set_value(value("pi.lane.config", "main"), {"model": "m"}),
            set_value(value("pi.lane.state", "main"), _idle()),
            set_value(value("pi.session.name"), "reads"),
            set_value(value("my-app.small"), 1),
            append_list(value_list("my-app.small-log"), 1),
        ],
    ]


def bulk_writes(branch_scope: bool) -> list[list[AnyWrite]]:
    """State the fork must drop, ``BULK`` rows of each kind with ``PAD``-byte payloads."""
    scope = ephemeral_scope("op-bulk")
    txs: list[list[AnyWrite]] = [
        [set_value(value("pi.op.meta", f"op{i}"), PAD) for i in range(BULK)],
        [set_value(value("pi.pending.entry", f"p{i}"), PAD) for i in range(BULK)],
        [set_value(value("pi.result", f"op{i}"), PAD) for i in range(BULK)],
        [append_list(value_list("pi.pending.assistant_frame", "op1:r1"), PAD)] * BULK,
        [set_value(value("my-app.eph", f"k{i}", scope), PAD) for i in range(BULK)],
        [append_list(value_list("my-app.eph-log", "", scope), PAD)] * BULK,
        [insert_usage(f"u{i}", usage_value(input=1), details=PAD) for i in range(BULK)],
    ]
    if branch_scope:
        side: list[AnyWrite] = [
            insert_entry(f"s{i}", "m0" if i == 0 else f"s{i - 1}", "message", {"text": PAD})
            for i in range(BULK)
        ]
        txs += [
            side,
            [set_value(value("pi.entry.label", f"s{i}"), PAD) for i in range(BULK)],
            [set_value(value("pi.branch.tip", f"b{i}"), f"s{i}") for i in range(BULK)],
            [set_value(value("pi.lane.config", f"b{i}"), {"pad": PAD}) for i in range(BULK)],
            [set_value(value("pi.lane.state", f"b{i}"), _idle()) for i in range(BULK)],
            [set_value(value("aaa-app.state", f"k{i}"), PAD) for i in range(BULK)],
            [set_value(value("zzz-app.state", f"k{i}"), PAD) for i in range(BULK)],
            [append_list(value_list("my-app.log"), PAD)] * BULK,
            [append_list(value_list("pi-app.log"), PAD)] * BULK,
        ]
    return txs


@attrs.frozen
class Reads:
    """Bytes read from the source database (and its WAL) by one fork of each source."""

    lean: int
    heavy: int
    #: Payload bytes of the dropped rows (``PAD`` bytes each): the least a scanning fork reads.
    bulk: int

    @property
    def extra(self) -> int:
        return self.heavy - self.lean

    @property
    def share(self) -> float:
        return self.extra / max(1, self.bulk)


def _fork_reads(
    repository_class: Callable[..., Any],
    shared: bool,
    options: ForkOptions,
    heavy: bool,
    open_source: bool,
) -> int:
    """Build a source in a fresh repository and fork it with the spy on: bytes read.  An open
    source is forked at its commit boundary with its WAL not checkpointed; a closed one from
    its checkpointed file."""
    name = f"forkreads-{uuid.uuid4().hex}"
    vfs = RecordingVFS(name, count_reads=True)
    try:
        with tempfile.TemporaryDirectory(prefix="scopecheck-fork-reads-") as root:
            if shared:
                repo = repository_class(os.path.join(root, "c.sqlite"), vfs=name)
            else:
                repo = repository_class(root, vfs=name)
            storage = repo.create("src")
            for tx in lean_writes():
                storage.commit(tx)
            if heavy:
                for tx in bulk_writes(isinstance(options, BranchFork)):
                    storage.commit(tx)
            path = repo.path if shared else repo.path_for("src")
            if not open_source:
                storage.close()
            vfs.reset()
            repo.fork("src", options)
            read = sum(
                call.size
                for call in vfs.calls
                if call.kind == "read" and call.path in (path, path + "-wal")
            )
            repo.close()
    finally:
        vfs.unregister()
    return read


def measure(
    repository_class: Callable[..., Any],
    shared: bool,
    options: ForkOptions,
    open_source: bool = False,
) -> Reads:
    branch = isinstance(options, BranchFork)
    bulk = len(bulk_writes(branch)) * BULK * len(PAD)
    lean = _fork_reads(repository_class, shared, options, False, open_source)
    heavy = _fork_reads(repository_class, shared, options, True, open_source)
    return Reads(lean, heavy, bulk)


SCOPES: dict[str, ForkOptions] = {"tree": TreeFork(id="d"), "branch": BranchFork("main", id="d")}


def probe(
    repository_classes: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
) -> tuple[bool, str]:
    """Fork lean and heavy closed sources in both layouts and scopes; caught iff some fork
    read more than ``MAX_SHARE`` of the bulk it drops.  ``repository_classes`` = (per-file,
    container): repository classes, or factories giving them a ``fork_stage``."""
    from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository

    per_file, container = repository_classes or (SqliteRepository, SqliteContainerRepository)
    notes: list[str] = []
    caught = False
    for layout, cls, shared in (("sqlite", per_file, False), ("sqlite-shared", container, True)):
        for scope, options in SCOPES.items():
            reads = measure(cls, shared, options)
            bad = reads.share > MAX_SHARE
            caught |= bad
            notes.append(
                f"{layout} {scope}: read {reads.heavy:,} B (lean {reads.lean:,} B), "
                f"{reads.share:.1%} of {reads.bulk:,} B dropped{' — TOO MUCH' if bad else ''}"
            )
    return caught, "; ".join(notes)
