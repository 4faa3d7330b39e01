"""Crash explorers a :class:`~scopecheck.backends.Backend` can carry, for ``scopecheck fuzz``
(crash injection) and ``scopecheck replay`` (kind ``crash`` reproducers).

``explore(budget, seed)`` spends about ``budget`` seconds on crash states and returns
``(states, reproducer records)``; explorers that also inject single I/O faults without a crash
(JSONL, SQLite, and any backend through the generic sweep) offer ``explore_with_faults``,
which returns ``(states, fault runs, reproducer records)``; ``replay(record)`` re-runs one
recorded crash state exactly and returns ``(still_failing, text)`` where the text shows the
files on disk before and after recovery.  JSONL uses :mod:`scopecheck.crashsim.jsonl_sweep`,
SQLite :func:`scopecheck.crashsim.sqlite_sweep.explore`.
"""

from __future__ import annotations

from typing import Any

import attrs

from scopecheck.crashsim.coverage import CrashCoverage
from scopecheck.crashsim.failure import CrashFailure


@attrs.define
class JsonlCrashExplorer:
    """Crash states of generated workloads on pyfakefs; ``repository`` may be a planted bug.
    ``coverage`` is what the last exploration covered (CRASH-COV-2)."""

    repository: Any = None
    backend: str = "jsonl"
    coverage: CrashCoverage | None = None

    def _repo(self) -> Any:
        if self.repository is not None:
            return self.repository
        from scopecheck.impl.jsonl import JsonlRepository

        return JsonlRepository

    def explore(self, budget: float, seed: int) -> tuple[int, list[dict[str, Any]]]:
        states, _, records = self.explore_with_faults(budget, seed)
        return states, records

    def explore_with_faults(
        self, budget: float, seed: int
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(crash states, single-I/O-fault runs, reproducer records)`` (CRASH-1..12): one
        record per distinct failure (CRASH-COV-4)."""
        from scopecheck.crashsim.jsonl_sweep import explore_with_faults

        found = explore_with_faults(budget=budget, seed=seed, repo_class=self._repo())
        self.coverage = found.coverage
        records = [attrs.evolve(f, backend=self.backend).to_json() for f in found.failures]
        return found.states, found.fault_runs, records

    def replay(self, record: dict[str, Any]) -> tuple[bool, str]:
        from scopecheck.crashsim.jsonl_sweep import replay_record

        return replay_record(record, self._repo())


@attrs.define
class SqliteCrashExplorer:
    """SQLite crash exploration over generated workloads
    (``scopecheck.crashsim.sqlite_sweep.explore``).  ``repository`` opens the repositories
    (``repository(target, clock, vfs=...)``: a class or a factory setting its keyword
    arguments); ``None`` is the real one of ``layout``.  ``coverage`` is what the last
    exploration covered (CRASH-COV-2)."""

    layout: str = "per-file"
    repository: Any = None
    backend: str = "sqlite"
    coverage: CrashCoverage | None = None

    def explore(self, budget: float, seed: int) -> tuple[int, list[dict[str, Any]]]:
        states, _, records = self.explore_with_faults(budget, seed)
        return states, records

    def explore_with_faults(
        self, budget: float, seed: int
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(crash states, single-I/O-fault runs, reproducer records)`` (CRASH-SQL-1..9): one
        record per distinct failure (CRASH-COV-4)."""
        from scopecheck.crashsim.sqlite_sweep import explore

        found = explore(
            layout="shared" if self.layout == "shared" else "per-file",
            budget=budget,
            seed=seed,
            repository_class=self.repository,
        )
        self.coverage = found.coverage
        records = [attrs.evolve(f, backend=self.backend).to_json() for f in found.failures]
        return found.states, found.fault_runs, records

    def replay(self, record: dict[str, Any]) -> tuple[bool, str]:
        """A reproducer of source ``sqlite``: a crash image is rebuilt by its variant's name
        from the recorded operations (CRASH-COV-5); an I/O fault reruns the workload with that
        call failing (CRASH-SQL-4)."""
        from scopecheck.crashsim.sqlite_sweep import replay_record

        return replay_record(record, self.repository)


@attrs.define
class GenericCrashExplorer:
    """Crash states of seeded workloads for a backend whose factory takes ``fs`` and ``root``
    (``scopecheck.crashsim.generic_sweep``): any format, checked against the model only.
    ``coverage`` is what the last exploration covered (CRASH-COV-2), as for
    :class:`SyscallCrashExplorer`."""

    factory: Any
    backend: str
    spec: str | None = None
    coverage: CrashCoverage | None = None

    def explore(self, budget: float, seed: int) -> tuple[int, list[dict[str, Any]]]:
        states, _, records = self.explore_with_faults(budget, seed)
        return states, records

    def explore_with_faults(
        self, budget: float, seed: int
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(crash states, single-I/O-fault runs, reproducer records)`` (CRASH-FS-1..11): one
        record per distinct failure (CRASH-COV-4)."""
        from scopecheck.crashsim.generic_sweep import explore

        found = explore(self.factory, budget=budget, seed=seed)
        self.coverage = found.coverage
        return found.states, found.fault_runs, [self._record(f) for f in found.failures]

    def _record(self, failure: CrashFailure) -> dict[str, Any]:
        target = {**failure.target, "spec": self.spec}
        return attrs.evolve(failure, backend=self.backend, target=target).to_json()

    def replay(self, record: dict[str, Any]) -> tuple[bool, str]:
        from scopecheck.crashsim.generic_sweep import replay_record

        return replay_record(record, self.factory)


@attrs.define
class SyscallCrashExplorer:
    """Crash states, I/O faults and kills of a backend process, from its system calls
    (``scopecheck.syscall_crash``): a command speaking the process protocol, or a Python
    factory taking ``root`` served by ``scopecheck serve``.  ``unavailable`` says why strace
    cannot run here; crash exploration is then skipped with that reason (CRASH-SYS-5).
    ``findings`` collects what a run could not see (a shared writable mmap, CRASH-SYS-8), should
    not do (files changed outside the root, CRASH-SYS-4) or did not judge (fault runs dropped
    because the fault missed its call, CRASH-COV-3); ``kill_runs`` counts the kill runs among
    the fault runs; ``coverage`` is what the last exploration covered (CRASH-COV-2)."""

    command: tuple[str, ...]
    cwd: str
    backend: str
    spec: str
    findings: list[str] = attrs.field(factory=list)
    kill_runs: int = 0
    coverage: CrashCoverage | None = None

    @property
    def unavailable(self) -> str | None:
        from scopecheck.crashsim.strace import unavailable

        return unavailable()

    def explore(self, budget: float, seed: int) -> tuple[int, list[dict[str, Any]]]:
        states, _, records = self.explore_with_faults(budget, seed)
        return states, records

    def explore_with_faults(
        self, budget: float, seed: int
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(crash states, fault and kill runs, reproducer records)``: one record per
        distinct failure (CRASH-COV-4)."""
        from scopecheck.syscall_crash import SyscallSource

        source = SyscallSource(self.spec, self.command, self.cwd)
        found = source.explore(budget, seed)
        self.findings.extend(f for f in found.findings.limits if f not in self.findings)
        self.kill_runs += source.kill_runs
        self.coverage = found.coverage
        records = [attrs.evolve(f, backend=self.backend).to_json() for f in found.failures]
        return found.states, found.fault_runs, records

    def replay(self, record: dict[str, Any]) -> tuple[bool | None, str]:
        from scopecheck.syscall_crash import replay

        return replay(record)
