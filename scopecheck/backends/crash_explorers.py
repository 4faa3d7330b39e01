"""Crash explorers a :class:`~scopecheck.backends.registry.Backend` can carry, for
``scopecheck fuzz`` and ``validate`` (crash exploration) and ``scopecheck replay`` (kind ``crash``
reproducers).

One base class, :class:`CrashExplorer`: every explorer runs one source of crash states
through the one exploration loop (:mod:`scopecheck.crashsim.explore`) and gives back the same
things -- ``explore_with_faults(budget, seed)`` returns ``(crash states, fault and kill runs,
reproducer records)``, one record per distinct failure (CRASH-COV-4), each a
:class:`~scopecheck.crashsim.failure.CrashFailure` as JSON; afterwards ``coverage`` is what the
crash states covered (CRASH-COV-2), ``limits`` what the runs could not judge, ``kill_runs`` the
kill runs among the fault runs, ``units`` what a fixed exploration covered (its ``shard``'s share
of it, FLEET-4); ``unavailable`` says why it cannot run here (``None``: it can);
``replay(record)`` re-checks one record: ``(still failing, text)``, ``None`` for a run that did
not reproduce in several tries.  A subclass names its source (:meth:`CrashExplorer.source_run`)
and how a record replays.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from scopecheck.crashsim.coverage import CrashCoverage
from scopecheck.crashsim.explore import OVERRUN, Exploration
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.shards import Shard, Units


@attrs.define
class CrashExplorer:
    """What every explorer keeps and reports; a subclass adds its source."""

    #: The layer the explorer watches, for the verdict.
    how: ClassVar[str] = "FileSystem layer"
    coverage: CrashCoverage | None = attrs.field(default=None, kw_only=True)
    limits: list[str] = attrs.field(factory=list, kw_only=True)
    kill_runs: int = attrs.field(default=0, kw_only=True)
    units: dict[str, Units] = attrs.field(factory=dict, kw_only=True)
    #: The last run's seconds in fault and kill runs, and when (``time.perf_counter()``) it
    #: kept its first failure (``None``: none).
    run_seconds: float = attrs.field(default=0.0, kw_only=True)
    first_failure_at: float | None = attrs.field(default=None, kw_only=True)

    @property
    def unavailable(self) -> str | None:
        """Why this explorer cannot run on this machine (``None``: it can)."""
        return None

    def source_run(
        self, budget: float, seed: int, overrun: float, shard: Shard | None = None
    ) -> Exploration:
        """Run the explorer's source through the exploration loop; its first pass may run
        ``overrun`` seconds past ``budget`` (CRASH-COV-2); with ``shard`` (an infinite
        budget), only its share of the fixed work (FLEET-4)."""
        raise NotImplementedError

    def record(self, failure: CrashFailure) -> dict[str, Any]:
        """The reproducer record of ``failure`` (its backend named)."""
        backend: str = getattr(self, "backend", "")
        return attrs.evolve(failure, backend=backend).to_json()

    def explore(self, budget: float, seed: int) -> tuple[int, list[dict[str, Any]]]:
        states, _, records = self.explore_with_faults(budget, seed)
        return states, records

    def explore_with_faults(
        self, budget: float, seed: int, *, overrun: float = OVERRUN, shard: Shard | None = None
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(crash states, fault and kill runs, reproducer records)``: one record per
        distinct failure (CRASH-COV-4).  The first pass over the states after every
        acknowledgement may run ``overrun`` seconds past ``budget``; one that would run
        longer leaves the phase incomplete (CRASH-COV-2)."""
        self.limits, self.kill_runs, self.coverage = [], 0, None  # this run's, not the last
        found = self.source_run(budget, seed, overrun, shard)
        self.coverage, self.units = found.coverage, found.units
        self.run_seconds, self.first_failure_at = found.run_seconds, found.findings.first_at
        self.limits.extend(text for text in found.findings.limits if text not in self.limits)
        return found.states, found.fault_runs, [self.record(f) for f in found.failures]

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        """Re-check one reproducer record: ``(still failing, text)``."""
        raise NotImplementedError


