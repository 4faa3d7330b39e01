"""Planted fork bugs: the mistakes 001 §1.1–§1.3 and 000 §6.5 warn about.

Most are caught by the fork machine (``caught_by="fork-machine"``); the torn-tail repair needs
a torn source, which the machine never writes, so it is caught by a probe
(``caught_by="fork-probe"``, :func:`probe_torn_tail`) that forks a closed torn-tail source
and byte-compares it — the same check as ``tests/fork/test_fork_backends.py``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from scopecheck.backends.registry import Backend, JsonlWorld, SqliteWorld
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.resident import ResidentState
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.impl.sqlite.fork import Rows, Stage
from scopecheck.models.errors import ScopecheckError, UsageError
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.fork_policy import (
    BRANCH_TIP,
    DestElement,
    DestValue,
    Disposition,
    ForkDriver,
    NamespaceSpan,
    classify,
    classify_list,
)
from scopecheck.models.records import ListElement, ValueRecord
from scopecheck.planted import PROBES, Mutant, register
from scopecheck.planted.seams import RegistryRepository, memory_with, registry_backend


class _PostFork(RegistryRepository):
    """The real Memory fork, after which :meth:`edit` changes the destination's state in the
    registry -- a fork procedure that writes one thing more (or less) than it should."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        dest_id = super().fork(source_id, options)
        self.edit(self.registry[source_id], self.registry[dest_id], options)
        return dest_id

    def edit(self, source: ResidentState, dest: ResidentState, options: ForkOptions) -> None:
        raise NotImplementedError


def _memory(
    name: str, edit: Callable[[ResidentState, ResidentState, ForkOptions], None]
) -> Backend:
    repo = type(f"{name}Repository", (_PostFork,), {"edit": staticmethod(edit)})
    return registry_backend(name, repo, f"Memory with {name}")


def _register(
    name: str, backend: str, description: str, make: Any, caught_by: str = "fork-machine"
) -> None:
    """Fork mutants form their own catalogue group ``fork``; ``backend`` names the backend
    the bug is planted in, in the description."""
    register(Mutant(name, "fork", f"[{backend}] {description}", make, caught_by))


# 1. value seqs renumbered (the pre-WP08 createForkSnapshot bug, 001 §2)
def _renumbered(source: ResidentState, dest: ResidentState, options: ForkOptions) -> None:
    top = max((e.seq for e in dest.entries.values()), default=0)
    for offset, key in enumerate(sorted(dest.values, key=lambda k: dest.values[k].seq)):
        dest.values[key] = ValueRecord(top + 1 + offset, dest.values[key].value_json)


_register(
    "fork-value-seqs-renumbered",
    "memory",
    "copied values get fresh consecutive seqs after the last entry instead of their own (FORK-6)",
    lambda: _memory("value-seqs-renumbered", _renumbered),
)


# 2. a seq <= tip cutoff for application values (001 §1.1 forbids it)
def _cutoff(source: ResidentState, dest: ResidentState, options: ForkOptions) -> None:
    if isinstance(options, BranchFork):
        tip_row = dest.values.get((None, "pi.branch.tip", options.branch))
        tip = None if tip_row is None else tip_row.value
        cutoff = source.entries[tip].seq if isinstance(tip, str) else 0
        for key, row in source.values.items():
            if key[0] is None and classify(key[1]) is Disposition.APPLICATION and row.seq <= cutoff:
                dest.values[key] = row
        for key, elements in source.lists.items():
            if key[0] is None and classify(key[1]) is Disposition.APPLICATION:
                kept = [e for e in elements if e.seq <= cutoff]
                if kept:
                    dest.lists[key] = list(kept)


_register(
    "fork-seq-cutoff",
    "memory",
    "branch forks copy application values/lists with seq <= the tip's seq (FORK-9)",
    lambda: _memory("seq-cutoff", _cutoff),
)


# 3. ephemeral state copied (000 §6.5)
def _ephemeral(source: ResidentState, dest: ResidentState, options: ForkOptions) -> None:
    for key, row in source.values.items():
        if key[0] is not None:
            dest.values[key] = row
    for key, elements in source.lists.items():
        if key[0] is not None and elements:
            dest.lists[key] = list(elements)


_register(
    "fork-copies-ephemeral",
    "memory",
    "forks copy ephemeral-scope values and lists (000 §6.5, FORK-10)",
    lambda: _memory("copies-ephemeral", _ephemeral),
)


