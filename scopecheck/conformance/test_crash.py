"""Crash exploration of the backend under test, as ``scopecheck validate`` runs it.

With ``--scopecheck-backend=SPEC`` these tests run the crash exploration ``validate`` gives
that backend, and skip it for the reason ``validate`` gives -- one function decides both
(:func:`scopecheck.run.validate.crash_skip_reason`, INSTALL-15), never passed (CRASH-FS-8):

* a factory taking ``fs`` and ``root``: the generic crash sweep
  (``scopecheck.crashsim.generic_sweep``) over seeded workloads, crash states in one test and
  one run per single I/O fault in the other (CRASH-FS-1..11);
* a factory taking ``root``, or a backend process: its system calls under strace
  (``scopecheck.process.syscall_crash``), one exploration per seed of :data:`SYSCALL_BUDGET` seconds
  whose crash states the first test judges and whose fault and kill runs the second
  (CRASH-SYS-*); skipped with the reason when strace cannot run here (CRASH-SYS-5).

The first test replays the workload seeds the example database (``$SCOPECHECK_DB``) holds for
the backend's crash target -- what ``scopecheck.fuzz_targets_for`` gave HypoFuzz, so what a
worker or a fleet saved -- and is skipped when it holds none (FLEET-3).  Under
``--scopecheck-replay`` it is the only one that runs: the seeded workloads are skipped.

Without the option they run against our JSONL backend through the generic sweep (no false
alarms on a backend known to recover).
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
import pytest

from scopecheck.backends.crash_explorers import CrashExplorer, GenericCrashExplorer
from scopecheck.backends.registry import Backend
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.generic_sweep import jsonl_factory, sweep, workload
from scopecheck.models.errors import ScopecheckError

#: Workload seeds: 0 is creates, commits and restarts; 1 adds a delete and a new create.
SEEDS = (0, 1)
TRANSACTIONS = 4
#: Seconds of system-call exploration per seed (crash states, then fault and kill runs).
SYSCALL_BUDGET = 6.0


@attrs.frozen
class CrashTarget:
    """One backend under test: its explorer, or why crash exploration cannot run for it."""

    name: str
    explorer: CrashExplorer | None
    skipped: str | None = None
    #: The backend named by ``--scopecheck-backend`` (``None``: the bundled JSONL sweep).
    backend: Backend | None = None
    #: Its spec, as the option gave it (what a saved reproducer reloads).
    spec: str | None = None


@attrs.frozen
class Explored:
    """What one system-call exploration found: counts and one line per failure."""

    states: int
    fault_runs: int
    failures: tuple[str, ...]
    complete: bool
    #: The file-system profiles each failure happens under (empty: every one).
    profiles: tuple[tuple[str, ...], ...] = ()
    #: Each failure's reproducer record.
    records: tuple[dict[str, Any], ...] = ()

    def under(self, profile: str) -> tuple[tuple[str, dict[str, Any]], ...]:
        """The failures that happen under ``profile`` with their records; the others are
        warned about (CRASH-SYS-15)."""
        found = []
        names_of = self.profiles or ((),) * len(self.failures)
        for line, names, record in zip(self.failures, names_of, self.records, strict=True):
            if names and profile not in names:
                warnings.warn(f"only under {', '.join(names)}: {line}", stacklevel=2)
            else:
                found.append((line, record))
        return tuple(found)


@pytest.fixture
def fs_profile(request: pytest.FixtureRequest) -> str:
    """``--scopecheck-fs-profile``: the profile a crash failure must happen under to fail."""
    return str(request.config.getoption("scopecheck_fs_profile", default="posix") or "posix")


@pytest.fixture
def seeded(request: pytest.FixtureRequest) -> None:
    """Skips a seeded workload under ``--scopecheck-replay``, which runs only what the example
    database holds."""
    if request.config.getoption("scopecheck_replay", default=False):
        pytest.skip("seeded workloads: skipped (--scopecheck-replay runs the database's alone)")


def _failing(failures: list[CrashFailure], profile: str) -> list[CrashFailure]:
    for failure in failures:
        if not failure.fails_under(profile):
            warnings.warn(f"only under {', '.join(failure.profiles)}: {failure}", stacklevel=2)
    return [failure for failure in failures if failure.fails_under(profile)]


def _targets(config: pytest.Config) -> list[CrashTarget]:
    specs = config.getoption("scopecheck_backend", default=None) or []
    if not specs:
        return [CrashTarget("jsonl", GenericCrashExplorer(jsonl_factory, "jsonl"))]
    from scopecheck.pytest_plugin import loaded_backend
    from scopecheck.run.validate import crash_skip_reason

    chosen = []
    for spec in specs:
        loaded = loaded_backend(config, spec)
        why = crash_skip_reason(loaded.backend, loaded.capabilities.kind)
        explorer = None if why is not None else loaded.backend.crash
        chosen.append(CrashTarget(loaded.backend.name, explorer, why, loaded.backend, spec))
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "crash_target" in metafunc.fixturenames:
        chosen = _targets(metafunc.config)
        metafunc.parametrize("crash_target", chosen, ids=[t.name for t in chosen])


_EXPLORED: dict[tuple[str, int], Explored] = {}


def _explored(target: CrashTarget, explorer: CrashExplorer, seed: int) -> Explored:
    """One exploration per backend and seed, shared by the two tests."""
    if (target.name, seed) not in _EXPLORED:
        states, runs, records = explorer.explore_with_faults(SYSCALL_BUDGET, seed)
        lines = tuple(f"{r.get('rule')}: {r.get('error')}" for r in records)
        profiles = tuple(tuple(r.get("profiles") or ()) for r in records)
        coverage = explorer.coverage
        complete = coverage is None or coverage.complete
        _EXPLORED[target.name, seed] = Explored(
            states, runs, lines, complete, profiles, tuple(records)
        )
    return _EXPLORED[target.name, seed]


REPLAY = "(`scopecheck validate SPEC` saves a reproducer that `scopecheck replay` reruns)"
#: Failures of one test whose reproducers are saved (and crash images bundled).
KEPT = 3


def _kept(
    request: pytest.FixtureRequest,
    target: CrashTarget,
    *failing: str | tuple[str, dict[str, Any]] | list[CrashFailure],
) -> str:
    """The failing test's text: each failure, and where its reproducer and its bundle went
    (the artifacts folder, ``--scopecheck-artifacts``), each also a JUnit property
    (``scopecheck_reproducer``, ``scopecheck_bundle``, ``scopecheck_report``) so a CI job can
    keep them (INSTALL-25)."""
    from scopecheck.pytest_plugin import artifacts_dir, report_path
    from scopecheck.run.export import NotReproduced, export
    from scopecheck.run.fuzz import save_reproducer

    lines: list[str] = []
    records: list[dict[str, Any]] = []
    for item in failing:
        if isinstance(item, str):
            lines.append(item)
        elif isinstance(item, tuple):
            lines.append(item[0])
            records.append(item[1])
        else:
            records += [failure.to_json() for failure in item]
    if target.spec is None:  # the bundled JSONL sweep: nothing a user reruns
        return "\n".join([*lines, REPLAY])
    folder = artifacts_dir(request.config)
    for record in records[:KEPT]:
        if record.get("source") == "fs":
            record = {**record, "target": {**record.get("target", {}), "spec": target.spec}}
        record = {**record, "backend": record.get("backend") or target.name}
        saved = save_reproducer(folder / "failures", record)
        request.node.user_properties.append(("scopecheck_reproducer", str(saved)))
        lines.append(f"reproducer: {saved} (scopecheck replay {saved})")
        if record.get("run") not in ("crash", "recovery", "fault", "kill"):
            continue
        bundle = folder / "bundles" / saved.stem
        bundle.parent.mkdir(parents=True, exist_ok=True)
        try:
            export(record, str(bundle), f"scopecheck replay {saved}")
        except ScopecheckError as exc:
            lines.append(f"no bundle: {exc}")
            continue
        except NotReproduced as missed:  # rerun for its image, it did not fail (CRASH-COV-5)
            why = str(missed).strip().splitlines()
            lines.append(f"no bundle: {why[-1] if why else 'no rerun failed again'}")
            continue
        request.node.user_properties.append(("scopecheck_bundle", str(bundle)))
        lines.append(f"bundle: {bundle} (python {bundle}/reproduce.py)")
    report = report_path(request.config, target.name)
    request.node.user_properties.append(("scopecheck_report", str(report)))
    lines.append(f"report: {report} (written when the run ends)")
    return "\n".join(lines)


@pytest.mark.rule("FLEET-3", "CRASH-FS-8", "INSTALL-15")
def test_saved_crash_findings_now_recover(crash_target: CrashTarget, fs_profile: str) -> None:
    """The workload seeds the example database holds for this backend's crash target (a
    HypoFuzz worker's or a fleet's findings) are explored again, first, with the fixed work
    ``validate --examples`` does for a seed: each must now recover."""
    from scopecheck.run.hypofuzz import replay_crash_findings
    from scopecheck.run.profiles import get_profile

    if crash_target.explorer is None:
        pytest.skip(f"saved crash findings: skipped ({crash_target.skipped})")
    if crash_target.backend is None:
        pytest.skip("saved crash findings: skipped (only for --scopecheck-backend)")
    database = get_profile().database
    explored = (
        {} if database is None else replay_crash_findings(crash_target.backend, database).seeds
    )
    if not explored:
        pytest.skip("saved crash findings: skipped (the example database holds none)")
    failing = [
        (seed, failure)
        for seed, (_, _, records) in sorted(explored.items())
        for failure in _failing([CrashFailure.from_json(r) for r in records], fs_profile)
    ]
    assert not failing, "\n".join(
        [f"workload seed {seed}: {failure}" for seed, failure in failing] + [REPLAY]
    )


@pytest.mark.rule(
    "CRASH-FS-1", "CRASH-FS-2", "CRASH-FS-3", "CRASH-FS-4", "CRASH-FS-5", "CRASH-FS-6",
    "CRASH-FS-7", "CRASH-FS-8", "INSTALL-15",
)  # fmt: skip
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.usefixtures("seeded")
def test_every_crash_state_recovers(
    crash_target: CrashTarget, seed: int, fs_profile: str, request: pytest.FixtureRequest
) -> None:
    """Every process-crash and power-loss state of a seeded workload reopens to an allowed
    model state, commits above every acknowledged seq, reopens idempotently and survives a
    crash during its own recovery."""
    explorer = crash_target.explorer
    if explorer is None:
        pytest.skip(f"crash exploration: skipped ({crash_target.skipped})")
    if isinstance(explorer, GenericCrashExplorer):
        report = sweep(explorer.factory, workload(seed, TRANSACTIONS), seed=seed, faults=False)
        failing = _failing(report.failures, fs_profile)
        assert not failing, _kept(request, crash_target, failing[0].details(), failing)
        assert report.states > report.ops > 0
        return
    found = _explored(crash_target, explorer, seed)
    failures = found.under(fs_profile)
    assert not failures, _kept(request, crash_target, *failures)
    assert found.states > 0 and found.complete


@pytest.mark.rule(
    "CRASH-FS-7", "CRASH-FS-8", "CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11", "INSTALL-15"
)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.usefixtures("seeded")
def test_every_single_io_fault_is_handled(
    crash_target: CrashTarget, seed: int, fs_profile: str, request: pytest.FixtureRequest
) -> None:
    """Every mutating call of a seeded workload fails once (EACCES, ENOSPC, EIO, a partial
    append): the operation fails with a stable code or copes durably, nothing failed becomes
    visible, nothing acknowledged is lost, and the handle, a restart and a retry still work."""
    explorer = crash_target.explorer
    if explorer is None:
        pytest.skip(f"I/O-fault runs: skipped ({crash_target.skipped})")
    if isinstance(explorer, GenericCrashExplorer):
        report = sweep(explorer.factory, workload(seed, TRANSACTIONS), seed=seed, crashes=False)
        failing = _failing(report.failures, fs_profile)
        assert not failing, _kept(request, crash_target, failing[0].details(), failing)
        assert report.fault_runs > 0
        return
    found = _explored(crash_target, explorer, seed)
    failures = found.under(fs_profile)
    assert not failures, _kept(request, crash_target, *failures)
    assert found.fault_runs > 0
