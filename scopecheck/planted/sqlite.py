"""Planted bugs in the SQLite backend: the mistakes 000 §8 and §9.4 warn about.

Each is planted from outside the real backend, at one of its public seams: a sequence or
retirement policy, or a durability setting, passed to the real repository's constructor, a
wrapper around the Sessions it hands out (:func:`scopecheck.planted.seams.sqlite_over`), or a
subclass overriding a public method.  Those whose effect shows in ordinary results are caught by
the stateful machine (``caught_by="machine"``); those that only matter when the process dies
mid-commit or the power fails are caught by the crash sweep, crashes during recovery included
(``caught_by="crash"``, :func:`crash_check`; :func:`crash_result` reports such a run as a
``MutantResult``).  All of them register into the
catalogue of ``scopecheck.planted``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import attrs

from scopecheck.backends.registry import Backend, SqliteWorld
from scopecheck.impl.sequence import Allocation
from scopecheck.impl.sqlite import SCOPED_DELETES, SqliteContainerRepository, SqliteRepository
from scopecheck.impl.sqlite.storage import scope_column
from scopecheck.models.addresses import ValueAddress, value, value_list
from scopecheck.models.records import Committed, ValueRecord
from scopecheck.models.scope import SESSION, Scope, ephemeral_scope, scope_id_of
from scopecheck.models.writes import (
    AnyWrite,
    AppendList,
    RetireScope,
    SetValue,
    append_list,
    insert_entry,
    retire_scope,
    set_value,
)
from scopecheck.planted import Mutant, MutantResult, register
from scopecheck.planted.seams import SessionWrap, WrappedSession, sqlite_over


class PointReadIgnoresScope(WrappedSession):
    """get_value looks rows up by session, namespace and key only (SQLITE-2): it answers as
    ``SELECT ... WHERE session_id = ? AND namespace = ? AND key = ? ORDER BY scope_id LIMIT 1``
    would, with the first row in ``scope_id`` column order (``''`` for the session scope, then
    UTF-8 byte order) among every scope a commit in this world has written a value in."""

    def commit(self, writes: Any) -> tuple[Committed, ...]:
        committed: tuple[Committed, ...] = self._inner.commit(writes)
        with self._shared.setdefault("lock", threading.Lock()):
            seen = self._shared.setdefault("scopes", {})
            for item in committed:
                if isinstance(item.write, SetValue):
                    seen[item.write.address.scope] = None
        return committed

    def get_value(self, address: Any) -> ValueRecord | None:
        if not isinstance(address, ValueAddress):
            result: ValueRecord | None = self._inner.get_value(address)
            return result
        with self._shared.setdefault("lock", threading.Lock()):
            scopes: list[Scope] = [SESSION, *self._shared.get("scopes", {})]
        for scope in sorted(set(scopes), key=_scope_column_order):
            found: ValueRecord | None = self._inner.get_value(
                ValueAddress(address.namespace, address.key, scope)
            )
            if found is not None:
                return found
        return None


def _scope_column_order(scope: Scope) -> bytes:
    """SQLite's BINARY collation of the ``scope_id`` column: memcmp of the UTF-8 bytes."""
    return scope_column(scope_id_of(scope)).encode("utf-8")


class TagDropped(WrappedSession):
    """List appends are committed with no tag, so the database stores NULL (SQLITE-1); the
    acknowledgement still shows the caller's writes, tags included."""

    def commit(self, writes: Any) -> tuple[Committed, ...]:
        if not isinstance(writes, (list, tuple)):
            result: tuple[Committed, ...] = self._inner.commit(writes)
            return result
        stored = [attrs.evolve(w, tag=None) if isinstance(w, AppendList) else w for w in writes]
        committed: tuple[Committed, ...] = self._inner.commit(stored)
        return tuple(
            attrs.evolve(item, write=write) for item, write in zip(committed, writes, strict=True)
        )


class RetireConsumesNoSeq:
    """Sequence policy: write *i* still gets ``next_seq + i``, but ``sessions.next_seq`` is not
    advanced for retirement writes, so the next transaction reuses their seqs (SQLITE-5)."""

    def allocate(
        self, session_id: str, next_seq: int, scope_id: str | None, writes: Sequence[Any]
    ) -> Allocation:
        drawn = sum(1 for write in writes if not isinstance(write, RetireScope))
        return Allocation(next_seq, next_seq + drawn)


class RetireLeavesLists:
    """Retirement policy: deletes the scope's scalar rows but not its list rows (SQLITE-3)."""

    def retire(self, conn: apsw.Connection, session_id: str, scope_id: str) -> None:
        conn.execute(
            "DELETE FROM scalar_values WHERE session_id = ? AND scope_id = ?",
            (session_id, scope_id),
        )


