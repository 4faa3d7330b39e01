"""Planted bugs in the SQLite backend: the mistakes 000 §8 and §9.4 warn about.

Each is a small subclass of the real backend changing one behaviour.  Those whose effect shows
in ordinary results are caught by the stateful machine (``caught_by="machine"``); those that
only matter when the process dies mid-commit or the power fails are caught by the crash sweep
(``caught_by="crash"``, :func:`crash_check`; :func:`crash_result` reports such a run as a
``MutantResult``).  All of them register into the catalogue of ``scopecheck.mutants``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from scopecheck.backends import Backend, SqliteWorld
from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository, SqliteStorage
from scopecheck.models.addresses import ValueAddress, value, value_list
from scopecheck.models.records import Committed
from scopecheck.models.scope import Scope, ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    AppendList,
    RetireScope,
    append_list,
    insert_entry,
    retire_scope,
    set_value,
)
from scopecheck.mutants import Mutant, MutantResult, register


class PointReadIgnoresScope(SqliteStorage):
    """get_value looks rows up by session, namespace and key only (SQLITE-2)."""

    POINT_READ_SQL = (
        "SELECT seq, value FROM scalar_values WHERE session_id = ? AND namespace = ? "
        "AND key = ? ORDER BY scope_id LIMIT 1"
    )

    def _point_read(self, address: ValueAddress[Any, Scope]) -> Any:
        return self._conn.execute(
            self.POINT_READ_SQL, (self._session_id, address.namespace, address.key)
        ).fetchone()


class RetireInSeparateTransaction(SqliteStorage):
    """The scoped DELETEs run in their own transaction after the commit (SQLITE-3)."""

    def _commit_locked(self, writes: tuple[AnyWrite, ...]) -> tuple[Committed, ...]:
        self._deferred: list[str] = []
        committed = super()._commit_locked(writes)
        if self._deferred:
            self._conn.execute("BEGIN IMMEDIATE")
            for scope_id in self._deferred:
                super()._retire(scope_id)
            self._conn.execute("COMMIT")
        return committed

    def _retire(self, scope_id: str) -> None:
        self._deferred.append(scope_id)


class RetireConsumesNoSeq(SqliteStorage):
    """sessions.next_seq is not advanced for retirement writes (SQLITE-5)."""

    def _seqs_consumed(self, writes: tuple[AnyWrite, ...]) -> int:
        return sum(1 for write in writes if not isinstance(write, RetireScope))


class TagDropped(SqliteStorage):
    """List appends store NULL instead of their tag (SQLITE-1)."""

    def _stored_tag(self, write: AppendList[Any]) -> str | None:
        return None


class RetireLeavesLists(SqliteStorage):
    """Retirement deletes the scope's scalar rows but not its list rows (SQLITE-3)."""

    def _retire(self, scope_id: str) -> None:
        self._conn.execute(
            "DELETE FROM scalar_values WHERE session_id = ? AND scope_id = ?",
            (self._session_id, scope_id),
        )


@attrs.frozen
class SqliteMutant:
    """One planted bug: catalogue name, one-line description, how it is built and caught."""

    name: str
    description: str
    storage: type[SqliteStorage] | None = None
    repository_attrs: dict[str, Any] = attrs.field(factory=dict)
    shared: bool = False
    caught_by: str = "machine"

    def repository_class(self) -> type[Any]:
        base = SqliteContainerRepository if self.shared else SqliteRepository
        extra = dict(self.repository_attrs)
        if self.storage is not None:
            extra["storage_class"] = self.storage
        return type(f"{base.__name__}_{self.name.replace('-', '_')}", (base,), extra)

    def backend(self) -> Backend:
        cls = self.repository_class()

        def new_world(clock: Callable[[], int]) -> SqliteWorld:
            return SqliteWorld(clock, self.shared, cls)

        from scopecheck.crash_explorers import SqliteCrashExplorer

        explorer = SqliteCrashExplorer(
            "shared" if self.shared else "per-file", repository=cls, backend=self.name
        )
        return Backend(
            f"sqlite[{self.name}]", new_world, f"SQLite with {self.description}", crash=explorer
        )


MUTANTS: tuple[SqliteMutant, ...] = (
    SqliteMutant(
        "sqlite-point-read-ignores-scope",
        "scope identity omitted from the point read of a scalar value",
        PointReadIgnoresScope,
    ),
    SqliteMutant(
        "sqlite-retire-separate-transaction",
        "retirement's scoped DELETEs committed in a separate transaction after the siblings",
        RetireInSeparateTransaction,
        caught_by="crash",
    ),
    SqliteMutant(
        "sqlite-retire-consumes-no-seq",
        "sessions.next_seq not advanced by retirement writes",
        RetireConsumesNoSeq,
    ),
    SqliteMutant("sqlite-tag-dropped", "list tag dropped on write (stored as NULL)", TagDropped),
    SqliteMutant(
        "sqlite-synchronous-off",
        "synchronous=OFF: commits acknowledged before the WAL reaches the disk",
        repository_attrs={"synchronous": "OFF"},
        caught_by="crash",
    ),
    SqliteMutant(
        "sqlite-shared-retire-leaves-lists",
        "container layout: retirement deletes scoped values but leaves scoped list rows",
        RetireLeavesLists,
        shared=True,
    ),
)

BY_NAME = {mutant.name: mutant for mutant in MUTANTS}


def crash_workload() -> list[tuple[AnyWrite, ...]]:
    """A short workload whose commits retire a live scope together with sibling writes."""
    op = ephemeral_scope("op-1")
    return [
        (set_value(value("pi.op.state", "k", op), 1), append_list(value_list("f", "k", op), "x")),
        (
            insert_entry("e1", None, "message", {"text": "done"}),
            retire_scope(op),
            set_value(value("pi.result", "op-1"), "ok"),
        ),
        (set_value(value("pi.op.state", "k", op), 2),),
        (append_list(value_list("log", "k"), 1, "t"), retire_scope(op)),
    ]


def crash_check(mutant: SqliteMutant, max_failures: int = 1) -> Any:
    """Run the crash sweep against ``mutant``; the returned report's failures are the catch."""
    from scopecheck.crashsim.sqlite_sweep import crash_sweep

    return crash_sweep(
        crash_workload(),
        layout="shared" if mutant.shared else "per-file",
        repository_class=mutant.repository_class(),
        variants=2,
        max_failures=max_failures,
    )


def crash_result(mutant: SqliteMutant) -> MutantResult:
    """Run a ``caught_by="crash"`` mutant through the crash sweep and report it the way
    ``scopecheck.mutants.run_mutant`` reports a machine run (a ``MutantResult``)."""
    import time

    started = time.perf_counter()
    report = crash_check(mutant)
    seconds = round(time.perf_counter() - started, 3)
    first = str(report.failures[0]) if report.failures else ""
    program = (
        f"crash_check(BY_NAME[{mutant.name!r}])  # scopecheck.mutants.sqlite\n# {first}"
        if first
        else ""
    )
    return MutantResult(
        mutant.name,
        "sqlite",
        mutant.description,
        bool(report.failures),
        seconds,
        None,
        program,
        first,
    )


def _crash_check(mutant: SqliteMutant) -> Callable[[], MutantResult]:
    return lambda: crash_result(mutant)


for _mutant in MUTANTS:
    register(
        Mutant(
            _mutant.name,
            "sqlite",
            _mutant.description,
            _mutant.backend,
            _mutant.caught_by,
            check=_crash_check(_mutant) if _mutant.caught_by == "crash" else None,
        )
    )