# 4. unknown pi.* silently copied (the classifier treats undeclared reserved as application)
class CopyUnknownDriver(ForkDriver):
    """Treats an undeclared reserved namespace like an application namespace."""

    def value(
        self, scope_id: str | None, namespace: str, key: str, seq: int, value_json: bytes
    ) -> tuple[DestValue, ...]:
        if scope_id is None and classify(namespace) is Disposition.UNKNOWN_RESERVED:
            return () if self.branch is not None else (DestValue(namespace, key, seq, value_json),)
        return super().value(scope_id, namespace, key, seq, value_json)

    def list_element(
        self, scope_id: str | None, namespace: str, key: str, element: ListElement
    ) -> tuple[DestElement, ...]:
        if scope_id is None and classify_list(namespace) is Disposition.UNKNOWN_RESERVED:
            return () if self.branch is not None else (DestElement(namespace, key, element),)
        return super().list_element(scope_id, namespace, key, element)


_register(
    "fork-unknown-reserved-copied",
    "memory",
    "current state in an undeclared pi.* namespace is copied (tree) or dropped (branch) instead "
    "of failing the fork (FORK-8)",
    lambda: memory_with(
        "unknown-reserved-copied", "Memory mutant", lambda: {"fork_driver": CopyUnknownDriver}
    ),
)


def _sqlite_unknown(clock: Any) -> Any:
    repo = functools.partial(SqliteRepository, fork_driver=CopyUnknownDriver)
    return SqliteWorld(clock, repository_class=repo)


_register(
    "fork-sqlite-unknown-reserved-copied",
    "sqlite",
    "the same classifier mistake in the SQLite staging path (FORK-8, SQLITE-15)",
    lambda: Backend("sqlite[fork-unknown-reserved-copied]", _sqlite_unknown, "SQLite mutant"),
)


# 4b. the SQLite stage reads every current row and lets the classifier drop most of them
class UnfilteredStage(Stage):
    """The stage without SQL-level namespace prefilters (the pre-WP08 ``readAllScalarValueRows``
    shape): every session-scoped scalar and list row of the source is read and handed to the
    driver, which drops what the fork does not keep.  The destination is still right — only
    the read spy (scopecheck/machines/fork_reads.py) can tell (001 §1.3, SQLITE-16)."""

    def value_rows(self, options: ForkOptions) -> Rows:
        return self.session_rows("scalar_values", "namespace, key, seq, value", (NamespaceSpan(),))

    def list_rows(self, options: ForkOptions) -> Rows:
        columns = "namespace, key, seq, value, tag"
        return self.session_rows("list_values", columns, (NamespaceSpan(),))


UnfilteredSqlite = functools.partial(SqliteRepository, fork_stage=UnfilteredStage)
UnfilteredSqliteContainer = functools.partial(SqliteContainerRepository, fork_stage=UnfilteredStage)


def probe_unfiltered_reads() -> tuple[bool, str]:
    """The read spy over both layouts and scopes against the unfiltered stage."""
    from scopecheck.machines.fork_reads import probe

    return probe((UnfilteredSqlite, UnfilteredSqliteContainer))


PROBES["fork-sqlite-reads-unfiltered"] = probe_unfiltered_reads
_register(
    "fork-sqlite-reads-unfiltered",
    "sqlite",
    "the SQLite fork stage reads every current row of the source and drops most of them in "
    "the classifier instead of prefiltering namespaces by index range (001 §1.3, SQLITE-16)",
    lambda: Backend(
        "sqlite[fork-reads-unfiltered]",
        lambda clock: SqliteWorld(clock, repository_class=UnfilteredSqlite),
        "SQLite mutant",
    ),
    caught_by="fork-probe",
)