@attrs.define
class JsonlCrashExplorer(CrashExplorer):
    """Crash states of generated workloads on pyfakefs (CRASH-1..12); ``repository`` may be
    a planted bug."""

    repository: Any = None
    backend: str = "jsonl"

    def _repo(self) -> Any:
        if self.repository is not None:
            return self.repository
        from scopecheck.impl.jsonl import JsonlRepository

        return JsonlRepository

    def source_run(
        self, budget: float, seed: int, overrun: float, shard: Shard | None = None
    ) -> Exploration:
        from scopecheck.crashsim.jsonl_sweep import explore_with_faults

        return explore_with_faults(
            budget=budget, seed=seed, repo_class=self._repo(), overrun=overrun, shard=shard
        )

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        from scopecheck.crashsim.jsonl_sweep import replay_record

        return replay_record(record, self._repo())


@attrs.define
class SqliteCrashExplorer(CrashExplorer):
    """SQLite crash exploration over generated workloads
    (``scopecheck.crashsim.sqlite_sweep.explore``, CRASH-SQL-1..9).  ``repository`` opens the
    repositories (``repository(target, clock, vfs=...)``: a class or a factory setting its
    keyword arguments); ``None`` is the real one of ``layout``."""

    how: ClassVar[str] = "SQLite VFS"
    layout: str = "per-file"
    repository: Any = None
    backend: str = "sqlite"

    def source_run(
        self, budget: float, seed: int, overrun: float, shard: Shard | None = None
    ) -> Exploration:
        from scopecheck.crashsim.sqlite_sweep import explore

        return explore(
            layout="shared" if self.layout == "shared" else "per-file",
            budget=budget,
            seed=seed,
            repository_class=self.repository,
            overrun=overrun,
            shard=shard,
        )

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        """A reproducer of source ``sqlite``: a crash image is rebuilt by its variant's name
        from the recorded operations (CRASH-COV-5); an I/O fault reruns the workload with that
        call failing (CRASH-SQL-4)."""
        from scopecheck.crashsim.sqlite_sweep import replay_record

        return replay_record(record, self.repository)


@attrs.define
class GenericCrashExplorer(CrashExplorer):
    """Crash states of seeded workloads for a backend whose factory takes ``fs`` and ``root``
    (``scopecheck.crashsim.generic_sweep``, CRASH-FS-1..11): any format, checked against the
    model only."""

    factory: Any
    backend: str
    spec: str | None = None

    def source_run(
        self, budget: float, seed: int, overrun: float, shard: Shard | None = None
    ) -> Exploration:
        from scopecheck.crashsim.generic_sweep import explore

        return explore(self.factory, budget=budget, seed=seed, overrun=overrun, shard=shard)

    def record(self, failure: CrashFailure) -> dict[str, Any]:
        target = {**failure.target, "spec": self.spec}
        return attrs.evolve(failure, backend=self.backend, target=target).to_json()

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        from scopecheck.crashsim.generic_sweep import replay_record

        return replay_record(record, self.factory)


@attrs.define
class SyscallCrashExplorer(CrashExplorer):
    """Crash states, I/O faults and kills of a backend process, from its system calls
    (``scopecheck.process.syscall_crash``): a command speaking the process protocol, or a Python
    factory taking ``root`` served by ``scopecheck serve``.  ``unavailable`` says why strace
    cannot run here; crash exploration is then skipped with that reason (CRASH-SYS-5).
    ``limits`` collects what a run could not see (a shared writable mmap, CRASH-SYS-8), should
    not do (files changed outside the root, CRASH-SYS-4) or did not judge (fault runs dropped
    because the fault missed its call, CRASH-COV-3)."""

    how: ClassVar[str] = "system-call trace"
    command: tuple[str, ...]
    cwd: str
    backend: str
    spec: str

    @property
    def unavailable(self) -> str | None:
        from scopecheck.crashsim.strace import unavailable

        return unavailable()

    def source_run(
        self, budget: float, seed: int, overrun: float, shard: Shard | None = None
    ) -> Exploration:
        from scopecheck.process.syscall_crash import SyscallSource

        source = SyscallSource(self.spec, self.command, self.cwd)
        found = source.explore(budget, seed, overrun=overrun, shard=shard)
        self.kill_runs += source.kill_runs
        return found

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        from scopecheck.process.syscall_crash import replay

        return replay(record)