class RetireInSeparateTransaction:
    """Retirement policy: commits what the transaction wrote so far, then runs the scoped
    DELETEs in a transaction of their own, which the rest of the commit joins (SQLITE-3).
    Without a crash the end state is right; a crash in between leaves part of a transaction
    (sibling writes without the seq advance, or without the deletion) on disk."""

    def retire(self, conn: apsw.Connection, session_id: str, scope_id: str) -> None:
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        SCOPED_DELETES.retire(conn, session_id, scope_id)


class RepairWithoutSync(SqliteRepository):
    """Open "repairs" a Session a crash left with a WAL: it folds the WAL into the database and
    truncates it (``wal_checkpoint(TRUNCATE)``) with ``synchronous=OFF`` for that checkpoint, so
    the database pages are not fsynced before the WAL holding them is cut (CRASH-SQL-9).
    Without a crash the state is right, and a crash image it is handed recovers right too: only
    a power loss during that repair loses acknowledged commits."""

    def open(self, session_id: str) -> Any:
        storage = super().open(session_id)
        with contextlib.suppress(apsw.Error):  # a repair that fails is left for next time
            storage.connection.execute("PRAGMA synchronous=OFF")
            storage.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        storage.connection.execute("PRAGMA synchronous=FULL")
        return storage


@attrs.frozen
class SqliteMutant:
    """One planted bug: catalogue name, one-line description, how it is built and caught.

    ``settings`` are keyword arguments of the real repository (a durability setting or a
    policy collaborator); ``wrap`` wraps the Sessions it hands out (``wrap(session, shared)``,
    ``shared`` being one dict per world that survives its restarts); ``repository`` is a
    subclass of the real repository overriding a public method."""

    name: str
    description: str
    settings: dict[str, Any] = attrs.field(factory=dict)
    wrap: SessionWrap | None = None
    shared: bool = False
    caught_by: str = "machine"
    repository: type[SqliteRepository] | None = None

    def repository_factory(self) -> Callable[..., Any]:
        """A fresh factory for the sweeps and worlds: ``factory(target, clock, vfs=...)``."""
        base: Callable[..., Any] = self.repository or (
            SqliteContainerRepository if self.shared else SqliteRepository
        )
        factory: Callable[..., Any] = functools.partial(base, **self.settings)
        return factory if self.wrap is None else sqlite_over(factory, self.wrap)

    def backend(self) -> Backend:
        def new_world(clock: Callable[[], int]) -> SqliteWorld:
            return SqliteWorld(clock, self.shared, self.repository_factory())

        from scopecheck.backends.crash_explorers import SqliteCrashExplorer

        explorer = SqliteCrashExplorer(
            "shared" if self.shared else "per-file",
            repository=self.repository_factory(),
            backend=self.name,
        )
        return Backend(
            f"sqlite[{self.name}]", new_world, f"SQLite with {self.description}", crash=explorer
        )


MUTANTS: tuple[SqliteMutant, ...] = (
    SqliteMutant(
        "sqlite-point-read-ignores-scope",
        "scope identity omitted from the point read of a scalar value",
        wrap=PointReadIgnoresScope,
    ),
    SqliteMutant(
        "sqlite-retire-separate-transaction",
        "retirement's scoped DELETEs committed in a separate transaction after the siblings",
        {"retirement": RetireInSeparateTransaction()},
        caught_by="crash",
    ),
    SqliteMutant(
        "sqlite-retire-consumes-no-seq",
        "sessions.next_seq not advanced by retirement writes",
        {"sequence": RetireConsumesNoSeq()},
    ),
    SqliteMutant(
        "sqlite-tag-dropped", "list tag dropped on write (stored as NULL)", wrap=TagDropped
    ),
    SqliteMutant(
        "sqlite-synchronous-off",
        "synchronous=OFF: commits acknowledged before the WAL reaches the disk",
        {"synchronous": "OFF"},
        caught_by="crash",
    ),
    SqliteMutant(
        "sqlite-shared-retire-leaves-lists",
        "container layout: retirement deletes scoped values but leaves scoped list rows",
        {"retirement": RetireLeavesLists()},
        shared=True,
    ),
    SqliteMutant(
        "sqlite-repair-without-sync",
        "open checkpoints and truncates a WAL a crash left without syncing the database first",
        caught_by="crash",
        repository=RepairWithoutSync,
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
        repository_class=mutant.repository_factory(),
        variants=2,
        max_failures=max_failures,
    )


def crash_result(mutant: SqliteMutant) -> MutantResult:
    """Run a ``caught_by="crash"`` mutant through the crash sweep and report it the way
    ``scopecheck.planted.run_mutant`` reports a machine run (a ``MutantResult``)."""
    import time

    started = time.perf_counter()
    report = crash_check(mutant)
    seconds = round(time.perf_counter() - started, 3)
    first = str(report.failures[0]) if report.failures else ""
    program = (
        f"crash_check(BY_NAME[{mutant.name!r}])  # scopecheck.planted.sqlite\n# {first}"
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
