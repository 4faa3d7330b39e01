"""Crash exploration of the backend under test, when its factory takes ``fs`` and ``root``.

With ``--scopecheck-backend=SPEC`` the test runs the generic crash sweep
(``scopecheck.crashsim.generic_sweep``) against that backend, or is *skipped* — never passed — when
its factory does not take a FileSystem (CRASH-FS-8); a second test runs the workload once per
single I/O fault (CRASH-FS-9..11).  Without the option it runs against our JSONL
backend through the same generic sweep (no false alarms on a backend known to recover).
"""

from __future__ import annotations

import pytest

from scopecheck.crash_explorers import GenericCrashExplorer
from scopecheck.crashsim.generic_sweep import SKIPPED, Factory, jsonl_factory, sweep, workload

#: Workload seeds: 0 is creates, commits and restarts; 1 adds a delete and a new create.
SEEDS = (0, 1)
TRANSACTIONS = 4


def _targets(config: pytest.Config) -> list[tuple[str, Factory | None]]:
    """``(name, factory)`` per backend under test; ``factory`` is ``None`` when the backend's
    factory does not take ``fs`` and ``root``."""
    from scopecheck.adapters import load_backend

    specs = config.getoption("scopecheck_backend", default=None) or []
    if not specs:
        return [("jsonl", jsonl_factory)]
    chosen = []
    for spec in specs:
        backend = load_backend(spec)
        explorer = backend.crash
        factory = explorer.factory if isinstance(explorer, GenericCrashExplorer) else None
        chosen.append((backend.name, factory))
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "crash_target" in metafunc.fixturenames:
        chosen = _targets(metafunc.config)
        metafunc.parametrize("crash_target", chosen, ids=[name for name, _ in chosen])


@pytest.mark.rule(
    "CRASH-FS-1", "CRASH-FS-2", "CRASH-FS-3", "CRASH-FS-4", "CRASH-FS-5", "CRASH-FS-6",
    "CRASH-FS-7", "CRASH-FS-8",
)  # fmt: skip
@pytest.mark.parametrize("seed", SEEDS)
def test_every_crash_state_recovers(crash_target: tuple[str, Factory | None], seed: int) -> None:
    """Every process-crash and power-loss state of a seeded workload reopens to an allowed
    model state, commits above every acknowledged seq, reopens idempotently and survives a
    crash during its own recovery."""
    _, factory = crash_target
    if factory is None:
        pytest.skip(f"crash exploration: {SKIPPED}")
    report = sweep(factory, workload(seed, TRANSACTIONS), seed=seed, faults=False)
    assert not report.failures, (
        f"{report.failures[0].details()}\n(`scopecheck validate SPEC` saves a reproducer "
        "that `scopecheck replay` reruns)"
    )
    assert report.states > report.ops > 0


@pytest.mark.rule("CRASH-FS-7", "CRASH-FS-8", "CRASH-FS-9", "CRASH-FS-10", "CRASH-FS-11")
@pytest.mark.parametrize("seed", SEEDS)
def test_every_single_io_fault_is_handled(
    crash_target: tuple[str, Factory | None], seed: int
) -> None:
    """Every mutating fs call of a seeded workload fails once (EACCES, ENOSPC, EIO, a partial
    append): the operation fails with a stable code or copes durably, nothing failed becomes
    visible, nothing acknowledged is lost, and the handle, a restart and a retry still work."""
    _, factory = crash_target
    if factory is None:
        pytest.skip(f"I/O-fault runs: {SKIPPED}")
    report = sweep(factory, workload(seed, TRANSACTIONS), seed=seed, crashes=False)
    assert not report.failures, (
        f"{report.failures[0].details()}\n"
        "(`scopecheck validate SPEC` saves a reproducer that `scopecheck replay` reruns)"
    )
    assert report.fault_runs > 0
