"""``scopecheck validate PATH_OR_MODULE:FACTORY``: every check scopecheck has, against a backend
that lives outside this project, with a report that says what ran and what could not.

Phases, in order, each reported as ``ran``, ``failed`` or ``skipped`` with the reason
(INSTALL-6):

``machine``
    the storage machine against the model, in-process, for most of the budget (its failure is
    saved as a reproducer file that ``scopecheck replay`` reruns);
``forks``
    when the repository has ``fork()``: the fork machine for a share of the budget, and the
    fork conformance cases; otherwise skipped;
``crash exploration``
    when the factory takes ``fs`` and ``root``: :data:`CRASH_SHARE` of the budget on the
    generic crash sweep (crash states, then single I/O faults -- CRASH-FS-*); otherwise skipped,
    never passed (CRASH-FS-8);
``conformance``
    the shared conformance suite in a pytest subprocess with the plugin; each failing case is
    reported with the rules it checks, the assertion's message and diff, and the command that
    reruns exactly that case (INSTALL-7);
``restarts``
    whether the machine's restarts really restarted the backend (a factory taking ``root`` is
    called again over its directory; a repository's ``reopen()``), and how many ran.

The whole run happens inside one scratch directory that is removed at the end: every world's
directory, every temp file of scopecheck's and of the conformance subprocess, so a run leaves
nothing behind in the temporary directory (INSTALL-5).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import orjson

from scopecheck.adapters import (
    EXEC_CWD_ENV,
    Capabilities,
    LoadedBackend,
    RunCounts,
    anchored,
    load,
)
from scopecheck.fuzz import BackendReport, MachineKind, fuzz_backend, save_reproducer
from scopecheck.machine import rules_of_program
from scopecheck.validate_report import REPORT_ENV

#: Share of the budget spent on crash exploration when the backend takes a FileSystem.
CRASH_SHARE = 0.3
#: Share of the machine budget given to the fork machine when the repository has ``fork()``.
FORK_SHARE = 0.3
#: The phases of a verdict, in report order.
PHASES = ("machine", "forks", "crash exploration", "conformance", "restarts")
#: The conformance modules every backend runs, and the one that needs ``fork()``.
CONFORMANCE = ("test_scoped_storage.py", "test_storage_cases.py")
FORK_CONFORMANCE = "test_fork_cases.py"

#: Why crash exploration cannot run for a factory of this kind (CRASH-FS-8): never "passed".
#: A factory taking ``root`` or ``fs``, and a backend process, always get an explorer.
CRASH_SKIPPED = {
    "plain": "backend does not take a FileSystem: make_backend takes neither fs nor root",
}

Status = Literal["ran", "failed", "incomplete", "skipped", "pending", "running"]


@attrs.define
class PhaseReport:
    """One phase of a verdict: its status, one human line, and its counts."""

    status: Status = "pending"
    detail: str = ""
    counts: dict[str, int] = attrs.field(factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, **self.counts}


@attrs.define
class Verdict:
    """What ``validate`` found.  ``failures`` are dicts with ``phase``, ``rule`` (or
    ``None``), ``error`` (one line), ``reproducer`` (a command), and for conformance cases
    ``test`` and ``message`` (the assertion's explanation and diff)."""

    backend: str
    passed: bool = True
    failures: list[dict[str, Any]] = attrs.field(factory=list)
    phases: dict[str, PhaseReport] = attrs.field(factory=lambda: {p: PhaseReport() for p in PHASES})
    machine_steps: int = 0
    conformance_tests: int = 0
    #: ``"ran"`` or ``"skipped (...why...)"`` (CRASH-FS-8).
    crash_exploration: str = "skipped"
    crash_states: int = 0
    #: Single-I/O-fault runs of the generic sweep (CRASH-FS-9..11).
    crash_fault_runs: int = 0
    #: What crash exploration could not see or should not have seen (CRASH-SYS-4, CRASH-SYS-8).
    limits: list[str] = attrs.field(factory=list)
    #: What crash exploration covered, where its explorer measures it (CRASH-COV-2).
    crash_coverage: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """No phase stopped short of the ground it claims (an incomplete phase is no pass)."""
        return all(phase.status != "incomplete" for phase in self.phases.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "passed": self.passed,
            "phases": {name: phase.as_json() for name, phase in self.phases.items()},
            "failures": self.failures,
            "machine_steps": self.machine_steps,
            "conformance_tests": self.conformance_tests,
            "crash_exploration": self.crash_exploration,
            "crash_states": self.crash_states,
            "crash_fault_runs": self.crash_fault_runs,
            "complete": self.complete,
            "crash_coverage": self.crash_coverage,
            "limits": self.limits,
            "seconds": round(self.seconds, 2),
        }


class Progress(Protocol):
    """Where ``validate`` reports each phase as it goes (the CLI's live display)."""

    def update(self, phase: str, report: PhaseReport) -> None: ...


class _Quiet:
    def update(self, phase: str, report: PhaseReport) -> None:
        del phase, report


@contextlib.contextmanager
def scratch_directory() -> Iterator[str]:
    """A temporary directory that every temp file of the run goes under, removed at the end:
    ``tempfile``'s default, ``$TMPDIR`` for child processes and ``$SCOPECHECK_SCRATCH`` for
    the worlds' directories all point into it while the run lasts."""
    root = tempfile.mkdtemp(prefix="scopecheck-validate-")
    saved_tempdir = tempfile.tempdir
    saved_env = {k: os.environ.get(k) for k in ("TMPDIR", "SCOPECHECK_SCRATCH")}
    tempfile.tempdir = root
    os.environ["TMPDIR"] = root
    os.environ["SCOPECHECK_SCRATCH"] = root
    try:
        yield root
    finally:
        tempfile.tempdir = saved_tempdir
        for key, old in saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        shutil.rmtree(root, ignore_errors=True)


def rerun_command(spec: str, suite: Path, nodeid: str) -> str:
    """The command that reruns exactly one conformance case against ``spec``."""
    return shlex.join(
        [
            "python",
            "-m",
            "pytest",
            "-p",
            "scopecheck.pytest_plugin",
            "-o",
            "addopts=",
            f"--rootdir={suite}",
            f"--scopecheck-backend={spec}",
            str(suite / nodeid),
        ]
    )


def run_conformance(
    spec: str, *, forks: bool, on_progress: Any = None
) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the conformance modules (not the machine) against ``spec`` in a pytest subprocess;
    ``(tests run, failures, skipped)``.  ``on_progress(ran, failed)`` is called while it runs."""
    import scopecheck.conformance

    suite = Path(scopecheck.conformance.__file__).resolve().parent
    modules = [*CONFORMANCE, *([FORK_CONFORMANCE] if forks else [])]
    child_spec = anchored(spec, os.getcwd())  # the child runs in a scratch directory
    with tempfile.TemporaryDirectory(prefix="scopecheck-conformance-") as scratch:
        out = Path(scratch) / "report.json"
        env = {**os.environ, REPORT_ENV: str(out), EXEC_CWD_ENV: os.getcwd()}
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
            f"--scopecheck-backend={child_spec}",
            "--rootdir",
            str(suite),
            "-o",
            "addopts=",
            *(str(suite / module) for module in modules),
        ]
        log = Path(scratch) / "pytest.log"  # a file, not a pipe: a long report cannot block
        with (
            log.open("wb") as sink,
            subprocess.Popen(
                command, env=env, cwd=scratch, stdout=sink, stderr=subprocess.STDOUT
            ) as child,
        ):
            while child.poll() is None:
                time.sleep(0.2)
                if on_progress is not None and out.exists():
                    with contextlib.suppress(orjson.JSONDecodeError, OSError):
                        now = orjson.loads(out.read_bytes())
                        on_progress(now["ran"], len(now["failed"]))
        output = log.read_text(encoding="utf-8", errors="replace")
        if not out.exists() or not orjson.loads(out.read_bytes()).get("done"):
            tail = " | ".join(output.strip().splitlines()[-3:]) or "no output"
            return (
                0,
                [
                    {
                        "phase": "conformance",
                        "rule": None,
                        "error": f"the conformance run did not finish: {tail}",
                        "reproducer": shlex.join(command),
                    }
                ],
                [],
            )
        data = orjson.loads(out.read_bytes())
    failures: list[dict[str, Any]] = []
    for test in data["failed"]:
        rerun = rerun_command(spec, suite, test["nodeid"])
        if "ProtocolError" in test["error"]:  # the backend spoke the protocol wrongly
            test["rules"] = ["PROC-2"]
            if any(f["rule"] == "PROC-2" for f in failures):  # reported once (PROC-2)
                continue
        failures.append(
            {
                "phase": "conformance",
                "rule": (test["rules"] or [None])[0],
                "rules": test["rules"],
                "test": test["nodeid"],
                "error": test["error"],
                "message": test["message"],
                "reproducer": rerun,
            }
        )
    return int(data["ran"]), failures, list(data["skipped"])


def _cut(rest: list[str], keep: int = 40) -> str:
    """The lines after an error's first one, at most ``keep`` of them."""
    lines = rest[0].splitlines() if rest else []
    if len(lines) > keep:
        lines = [*lines[:keep], f"... ({len(lines) - keep} more lines)"]
    return "\n".join(lines)


def _machine_failures(report: BackendReport, phase: str) -> list[dict[str, Any]]:
    """Failures of a machine run (and of crash exploration), one per saved reproducer."""
    from scopecheck.fork_machine import FORK_STEP_RULES

    found = []
    for path in report.reproducers:
        record = orjson.loads(Path(path).read_bytes())
        if record.get("kind") == "machine":
            table = FORK_STEP_RULES if record.get("machine") == "fork" else None
            rules = rules_of_program(record.get("program", ""), table)
            first = str(record.get("error", "")).splitlines()[0:1] or [""]
            if first[0].startswith("ProtocolError"):  # the backend spoke the protocol wrongly
                rules = tuple(record.get("rules") or ("PROC-2",))
            found.append(
                {
                    "phase": phase,
                    "rule": rules[0] if rules else None,
                    "rules": list(rules),
                    "error": first[0],
                    "message": _cut(str(record.get("error", "")).split("\n", 1)[1:]),
                    "program": record.get("program", ""),
                    "reproducer": f"scopecheck replay {path}",
                }
            )
        else:
            rule = record.get("rule")
            message = str(record.get("error", "")).removeprefix(f"{rule}: ")
            found.append(
                {
                    "phase": phase,
                    "rule": rule,
                    "rules": [rule] if rule else [],
                    "error": message,
                    "reproducer": f"scopecheck replay {path}",
                }
            )
    return found


def protocol_stop(failures: list[dict[str, Any]]) -> str | None:
    """Why the phases after one where the backend broke the protocol do not run (PROC-2):
    what it answers can no longer be compared, and each would report the same failure."""
    for failure in failures:
        if failure.get("rule") in ("PROC-2", "PROC-8"):
            where, rule = failure["phase"], failure["rule"]
            return f"not run: the backend broke the protocol in the {where} ({rule})"
    return None


def _run_machine(
    loaded: LoadedBackend,
    kind: MachineKind,
    budget: float,
    seed: int,
    failures_dir: Path,
    spec: str,
    phase: str,
    verdict: Verdict,
    progress: Progress,
) -> BackendReport:
    from scopecheck.profiles import get_profile

    report_of = verdict.phases[phase]
    report_of.status = "running"

    def on_progress(report: BackendReport) -> None:
        report_of.detail = f"{kind} machine: {report.steps:,} steps, {report.examples:,} examples"
        progress.update(phase, report_of)

    progress.update(phase, report_of)
    return fuzz_backend(
        attrs.evolve(loaded.backend, crash=None),
        budget=budget,
        seed=seed,
        settings=get_profile("ci"),
        failures_dir=failures_dir,
        profile="ci",
        spec=spec,
        machine_kind=kind,
        on_progress=on_progress,
    )


def _restarts(capabilities: Capabilities, counts: RunCounts) -> PhaseReport:
    how = {
        "plain": "through the repository's reopen()",
        "root": "the factory called again over the same root",
        "fs": "the factory called again over the same root",
    }[capabilities.kind]
    if capabilities.process:
        how = "a new backend process over the same root"
    tallies = {"restarts": counts.restarts, "handle_reopens": counts.handle_reopens}
    if not capabilities.restarts:
        return PhaseReport(
            "skipped",
            "make_backend takes no root and the repository has no reopen(), so no "
            f"restart of the backend was tested ({counts.handle_reopens} restart steps only "
            "closed and reopened handles)",
            tallies,
        )
    if counts.restarts == 0:
        return PhaseReport(
            "skipped", "the machine reached no restart step (raise --budget)", tallies
        )
    return PhaseReport("ran", f"{counts.restarts:,} restarts ({how})", tallies)


def validate(
    spec: str,
    budget: float = 20.0,
    failures_dir: Path | str = ".scopecheck/failures",
    seed: int = 0,
    progress: Progress | None = None,
) -> Verdict:
    """Check the backend ``PATH_OR_MODULE:FACTORY`` with every phase it can take (see the
    module docstring); a ``UsageError`` when ``spec`` cannot be loaded."""
    started = time.perf_counter()
    progress = _Quiet() if progress is None else progress
    failures_dir = Path(failures_dir).resolve()
    with scratch_directory():
        loaded = load(spec)
        capabilities = loaded.capabilities
        verdict = Verdict(loaded.backend.name)
        explorer = loaded.backend.crash
        phases = verdict.phases
        machine_budget = budget * (1 - CRASH_SHARE) if explorer is not None else budget
        fork_budget = machine_budget * FORK_SHARE if capabilities.fork else 0.0

        storage = _run_machine(
            loaded, "storage", machine_budget - fork_budget, seed, failures_dir, spec,
            "machine", verdict, progress,
        )  # fmt: skip
        verdict.machine_steps = storage.steps
        failures = _machine_failures(storage, "machine")
        verdict.failures.extend(failures)
        stopped = protocol_stop(verdict.failures)
        phases["machine"] = PhaseReport(
            "failed" if failures else "ran",
            f"{storage.steps:,} steps, {storage.examples:,} examples",
            {"steps": storage.steps, "examples": storage.examples},
        )
        progress.update("machine", phases["machine"])

        if capabilities.fork and stopped is None:
            forked = _run_machine(
                loaded, "fork", fork_budget, seed, failures_dir, spec, "forks", verdict, progress
            )
            fork_failures = _machine_failures(forked, "forks")
            verdict.failures.extend(fork_failures)
            stopped = protocol_stop(verdict.failures)
            phases["forks"] = PhaseReport(
                "failed" if fork_failures else "running",
                f"fork machine: {forked.steps:,} steps; fork conformance cases with the suite",
                {"fork_machine_steps": forked.steps},
            )
        else:
            phases["forks"] = PhaseReport("skipped", stopped or "the repository has no fork()")
        progress.update("forks", phases["forks"])

        why = explorer.unavailable if explorer is not None else None
        if explorer is not None and why is None and stopped is None:
            verdict.crash_exploration = "ran"
            phases["crash exploration"] = PhaseReport("running", "crash states and I/O faults")
            progress.update("crash exploration", phases["crash exploration"])
            crash = BackendReport()
            states, faults, records = explorer.explore_with_faults(budget * CRASH_SHARE, seed)
            kills = explorer.kill_runs
            verdict.crash_states, verdict.crash_fault_runs = states, faults - kills
            for record in records:
                record["spec"] = spec
                crash.reproducers.append(str(save_reproducer(failures_dir, record)))
            crash_failures = _machine_failures(crash, "crash exploration")
            verdict.failures.extend(crash_failures)
            how = explorer.how
            detail = f"{states:,} crash states, {faults - kills:,} I/O-fault runs"
            if kills:
                detail += f", {kills:,} kill runs"
            limits = list(explorer.limits)
            detail += f" ({how})"
            status: Status = "failed" if crash_failures else "ran"
            coverage = explorer.coverage
            counts = {
                "crash_states": states,
                "crash_fault_runs": faults - kills,
                "kill_runs": kills,
            }
            if coverage is not None:
                detail += f"; {coverage.describe()}"
                counts.update(
                    acked_covered=coverage.acked_covered,
                    acked_total=coverage.acked_total,
                    points_checked=coverage.points_checked,
                    points_total=coverage.points_total,
                )
                verdict.crash_coverage = coverage.to_json()
                if not coverage.complete and not crash_failures:
                    status = "incomplete"
                    detail += (
                        f" -- INCOMPLETE: {coverage.acked_total - coverage.acked_covered} "
                        "acknowledged steps had no crash state checked after them; raise --budget"
                    )
            detail += "".join(f"; limit: {limit}" for limit in limits)
            phases["crash exploration"] = PhaseReport(status, detail, counts)
            verdict.crash_exploration = status
            verdict.limits = limits
        else:
            reason = (
                stopped
                or why
                or CRASH_SKIPPED.get(capabilities.kind, "the backend has no crash explorer")
            )
            verdict.crash_exploration = f"skipped ({reason})"
            phases["crash exploration"] = PhaseReport("skipped", reason)
        progress.update("crash exploration", phases["crash exploration"])

        phases["conformance"] = PhaseReport("running", "starting pytest")
        progress.update("conformance", phases["conformance"])

        def conformance_progress(ran: int, failed: int) -> None:
            phases["conformance"].detail = f"{ran} cases, {failed} failed"
            progress.update("conformance", phases["conformance"])

        ran, conformance_failures, skipped = (
            run_conformance(spec, forks=capabilities.fork, on_progress=conformance_progress)
            if stopped is None
            else (0, [], [])
        )
        verdict.conformance_tests = ran
        verdict.failures.extend(conformance_failures)
        fork_cases = [f for f in conformance_failures if FORK_CONFORMANCE in f.get("test", "")]
        phases["conformance"] = PhaseReport(
            "failed" if conformance_failures else "ran",
            f"{ran} cases, {len(conformance_failures)} failed, {len(skipped)} skipped",
            {"cases": ran, "failed": len(conformance_failures), "skipped": len(skipped)},
        )
        if stopped is not None:
            phases["conformance"] = PhaseReport("skipped", stopped)
        progress.update("conformance", phases["conformance"])
        if capabilities.fork and stopped is None:
            for failure in fork_cases:
                failure["phase"] = "forks"
            forks = phases["forks"]
            forks.status = "failed" if fork_cases or forks.status == "failed" else "ran"
            forks.detail = forks.detail.replace(
                "fork conformance cases with the suite",
                f"{len(fork_cases)} fork conformance cases failed"
                if fork_cases
                else "fork conformance cases passed",
            )
            progress.update("forks", forks)

        phases["restarts"] = _restarts(capabilities, loaded.counts)
        if stopped is not None and phases["restarts"].status == "skipped":
            phases["restarts"] = PhaseReport("skipped", stopped)
        if loaded.backend.close is not None:
            loaded.backend.close()
        progress.update("restarts", phases["restarts"])
    verdict.passed = not verdict.failures and verdict.complete
    verdict.seconds = time.perf_counter() - started
    return verdict