# 4c. forks that materialise the source (FORK-16): caught by the auxiliary-memory growth probe
class SnapshotMemory(RegistryRepository):
    """The pre-WP08 shape (``snapshotEntriesAndValues`` + ``createForkSnapshot``): copy the
    source's entries, values and lists into arrays first, then build the destination."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        source = self.registry.get(source_id)
        snapshot = (
            None
            if source is None
            else (
                list(source.entries.items()),
                list(source.values.items()),
                [(key, list(elements)) for key, elements in source.lists.items()],
            )
        )
        dest_id = super().fork(source_id, options)
        del snapshot
        return dest_id


class MaterialisingStage(Stage):
    """Reads every selected value and list row into a list before staging it (the source-sized
    ``.all()`` arrays 001 §1.3 forbids)."""

    def value_rows(self, options: ForkOptions) -> Rows:
        return iter(list(super().value_rows(options)))

    def list_rows(self, options: ForkOptions) -> Rows:
        return iter(list(super().list_rows(options)))


def probe_materialised() -> tuple[bool, str]:
    """The FORK-16 growth probe against both materialising forks (Memory, SQLite per-file)."""
    from scopecheck.bench.fork import fixed_clock, probe_growth

    memory = SnapshotMemory
    sqlite = functools.partial(SqliteRepository, fork_stage=MaterialisingStage)
    caught_memory, memory_notes = probe_growth({"memory": lambda root: memory(fixed_clock)})
    caught_sqlite, sqlite_notes = probe_growth({"sqlite": lambda root: sqlite(root, fixed_clock)})
    return caught_memory and caught_sqlite, f"{memory_notes}; {sqlite_notes}"


PROBES["fork-materialises-source"] = probe_materialised
_register(
    "fork-materialises-source",
    "memory+sqlite",
    "a fork copies the source into arrays first (Memory: entries/values/lists snapshot; SQLite: "
    "value and list rows fetched into lists) instead of streaming (001 §1.3, FORK-16)",
    lambda: registry_backend("materialises-source", SnapshotMemory, "Memory mutant"),
    caught_by="fork-probe",
)


# 5. entry_id accepted off the branch's ancestry
class OffAncestry(RegistryRepository):
    """A branch fork that accepts an ``entry_id`` anywhere in the tree and walks parents from
    it: the source is forked as if its branch tip were that entry."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        try:
            return super().fork(source_id, options)
        except UsageError as exc:
            if exc.code != "entry_not_on_branch" or not isinstance(options, BranchFork):
                raise
        source = self.registry[source_id]
        tip = (None, BRANCH_TIP, options.branch)
        stand_in = attrs.evolve(source, values=dict(source.values))
        old = stand_in.values[tip]
        stand_in.values[tip] = ValueRecord(old.seq, orjson.dumps(options.entry_id))
        self.registry[_STAND_IN] = stand_in
        try:
            dest_id = super().fork(_STAND_IN, options)
        finally:
            del self.registry[_STAND_IN]
        self.registry[dest_id].parent_session_id = source_id
        return dest_id


_STAND_IN = "scopecheck-off-ancestry-source"


_register(
    "fork-entry-off-ancestry",
    "memory",
    "a branch fork accepts an entry_id anywhere in the tree and walks parents from it (FORK-3)",
    lambda: registry_backend("entry-off-ancestry", OffAncestry, "Memory mutant"),
)


# 6. the destination does not name its source
class Orphaned(RegistryRepository):
    """A fork whose destination comes out with no ``parent_session_id``: the copy is right,
    but nothing says where it came from (FORK-11)."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        dest_id = super().fork(source_id, options)
        self.registry[dest_id].parent_session_id = None
        return dest_id


_register(
    "fork-forgets-parent",
    "memory",
    "a fork's destination names no parent session (FORK-11)",
    lambda: registry_backend("forgets-parent", Orphaned, "Memory mutant"),
)


# 7. JSONL fork repairs a torn source tail in place (by opening the source the normal way)
class RepairingJsonlRepository(JsonlRepository):
    """A fork that opens a closed source the normal way first: open's stage 1 republishes a
    torn tail, so the fork writes its source (FORK-14)."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        with contextlib.suppress(UsageError):  # already open here: nothing to repair
            self.open(source_id).close()
        return super().fork(source_id, options)


def _jsonl_repairing(clock: Any) -> Any:
    return JsonlWorld(clock, repository_class=RepairingJsonlRepository)


def probe_torn_tail(
    repository_class: type[JsonlRepository] = RepairingJsonlRepository,
) -> tuple[bool, str]:
    """Fork a closed torn-tail source; caught iff the source bytes changed (FORK-14)."""
    from scopecheck.models.addresses import value
    from scopecheck.models.writes import set_value

    with tempfile.TemporaryDirectory(prefix="scopecheck-fork-probe-") as root:
        repo = repository_class(root, clock=lambda: 1, cwd="/")
        storage = repo.create("src")
        storage.commit([set_value(value("my-app.s"), 1)])
        storage.close()
        path = repo.path_of("src")
        with open(path, "ab") as handle:
            handle.write(b'{"kind":"value","op":"set","seq":2,"namesp')
        with open(path, "rb") as handle:
            before = handle.read()
        try:
            repo.fork("src", TreeFork(id="d"))
        except ScopecheckError as exc:
            return True, f"fork failed: {exc}"
        finally:
            repo.close()
        with open(path, "rb") as handle:
            after = handle.read()
        if after != before:
            return (
                True,
                f"source changed: {len(before)} → {len(after)} bytes ({os.path.basename(path)})",
            )
        return False, "source unchanged"


PROBES["fork-repairs-torn-tail"] = probe_torn_tail
_register(
    "fork-repairs-torn-tail",
    "jsonl",
    "a JSONL fork opens a closed source the normal way, which republishes its torn tail (FORK-14)",
    lambda: Backend("jsonl[fork-repairs-torn-tail]", _jsonl_repairing, "JSONL mutant"),
    caught_by="fork-probe",
)
