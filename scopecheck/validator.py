"""``scopecheck validate PATH_OR_MODULE:FACTORY``: the machine, crash exploration and the
conformance suite against a backend that lives outside this project.

The machine runs in-process for the time budget (its failure is saved as a reproducer file that
``scopecheck replay`` reruns).  When the factory takes ``fs`` and ``root`` (its file I/O goes
through ``scopecheck.impl.fs``), :data:`CRASH_SHARE` of the budget goes to the generic crash sweep
(``scopecheck.crashsim.generic_sweep``: crash states, then single I/O faults — rules CRASH-FS-*; the
JSON counts both, ``crash_states`` and ``crash_fault_runs``), whatever the machine found;
otherwise the verdict says crash exploration was skipped — never that it passed (CRASH-FS-8).  The
conformance suite runs in a pytest subprocess with the plugin, and each failing test is
reported with the spec rules it checks and the command that reruns it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.adapters import load_backend
from scopecheck.crash_explorers import GenericCrashExplorer
from scopecheck.crashsim.generic_sweep import SKIPPED
from scopecheck.fuzz import fuzz_backend, save_reproducer
from scopecheck.machine import rules_of_program

REPORT_ENV = "SCOPECHECK_VALIDATE_REPORT"
#: Share of the budget spent on crash exploration when the backend takes a FileSystem.
CRASH_SHARE = 0.3


@attrs.define
class Verdict:
    backend: str
    passed: bool = True
    failures: list[dict[str, Any]] = attrs.field(factory=list)
    machine_steps: int = 0
    conformance_tests: int = 0
    #: ``"ran"`` or :data:`scopecheck.crashsim.generic_sweep.SKIPPED` (CRASH-FS-8).
    crash_exploration: str = SKIPPED
    crash_states: int = 0
    #: Single-I/O-fault runs of the generic sweep (CRASH-FS-9..11).
    crash_fault_runs: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "passed": self.passed,
            "failures": self.failures,
            "machine_steps": self.machine_steps,
            "conformance_tests": self.conformance_tests,
            "crash_exploration": self.crash_exploration,
            "crash_states": self.crash_states,
            "crash_fault_runs": self.crash_fault_runs,
            "seconds": round(self.seconds, 2),
        }


def run_conformance(spec: str) -> tuple[int, list[dict[str, Any]]]:
    """Run the conformance modules (not the machine) against ``spec`` in a subprocess."""
    import scopecheck.conformance

    suite = Path(scopecheck.conformance.__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="scopecheck-validate-") as scratch:
        out = Path(scratch) / "report.json"
        env = {**os.environ, REPORT_ENV: str(out)}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "scopecheck.pytest_plugin",
            "-p",
            "scopecheck.validate_report",
            "-p",
            "no:cacheprovider",
            f"--scopecheck-backend={spec}",
            "--rootdir",
            str(suite),
            "-o",
            "addopts=",
            str(suite / "test_scoped_storage.py"),
            str(suite / "test_storage_cases.py"),
        ]
        subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if not out.exists():
            return 0, [
                {"rule": None, "reproducer": " ".join(command), "error": "pytest did not run"}
            ]
        data = orjson.loads(out.read_bytes())
    failures = []
    for test in data["failed"]:
        rerun = (
            f"pytest -p scopecheck.pytest_plugin --scopecheck-backend={spec} "
            f"'{suite / test['nodeid']}'"
        )
        for rule in test["rules"] or [None]:
            failures.append(
                {"rule": rule, "reproducer": rerun, "test": test["nodeid"], "error": test["error"]}
            )
    return data["ran"], failures


def validate(spec: str, budget: float, failures_dir: Path, seed: int) -> Verdict:
    import time

    from scopecheck.profiles import get_profile

    started = time.perf_counter()
    backend = load_backend(spec)
    verdict = Verdict(backend.name)
    explorer = backend.crash
    report = fuzz_backend(
        attrs.evolve(backend, crash=None),
        budget=budget * (1 - CRASH_SHARE) if explorer is not None else budget,
        seed=seed,
        settings=get_profile("ci"),
        failures_dir=failures_dir,
        profile="ci",
        spec=spec,
    )
    verdict.machine_steps = report.steps
    for path in report.reproducers:
        record = orjson.loads(Path(path).read_bytes())
        for rule in rules_of_program(record["program"]) or (None,):
            verdict.failures.append(
                {
                    "rule": rule,
                    "reproducer": f"scopecheck replay {path}",
                    "error": record["error"].splitlines()[0],
                }
            )
    if explorer is not None:
        verdict.crash_exploration = "ran"
        if isinstance(explorer, GenericCrashExplorer):
            verdict.crash_states, verdict.crash_fault_runs, records = explorer.explore_with_faults(
                budget * CRASH_SHARE, seed
            )
        else:
            verdict.crash_states, records = explorer.explore(budget * CRASH_SHARE, seed)
        for record in records:
            record["spec"] = spec
            saved = save_reproducer(failures_dir, record)
            verdict.failures.append(
                {
                    "rule": record["rule"],
                    "reproducer": f"scopecheck replay {saved}",
                    "error": str(record["error"]).removeprefix(f"{record['rule']}: "),
                }
            )
    verdict.conformance_tests, conformance_failures = run_conformance(spec)
    verdict.failures.extend(conformance_failures)
    verdict.passed = not verdict.failures
    verdict.seconds = time.perf_counter() - started
    return verdict
