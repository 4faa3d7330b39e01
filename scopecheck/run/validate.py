"""``scopecheck validate PATH_OR_MODULE:FACTORY``: every check scopecheck has, against a backend
that lives outside this project, with one verdict that says what ran and what could not.

Phases, reported in this order, each ``ran``, ``failed``, ``incomplete`` or ``skipped`` with the
reason (INSTALL-6):

``machine``
    the storage machine against the model, in-process (each distinct failure is saved as a
    reproducer file holding its own choice sequence, which ``scopecheck replay`` reruns
    exactly, INSTALL-17);
``forks``
    when the repository has ``fork()``: the fork machine and the fork conformance cases;
    otherwise skipped;
``crash exploration``
    when the backend has a crash explorer that can run here (a factory taking ``fs`` and
    ``root``: the generic crash sweep; a factory taking ``root`` or a backend process: its
    system calls): crash states, then single I/O faults (CRASH-FS-*, CRASH-SYS-*); otherwise
    skipped with the reason, never passed (CRASH-FS-8);
``conformance``
    the shared conformance suite in a pytest subprocess with the plugin; each failing case is
    reported with the rules it checks, the assertion's message and diff, and the command that
    reruns exactly that case (INSTALL-7);
``restarts``
    whether the machine's restarts really restarted the backend (a factory taking ``root`` is
    called again over its directory; a repository's ``reopen()``), and how many ran.

**The budget is the wall time of the whole run** (INSTALL-11), counted from the start of the
process when the CLI runs it: the fixed work comes first -- loading the backend and the
conformance suite, whose cases are a fixed set -- and what is left is divided:
:data:`CRASH_SHARE` of it to crash exploration when it runs (next, since its first round is
owed whatever the budget), then :data:`FORK_SHARE` of what is left after it to the fork
machine when the repository has ``fork()``, and the storage machine the rest.
The machines run in rounds sized to what is left (at least one example each, so a budget spent
by the fixed work still runs the machine once), and shrinking a failure stops when the budget
is spent: that failure is reported unshrunk, and says so.  Crash exploration checks a state
after every acknowledged step of its first workload and makes its first fault and kill runs
even past its share, up to the end of the whole budget and :func:`crash_overrun` of it (a
tenth, at least 2 s) more; what did not fit leaves the phase ``incomplete``, saying what to
raise (CRASH-COV-2, CRASH-COV-4).  With
``examples`` each machine runs exactly that many examples in fixed rounds instead, so the same
seed and examples do the same work every time (INSTALL-12): crash exploration then makes
one round's fixed work (``explore`` with an infinite budget) instead of filling its share.

Every renderer -- the CLI's summary, ``--json`` (:data:`VERSION`, ``docs/validate-json.md``,
``scopecheck/schemas/verdict.schema.json``) and the pytest plugin's summary -- reads one
:class:`Verdict`, whose top-level figures are computed from its phases, so the two cannot
disagree (INSTALL-10).

The whole run happens inside one scratch directory that is removed at the end: every world's
directory, every temp file of scopecheck's and of the conformance subprocess, so a run leaves
nothing behind in the temporary directory (INSTALL-5).  A failure or a limit naming a file
under a world's or a crash image's directory names it relative to that root, as
``<root>/...``, and each limit is listed once (INSTALL-18).
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import orjson

from scopecheck.backends.adapters import (
    EXEC_CWD_ENV,
    Capabilities,
    LoadedBackend,
    RunCounts,
    anchored,
    load,
)
from scopecheck.backends.registry import Backend
from scopecheck.crashsim.failure import CrashFailure, profiles_text
from scopecheck.crashsim.persistence import PROFILE_NAMES, profile_named
from scopecheck.crashsim.shards import UNIT_KINDS, Shard, Units
from scopecheck.crashsim.shown import escaped
from scopecheck.machines.storage import rules_of_program
from scopecheck.models.errors import UsageError
from scopecheck.run.example_db import named_database
from scopecheck.run.fuzz import BackendReport, MachineKind, SavedFailure, fuzz_backend, save_failure
from scopecheck.run.hypofuzz import Replayed, replay_crash_findings
from scopecheck.run.internal import EXIT_INTERNAL, InternalError
from scopecheck.run.report_plugin import REPORT_ENV, SHARD_ENV
from scopecheck.run.severity import SEVERITIES, WORDS, Severity, severity_of, worst
from scopecheck.run.stopping import SO_FAR_ENV
from scopecheck.run.watchdog import Overrun, limit

#: The version of the verdict's JSON (``"version"``); a change to its fields changes it and
#: ``scopecheck/schemas/verdict.schema.json`` (INSTALL-10).
VERSION = 5
#: Share of what is left of the budget after the fixed work that crash exploration gets.
CRASH_SHARE = 0.3
#: Share of the machines' time given to the fork machine when the repository has ``fork()``.
FORK_SHARE = 0.3
#: The phases of a verdict, in report order.
PHASES = ("machine", "forks", "crash exploration", "conformance", "restarts")
#: The names ``--require`` takes, and the phase each one names (INSTALL-13).
REQUIRABLE = {
    "machine": "machine",
    "forks": "forks",
    "crash": "crash exploration",
    "conformance": "conformance",
    "restarts": "restarts",
}
#: The phase whose ground each kind of fixed work is (FLEET-5).
UNIT_PHASES = {
    "conformance cases": "conformance",
    "crash points": "crash exploration",
    "fault runs": "crash exploration",
}
#: The conformance modules every backend runs, and the one that needs ``fork()``.
CONFORMANCE = ("test_scoped_storage.py", "test_storage_cases.py")
FORK_CONFORMANCE = "test_fork_cases.py"

#: Why crash exploration cannot run for a factory of this kind (CRASH-FS-8): never "passed".
#: A factory taking ``root`` or ``fs``, and a backend process, always get an explorer.
CRASH_SKIPPED = {
    "plain": "backend does not take a FileSystem: make_backend takes neither fs nor root",
}

Status = Literal["ran", "failed", "incomplete", "skipped", "pending", "running"]

#: The exit code of a run a signal stopped: 128 + the signal's number, as a shell reports it.
STOP_CODES = {"SIGHUP": 129, "SIGINT": 130, "SIGTERM": 143}
#: A fixed-work phase (the conformance suite, a run with ``--examples``) still running after
#: this many seconds is stopped and reported incomplete (``--phase-timeout``, INSTALL-20).
PHASE_TIMEOUT = 600.0


class Stopped(KeyboardInterrupt):
    """The run was stopped by ``signal`` (``"SIGINT"``, ``"SIGTERM"``) before its end:
    ``verdict`` is the verdict so far (INSTALL-21).  A ``KeyboardInterrupt``, so a caller that
    does not look at it still stops."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.stopped)
        self.verdict = verdict


@attrs.frozen
class PhaseReport:
    """One phase of a verdict: its status, one human line, its counts, and the wall time it
    took (how the budget was spent, INSTALL-11)."""

    status: Status = "pending"
    detail: str = ""
    counts: Mapping[str, int] = attrs.field(factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 2),
            **self.counts,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseReport:
        """A phase of a ``--json`` verdict (:meth:`as_json`)."""
        counts = {k: int(v) for k, v in data.items() if k not in ("status", "detail", "seconds")}
        return cls(data["status"], str(data["detail"]), counts, float(data["seconds"]))


@attrs.frozen
class Failure:
    """One failing check: its phase, the rules it broke (the first is ``rule``; ``None`` when
    none can be named), one line of error, the command that reruns it, and where it has them
    the conformance case (``test``), the explanation and diff (``message``), the machine's
    shrunk program (``program``) -- ``shrunk`` is false when shrinking stopped because the
    budget was spent (INSTALL-11)."""

    phase: str
    rule: str | None
    #: The texts may quote what a backend said: lone surrogates escaped, so they print.
    error: str = attrs.field(converter=escaped)
    reproducer: str = attrs.field(converter=escaped)
    rules: tuple[str, ...] = ()
    test: str = attrs.field(default="", converter=escaped)
    message: str = attrs.field(default="", converter=escaped)
    program: str = attrs.field(default="", converter=escaped)
    shrunk: bool = True
    #: For a crash failure of a power-loss image, the file-system profiles it happens under
    #: (CRASH-SYS-15); empty: under every profile (or not a crash failure).
    profiles: tuple[str, ...] = ()
    #: What it puts at risk (CHECK-10): by its rule unless given (a crash failure's kind
    #: tells the halves of CRASH-FS-9 apart, :func:`failures_of`).
    severity: Severity = attrs.field(
        default=attrs.Factory(lambda self: severity_of(self.rule), takes_self=True)
    )

    @property
    def not_profiles(self) -> tuple[str, ...]:
        """The profiles under which it does not happen."""
        if not self.profiles:
            return ()
        return tuple(name for name in PROFILE_NAMES if name not in self.profiles)

    def fails_under(self, profile: str) -> bool:
        return not self.profiles or profile in self.profiles

    def as_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "rule": self.rule,
            "rules": list(self.rules),
            "error": self.error,
            "test": self.test,
            "message": self.message,
            "program": self.program,
            "shrunk": self.shrunk,
            "reproducer": self.reproducer,
            "profiles": list(self.profiles or PROFILE_NAMES),
            "not_profiles": list(self.not_profiles),
            "severity": self.severity,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        """A failure of a ``--json`` verdict (:meth:`as_json`): every profile listed is none
        named."""
        profiles = tuple(str(name) for name in data["profiles"])
        return cls(
            phase=str(data["phase"]), rule=data["rule"], error=str(data["error"]),
            reproducer=str(data["reproducer"]), rules=tuple(data["rules"]),
            test=str(data["test"]), message=str(data["message"]),
            program=str(data["program"]), shrunk=bool(data["shrunk"]),
            profiles=() if set(profiles) == set(PROFILE_NAMES) else profiles,
            severity=_severity(data["severity"]),
        )  # fmt: skip


def _severity(value: object) -> Severity:
    for name in SEVERITIES:
        if value == name:
            return name
    raise ValueError(f"unknown severity {value!r}")


def _phases(value: Mapping[str, PhaseReport]) -> Mapping[str, PhaseReport]:
    """Every phase of :data:`PHASES`, in report order; one not given is ``pending``."""
    unknown = set(value) - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phases {sorted(unknown)}")
    return {name: value.get(name, PhaseReport()) for name in PHASES}


def _once(limits: Sequence[str]) -> tuple[str, ...]:
    """Each limit once, in the order first said: a round's limit repeated by the next round
    (every round has a fresh root, shown as ``<root>``) is one limit."""
    return tuple(dict.fromkeys(limits))


@attrs.frozen
class Verdict:
    """What a validation found: the one value every renderer reads (INSTALL-10).

    The phases and the failures are what was observed; every other figure -- ``passed``,
    ``machine_steps``, ``crash_exploration``, ``crash_states``, ... -- is computed from them,
    so no renderer can show a top-level figure that disagrees with a phase.  ``required``
    names the phases that must run (``--require``): one of them skipped or incomplete is
    ``unmet`` and fails the verdict (INSTALL-13)."""

    backend: str
    phases: Mapping[str, PhaseReport] = attrs.field(factory=dict, converter=_phases)
    failures: tuple[Failure, ...] = ()
    #: Crash failures that happen only under file-system profiles other than ``fs_profile``:
    #: listed, never failing the verdict (CRASH-SYS-15).
    warnings: tuple[Failure, ...] = ()
    #: The file-system profile a crash failure must happen under to fail the verdict.
    fs_profile: str = "posix"
    #: What crash exploration could not see or should not have seen (CRASH-SYS-4, CRASH-SYS-8),
    #: each once.
    limits: tuple[str, ...] = attrs.field(default=(), converter=_once)
    #: What crash exploration covered, where its explorer measures it (CRASH-COV-2).
    crash_coverage: Mapping[str, Any] | None = None
    required: tuple[str, ...] = ()
    #: The wall-time budget in seconds, and the fixed number of machine examples if one was
    #: asked for (INSTALL-11, INSTALL-12).
    budget: float | None = None
    examples: int | None = None
    seed: int = 0
    seconds: float = 0.0
    #: The shares of the fixed work this verdict holds (FLEET-4): one for ``--shard K/N``,
    #: those joined for ``scopecheck merge``, none for a whole run.
    shards: tuple[Shard, ...] = ()
    #: What the fixed work covered, by kind (:data:`UNIT_PHASES`): a run with ``--examples``
    #: lists its conformance cases, crash points and fault runs (FLEET-5).
    units: Mapping[str, Units] = attrs.field(factory=dict)
    #: scopecheck's own exceptions during a phase, each leaving it incomplete (INSTALL-19).
    internal_errors: tuple[InternalError, ...] = ()
    #: The signal that stopped the run before its end (``"SIGTERM"``, ``"SIGINT"``), or the
    #: supervisor's ``"hang"``: this is the verdict so far (INSTALL-21).
    stopped: str | None = None

    def _count(self, phase: str, name: str) -> int:
        return int(self.phases[phase].counts.get(name, 0))

    @property
    def complete(self) -> bool:
        """No phase stopped short of the ground it claims (an incomplete phase is no pass)."""
        return all(phase.status != "incomplete" for phase in self.phases.values())

    @property
    def unmet(self) -> tuple[str, ...]:
        """The required phases that were skipped or incomplete (INSTALL-13)."""
        return tuple(
            name for name in self.required if self.phases[name].status in ("skipped", "incomplete")
        )

    @property
    def passed(self) -> bool:
        return not self.failures and self.complete and not self.unmet

    @property
    def outcome(self) -> Literal["passed", "failed", "incomplete"]:
        """``failed`` with a failing check or an unmet requirement; ``incomplete`` when a
        phase did not cover its ground; else ``passed``."""
        if self.failures or self.unmet:
            return "failed"
        return "passed" if self.complete else "incomplete"

    @property
    def exit_code(self) -> int:
        """The command's exit code (``docs/validate-json.md``, "Exit codes"): 128 + the
        signal's number when a signal stopped the run (INSTALL-21), :data:`EXIT_INTERNAL`
        after an internal error (INSTALL-19), 0 when it passed, else 1."""
        if self.stopped in STOP_CODES:
            return STOP_CODES[self.stopped]
        if self.internal_errors:
            return EXIT_INTERNAL
        return 0 if self.passed else 1

    @property
    def severity(self) -> Severity | None:
        """The worst class among the failures that fail the verdict (CHECK-10)."""
        return worst([failure.severity for failure in self.failures])

    @property
    def machine_steps(self) -> int:
        return self._count("machine", "steps")

    @property
    def conformance_tests(self) -> int:
        return self._count("conformance", "cases")

    @property
    def crash_exploration(self) -> str:
        """The crash phase's status, with its reason when skipped (CRASH-FS-8)."""
        phase = self.phases["crash exploration"]
        return f"skipped ({phase.detail})" if phase.status == "skipped" else phase.status

    @property
    def crash_states(self) -> int:
        return self._count("crash exploration", "crash_states")

    @property
    def crash_fault_runs(self) -> int:
        """Single-I/O-fault runs (CRASH-FS-9..11); kill runs are ``kill_runs``."""
        return self._count("crash exploration", "crash_fault_runs")

    @property
    def kill_runs(self) -> int:
        return self._count("crash exploration", "kill_runs")

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` object, version :data:`VERSION` (``docs/validate-json.md``)."""
        return {
            "version": VERSION,
            "backend": self.backend,
            "outcome": self.outcome,
            "passed": self.passed,
            "complete": self.complete,
            "phases": {name: phase.as_json() for name, phase in self.phases.items()},
            "severity": self.severity,
            "failures": [failure.as_json() for failure in self.failures],
            "warnings": [failure.as_json() for failure in self.warnings],
            "fs_profile": self.fs_profile,
            "required": [_requirement_name(name) for name in self.required],
            "unmet": [_requirement_name(name) for name in self.unmet],
            "machine_steps": self.machine_steps,
            "conformance_tests": self.conformance_tests,
            "crash_exploration": self.crash_exploration,
            "crash_states": self.crash_states,
            "crash_fault_runs": self.crash_fault_runs,
            "kill_runs": self.kill_runs,
            "crash_coverage": dict(self.crash_coverage) if self.crash_coverage else None,
            "limits": list(self.limits),
            "budget": self.budget,
            "examples": self.examples,
            "seed": self.seed,
            "seconds": round(self.seconds, 2),
            "shard": shard_json(self.shards),
            "units": {kind: self.units[kind].to_json() for kind in UNIT_KINDS
                      if kind in self.units},
            "internal_errors": [error.as_json() for error in self.internal_errors],
            "stopped": self.stopped,
            "exit_code": self.exit_code,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        """The verdict a ``--json`` object (version :data:`VERSION`) holds; a ``ValueError``
        saying what is wrong for anything else."""
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            found = data.get("version") if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"not a version-{VERSION} verdict (version {found!r})")
        try:
            shard = data["shard"]
            shards = () if shard is None else tuple(
                Shard(int(index), int(shard["count"])) for index in shard["indices"]
            )  # fmt: skip
            unknown = set(data["units"]) - set(UNIT_KINDS)
            if unknown:
                raise ValueError(f"unknown units {sorted(unknown)}")
            return cls(
                backend=str(data["backend"]),
                phases={name: PhaseReport.from_json(p) for name, p in data["phases"].items()},
                failures=tuple(Failure.from_json(f) for f in data["failures"]),
                warnings=tuple(Failure.from_json(f) for f in data["warnings"]),
                fs_profile=str(data["fs_profile"]),
                limits=tuple(str(limit) for limit in data["limits"]),
                crash_coverage=data["crash_coverage"],
                required=tuple(REQUIRABLE[name] for name in data["required"]),
                budget=data["budget"],
                examples=data["examples"],
                seed=int(data["seed"]),
                seconds=float(data["seconds"]),
                shards=shards,
                units={kind: Units.from_json(u) for kind, u in data["units"].items()},
                internal_errors=tuple(InternalError.from_json(e) for e in data["internal_errors"]),
                stopped=data["stopped"],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a malformed verdict: {type(exc).__name__}: {exc}") from None


def shard_json(shards: Sequence[Shard]) -> dict[str, Any] | None:
    """``{"count": N, "indices": [K, ...]}`` of a shard's (or merged shards') verdict."""
    if not shards:
        return None
    return {"count": shards[0].count, "indices": [shard.index for shard in shards]}


def _requirement_name(phase: str) -> str:
    return next(key for key, value in REQUIRABLE.items() if value == phase)


def parse_required(text: str) -> tuple[str, ...]:
    """``"crash,forks"`` → the phases they name, in report order; an unknown name is a
    ``UsageError`` naming the choices (INSTALL-13)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in REQUIRABLE]
    if unknown:
        raise UsageError(
            "invalid_query",
            f"--require: unknown phase {unknown[0]!r}; choose from {', '.join(REQUIRABLE)}",
        )
    chosen = {REQUIRABLE[name] for name in names}
    return tuple(phase for phase in PHASES if phase in chosen)


# -- rendering -------------------------------------------------------------------------------

#: Printed program lines that are invariants or teardown, not the steps that found the bug.
_BOOKKEEPING = frozenset({"state.same_state()", "state.same_sources()", "state.teardown()"})

STATUS_WORDS = {
    "ran": "ran",
    "failed": "FAILED",
    "incomplete": "INCOMPLETE",
    "skipped": "skipped",
    "running": "running",
    "pending": "pending",
}


def headline(verdict: Verdict) -> str:
    """``PASSED name (12.3s)``, ``FAILED name, N failing checks (…)``, or ``INCOMPLETE …``;
    a run stopped by a signal, or one that met an internal error, says so."""
    took = f"({verdict.seconds:.1f}s)"
    also = ""
    if verdict.internal_errors:
        phases = ", ".join(dict.fromkeys(e.phase for e in verdict.internal_errors))
        also += f"; scopecheck itself failed in {phases} (an internal error, not the backend's)"
    if verdict.stopped is not None:
        also += (
            f"; stopped by {verdict.stopped}: the verdict so far"
            if verdict.stopped != "hang"
            else "; stopped from outside after a hang: the verdict so far"
        )
    if verdict.outcome == "failed":
        parts = []
        if verdict.failures:
            parts.append(f"{len(verdict.failures)} failing checks")
            if verdict.severity is not None:
                parts[-1] += f" (worst: {WORDS[verdict.severity]})"
        if verdict.unmet:
            parts.append(f"{len(verdict.unmet)} required phases did not run")
        return f"FAILED {verdict.backend}, {', '.join(parts)}{also} {took}"
    if verdict.outcome == "incomplete":
        ground = "a phase did not cover its ground" if not also else also.removeprefix("; ")
        return f"INCOMPLETE {verdict.backend}, {ground} {took}"
    if verdict.warnings:
        return (
            f"PASSED {verdict.backend} under {verdict.fs_profile}, {len(verdict.warnings)} "
            f"warnings (failures under other file-system profiles) {took}"
        )
    return f"PASSED {verdict.backend} {took}"


def severity_line(failures: Sequence[Failure]) -> str:
    """``2 acknowledged data lost or unreadable; 1 a failed commit reappears``: the failures
    by class, worst first (CHECK-10)."""
    counts = {name: sum(1 for f in failures if f.severity == name) for name in SEVERITIES}
    return "; ".join(f"{count} {WORDS[name]}" for name, count in counts.items() if count)


def shards_line(verdict: Verdict) -> str:
    """``  shards: 2/4 -- 38 of 152 conformance cases, ...``: which shares of the fixed work
    the verdict holds and how much of each kind they made (FLEET-4, FLEET-5)."""
    count = verdict.shards[0].count
    which = ", ".join(str(shard.index) for shard in verdict.shards)
    held = f"{which} of {count}"
    made = ", ".join(
        f"{len(units.ids):,} of {units.total:,} {kind}" for kind, units in verdict.units.items()
    )
    return f"  {'shards:':<19}{held}" + (f" -- {made}" if made else "")


def phase_line(name: str, phase: PhaseReport) -> str:
    return f"  {name + ':':<19}{STATUS_WORDS.get(phase.status, phase.status)} {phase.detail}"


def summary_lines(verdict: Verdict) -> list[str]:
    """The human summary: the headline, one line per phase, a line per unmet requirement,
    then each failure with its rules, error, explanation, steps and rerun command."""
    lines = [headline(verdict)]
    lines += [phase_line(name, phase) for name, phase in verdict.phases.items()]
    if verdict.shards:
        lines.append(shards_line(verdict))
    for name in verdict.unmet:
        phase = verdict.phases[name]
        lines.append(
            f"REQUIRED {name} was {phase.status} ({phase.detail}): "
            f"--require {_requirement_name(name)} makes that a failure"
        )
    if verdict.failures:
        lines.append(f"  {'at risk:':<19}{severity_line(verdict.failures)}")
    for error in verdict.internal_errors:
        lines += ["", *error.lines()]
    ordered = sorted(verdict.failures, key=lambda f: SEVERITIES.index(f.severity))
    for failure, warned in [(f, False) for f in ordered] + [(f, True) for f in verdict.warnings]:
        rules = ", ".join(failure.rules) or failure.rule or "(no rule)"
        head = f"{rules} ({failure.phase}): {failure.error}"
        lines += ["", f"WARNING {head}" if warned else head]
        lines.append(f"  at risk: {WORDS[failure.severity]}")
        if failure.phase == "crash exploration":
            lines.append(f"  file-system profiles: fails {profiles_text(failure.profiles)}")
        if warned:
            lines.append(
                f"  not under --fs-profile {verdict.fs_profile}: listed, does not fail the "
                "verdict (CRASH-SYS-15)"
            )
        if failure.test:
            lines.append(f"  case: {failure.test}")
        lines += [f"    {line}" for line in failure.message.splitlines()]
        steps = [
            line
            for line in failure.program.splitlines()
            if line.startswith("state.") and line not in _BOOKKEEPING
        ]
        if steps:
            lines.append("  steps (not shrunk: the budget was spent):" if not failure.shrunk
                         else "  steps:")  # fmt: skip
            lines += [f"    {line}" for line in steps]
        lines.append(f"  rerun: {here(failure.reproducer)}")
    return lines


def here(command: str) -> str:
    """``command`` with each argument that is an absolute path under the working directory
    written relative to it: the ``rerun:`` line a user copies where they ran ``validate``.
    The verdict's JSON keeps the absolute command, which works from anywhere."""
    try:
        words = shlex.split(command)
        cwd = os.getcwd()
    except (ValueError, OSError):
        return command
    shown = [
        os.path.relpath(word, cwd)
        if os.path.isabs(word) and os.path.commonpath([word, cwd]) == cwd and word != cwd
        else word
        for word in words
    ]
    return command if shown == words else shlex.join(shown)


# -- running ---------------------------------------------------------------------------------


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


def conformance_failure(test: Mapping[str, Any], reproducer: str, phase: str) -> Failure:
    """A failed conformance case (``validate_report``'s record) as a :class:`Failure`: a
    protocol error is PROC-2 whatever the case checks."""
    rules = tuple(test.get("rules") or ())
    if "ProtocolError" in str(test.get("error", "")):  # the backend spoke the protocol wrongly
        rules = ("PROC-2",)
    return Failure(
        phase=phase,
        rule=rules[0] if rules else None,
        rules=rules,
        test=str(test["nodeid"]),
        error=str(test.get("error", "")),
        message=str(test.get("message", "")),
        reproducer=reproducer,
    )


@attrs.frozen
class ConformanceRun:
    """What the conformance subprocess reported: cases run, failures, the skipped cases with
    their reasons, and the cases it made (``None`` when it did not finish).  ``unfinished``
    says why it was stopped before its end (INSTALL-20), what it had run being kept."""

    ran: int
    failures: tuple[Failure, ...]
    skipped: tuple[Mapping[str, Any], ...]
    units: Units | None = None
    unfinished: str | None = None


def run_conformance(
    spec: str, *, forks: bool, on_progress: Any = None, shard: Shard | None = None
) -> ConformanceRun:
    """Run the conformance modules (not the machine) against ``spec`` in a pytest subprocess
    (with ``shard``, only its share of the cases, FLEET-4).  ``on_progress(ran, failed)`` is
    called while it runs."""
    import scopecheck.conformance

    suite = Path(scopecheck.conformance.__file__).resolve().parent
    modules = [*CONFORMANCE, *([FORK_CONFORMANCE] if forks else [])]
    child_spec = anchored(spec, os.getcwd())  # the child runs in a scratch directory
    with tempfile.TemporaryDirectory(prefix="scopecheck-conformance-") as scratch:
        out = Path(scratch) / "report.json"
        env = {**os.environ, REPORT_ENV: str(out), EXEC_CWD_ENV: os.getcwd()}
        env.pop(SHARD_ENV, None)
        if shard is not None:
            env[SHARD_ENV] = str(shard)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "scopecheck.pytest_plugin",
            "-p",
            "scopecheck.run.report_plugin",
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
        unfinished: str | None = None
        with log.open("wb") as sink:
            # Its own process group: a stopped run stops the backends it started too.
            child = subprocess.Popen(
                command, env=env, cwd=scratch, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                while child.poll() is None:
                    time.sleep(0.2)
                    if on_progress is not None and out.exists():
                        with contextlib.suppress(orjson.JSONDecodeError, OSError):
                            now = orjson.loads(out.read_bytes())
                            on_progress(now["ran"], len(now["failed"]))
            except Overrun as exc:
                case = _running_case(out)
                unfinished = str(exc) + (f" (running {case})" if case else "")
            finally:
                _stop_group(child)
        output = log.read_text(encoding="utf-8", errors="replace")
        if unfinished is not None:
            if out.exists():
                return _partial_conformance(out, spec, suite, unfinished)
            return ConformanceRun(0, (), (), None, unfinished)
        if not out.exists() or not orjson.loads(out.read_bytes()).get("done"):
            tail = " | ".join(output.strip().splitlines()[-3:]) or "no output"
            broken = Failure(
                phase="conformance",
                rule=None,
                error=f"the conformance run did not finish: {tail}",
                reproducer=shlex.join(command),
            )
            return ConformanceRun(0, (broken,), ())
        data = orjson.loads(out.read_bytes())
    failures = [
        conformance_failure(test, rerun_command(spec, suite, test["nodeid"]), "conformance")
        for test in data["failed"]
    ]
    first = next((f for f in failures if f.rule == "PROC-2"), None)
    failures = [f for f in failures if f.rule != "PROC-2" or f is first]  # reported once
    units = Units.from_json(data["units"]) if "units" in data else None
    return ConformanceRun(int(data["ran"]), tuple(failures), tuple(data["skipped"]), units)


def _running_case(report: Path) -> str:
    """The case the conformance run was in when it was stopped (its report names it)."""
    with contextlib.suppress(orjson.JSONDecodeError, OSError):
        return str(orjson.loads(report.read_bytes()).get("running") or "")
    return ""


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """Stop ``child`` and every process of its group: SIGTERM, then SIGKILL after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        if child.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # what it started and left behind


def _partial_conformance(out: Path, spec: str, suite: Path, unfinished: str) -> ConformanceRun:
    """What a conformance run stopped by the watchdog had run: its failures are real."""
    data = orjson.loads(out.read_bytes())
    failures = [
        conformance_failure(test, rerun_command(spec, suite, test["nodeid"]), "conformance")
        for test in data["failed"]
        if test.get("nodeid") != data.get("running") or test.get("when") != "call"
    ]
    return ConformanceRun(
        int(data["ran"]), tuple(failures), tuple(data["skipped"]), None, unfinished
    )


def _cut(rest: list[str], keep: int = 40) -> str:
    """The lines after an error's first one, at most ``keep`` of them."""
    lines = rest[0].splitlines() if rest else []
    if len(lines) > keep:
        lines = [*lines[:keep], f"... ({len(lines) - keep} more lines)"]
    return "\n".join(lines)


def failures_of(saved: Sequence[SavedFailure], phase: str) -> list[Failure]:
    """Failures of a machine run (and of crash exploration), one per failure it saved: built
    from the record the run wrote, each pointing at its reproducer file."""
    from scopecheck.machines.fork import FORK_STEP_RULES

    found = []
    for failure in saved:
        record, path = failure.record, failure.path
        if raised_by_scopecheck(record):
            continue  # an internal error (internal_errors_of), never the backend's failure
        if record.get("kind") == "machine":
            table = FORK_STEP_RULES if record.get("machine") == "fork" else None
            # the rules the failing check broke, as the run recorded them (CHECK-9); a
            # reproducer written before records carried them: its last step's
            rules = tuple(record.get("rules") or ()) or rules_of_program(
                record.get("program", ""), table
            )
            first = str(record.get("error", "")).splitlines()[0:1] or [""]
            if first[0].startswith("ProtocolError"):  # the backend spoke the protocol wrongly
                rules = tuple(record.get("rules") or ("PROC-2",))
            found.append(
                Failure(
                    phase=phase,
                    rule=rules[0] if rules else None,
                    rules=tuple(rules),
                    error=first[0],
                    message=_cut(str(record.get("error", "")).split("\n", 1)[1:]),
                    program=str(record.get("program", "")),
                    shrunk=bool(record.get("shrunk", True)),
                    reproducer=f"scopecheck replay {path}",
                )
            )
        else:
            rule = record.get("rule")
            message = str(record.get("error", "")).removeprefix(f"{rule}: ")
            found.append(
                Failure(
                    phase=phase,
                    rule=rule,
                    rules=(rule,) if rule else (),
                    error=message,
                    reproducer=f"scopecheck replay {path}",
                    profiles=tuple(str(name) for name in record.get("profiles") or ()),
                    severity=severity_of(rule, str(record.get("failure_kind", ""))),
                )
            )
    return found


def raised_by_scopecheck(record: Mapping[str, Any]) -> bool:
    """Whether a saved failure was raised by scopecheck's own code (``"origin"``, written by
    :func:`~scopecheck.run.fuzz.machine_record`; INSTALL-19)."""
    return record.get("origin") == "scopecheck"


def internal_errors_of(saved: Sequence[SavedFailure], phase: str) -> list[InternalError]:
    """The internal errors among a machine run's saved failures (:func:`raised_by_scopecheck`),
    one per distinct one: what was raised, where in scopecheck, and ``scopecheck replay`` of
    its reproducer, which also holds its traceback (INSTALL-19)."""
    return [
        InternalError(
            phase=phase,
            error=(str(failure.record.get("error", "")).splitlines() or [""])[0][:2000],
            where=str(failure.record.get("where", "")),
            rerun=f"scopecheck replay {failure.path}",
            traceback_file=str(failure.path),
        )
        for failure in saved
        if raised_by_scopecheck(failure.record)
    ]


def broke_protocol(failure: Failure) -> bool:
    """Whether ``failure`` is the backend's answer breaking the protocol (PROC-2): so
    reported, or any rule's failure whose error is a ``ProtocolError`` the backend raised."""
    text = f"{failure.error}\n{failure.message}"
    said = "ProtocolError" in text or "failed with protocol_error" in text
    return failure.rule in ("PROC-2", "PROC-8") or said


def one_protocol_failure(failures: Sequence[Failure]) -> list[Failure]:
    """``failures`` with every protocol failure folded into the first one, which names the
    other places it showed (PROC-10): one fault, one failure, under PROC-2."""
    broken = [f for f in failures if broke_protocol(f)]
    if len(broken) <= 1 and all(f.rule in ("PROC-2", "PROC-8") for f in broken):
        return list(failures)
    first = broken[0]
    places: dict[str, int] = {}
    for failure in broken[1:]:
        places[failure.phase] = places.get(failure.phase, 0) + 1
    rule = first.rule if first.rule in ("PROC-2", "PROC-8") else "PROC-2"
    also = ", ".join(f"{phase} ({count}x)" for phase, count in places.items())
    message = first.message + (f"\nthe same protocol error also showed in: {also}" if also else "")
    merged = attrs.evolve(
        first, rule=rule, rules=(rule,), message=message.strip("\n"), severity=severity_of(rule)
    )
    return [merged if f is first else f for f in failures if f is first or not broke_protocol(f)]


def protocol_stop(failures: list[Failure]) -> str | None:
    """Why the phases after one where the backend broke the protocol do not run (PROC-2):
    what it answers can no longer be compared, and each would report the same failure."""
    for failure in failures:
        if failure.rule in ("PROC-2", "PROC-8"):
            return (
                f"not run: the backend broke the protocol in the {failure.phase} ({failure.rule})"
            )
    return None


def machine_settings() -> Any:
    """The machines' settings under ``validate``: scopecheck's ``ci`` profile without the
    example database (a saved example replayed first would make two runs of the same seed
    differ, INSTALL-12) and without Hypothesis's explain phase (extra runs after shrinking
    that the budget cannot bound, INSTALL-11)."""
    from hypothesis import Phase
    from hypothesis import settings as Settings

    from scopecheck.run.profiles import get_profile

    phases = [Phase.explicit, Phase.generate, Phase.target, Phase.shrink]
    return Settings(get_profile("ci"), database=None, phases=phases)


def restarts_phase(capabilities: Capabilities, counts: RunCounts) -> PhaseReport:
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
        return PhaseReport("skipped", "the machine reached no restart step", tallies)
    return PhaseReport("ran", f"{counts.restarts:,} restarts ({how})", tallies)


def crash_skip_reason(backend: Backend, kind: str) -> str | None:
    """Why crash exploration cannot run for ``backend`` here (``None``: it can).  ``validate``
    and the pytest plugin's crash tests ask this one function, so they skip the same
    backends for the same reason (INSTALL-15, CRASH-FS-8)."""
    explorer = backend.crash
    if explorer is None:
        return CRASH_SKIPPED.get(kind, "the backend has no crash explorer")
    return explorer.unavailable


def process_started() -> float:
    """``time.perf_counter()``'s reading when this process started (its start counts
    against the budget, INSTALL-11); now where the system does not say."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as uptime:
            up = float(uptime.read().split()[0])
    except (OSError, IndexError, ValueError):
        return now
    age = up - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return now - max(0.0, age)


@attrs.define
class _Run:
    """The phases of a run in progress: each update goes to the live display at once, and to
    the verdict-so-far file when the supervisor named one (:data:`SO_FAR_ENV`)."""

    progress: Progress
    phases: dict[str, PhaseReport] = attrs.field(factory=dict)
    failures: list[Failure] = attrs.field(factory=list)
    warnings: list[Failure] = attrs.field(factory=list)
    began: dict[str, float] = attrs.field(factory=dict)
    internal_errors: list[InternalError] = attrs.field(factory=list)
    #: Builds the verdict so far from this run (set by :func:`validate`).
    so_far: Any = None
    #: The command that reruns this validation, for an internal error's entry.
    rerun: str = ""
    failures_dir: Path | None = None
    #: When the run began (``time.perf_counter()``).
    started: float = attrs.field(factory=time.perf_counter)

    def since_start(self, moment: float) -> int:
        """Milliseconds from the start of the run to ``moment``."""
        return max(0, round((moment - self.started) * 1000))

    def set(self, name: str, report: PhaseReport) -> None:
        """A phase's new report; a final one (ran, failed, ...) gets the phase's wall time,
        and a failed one when its first failure was known (``first_failure_ms`` from the start
        of the run: the phase's end, unless the phase says sooner)."""
        now = time.perf_counter()
        if report.status == "running":
            self.began.setdefault(name, now)
        elif name in self.began:
            report = attrs.evolve(report, seconds=now - self.began[name])
        if report.status == "failed" and "first_failure_ms" not in report.counts:
            counts = {**report.counts, "first_failure_ms": self.since_start(now)}
            report = attrs.evolve(report, counts=counts)
        self.phases[name] = report
        self.progress.update(name, report)
        self._save_so_far()

    def _save_so_far(self) -> None:
        target = os.environ.get(SO_FAR_ENV)
        if not target or self.so_far is None:
            return
        with contextlib.suppress(OSError):
            Path(target + ".tmp").write_bytes(orjson.dumps(self.so_far(self).as_json()))
            os.replace(target + ".tmp", target)

    def running_detail(self, name: str) -> str:
        """What ``name`` last said while it ran (its progress), or ``""``."""
        report = self.phases.get(name)
        return report.detail if report is not None and report.status == "running" else ""

    @contextlib.contextmanager
    def guard(self, name: str, seconds: float | None) -> Iterator[None]:
        """Run a phase's work within ``seconds`` (INSTALL-20): an :class:`Overrun` ends it
        ``incomplete`` saying what did not finish; an exception of scopecheck's own ends it
        ``incomplete`` with an internal error (INSTALL-19), never a backend failure.  The run
        goes on with the next phase either way.  A signal's ``KeyboardInterrupt`` passes."""
        try:
            with limit(seconds, name):
                yield
        except Overrun as exc:
            self.stop(name, f"{exc}")
        except Exception as exc:
            error = InternalError.of(name, exc, self.rerun, self.failures_dir)
            self.internal_errors.append(error)
            self.stop(name, f"scopecheck's own error ({error.error}), not the backend's")

    def stop(self, name: str, why: str) -> None:
        """End phase ``name`` incomplete because of ``why``, keeping what it said so far."""
        so_far = self.running_detail(name)
        detail = why + (f"; so far: {so_far}" if so_far else "")
        counts = self.phases[name].counts if name in self.phases else {}
        self.set(name, PhaseReport("incomplete", detail, counts))


def _run_machine(
    loaded: LoadedBackend,
    kind: MachineKind,
    run: _Run,
    phase: str,
    *,
    seed: int,
    failures_dir: Path,
    spec: str,
    deadline: float,
    examples: int | None,
    partial: list[BackendReport] | None = None,
) -> BackendReport:
    """The ``kind`` machine against the backend; ``partial[0]`` follows its report as it
    runs, so what it did is known if it is stopped before it returns."""
    run.set(phase, PhaseReport("running", f"{kind} machine"))

    def on_progress(report: BackendReport) -> None:
        if partial is not None:
            partial[0] = report
        detail = f"{kind} machine: {report.steps:,} steps, {report.examples:,} examples"
        run.set(phase, PhaseReport("running", detail))

    return fuzz_backend(
        attrs.evolve(loaded.backend, crash=None),
        budget=max(0.0, deadline - time.perf_counter()),
        seed=seed,
        settings=machine_settings(),
        failures_dir=failures_dir,
        profile="ci",
        spec=spec,
        machine_kind=kind,
        on_progress=on_progress,
        examples=examples,
        deadline=None if examples is not None else deadline,
        shrink_deadline=deadline,
        saved=named_database(),
    )


def check_shard(shard: Shard | None, examples: int | None) -> None:
    """A ``UsageError`` when a shard is asked of a wall budget (FLEET-4): what it covers is
    not fixed, so it cannot be split with no overlap and no gap."""
    if shard is not None and examples is None:
        raise UsageError(
            "invalid_query",
            "--shard needs --examples N: only a fixed amount of work can be split with no "
            "overlap and no gap (give each job its own --seed to split a wall budget)",
        )


def check_fs_profile(name: str) -> str:
    """``name`` if it names a file-system profile (CRASH-SYS-14); else a ``UsageError``
    naming the choices."""
    try:
        profile_named(name)
    except ValueError as exc:
        raise UsageError("invalid_query", str(exc)) from None
    return name


def crash_overrun(budget: float) -> float:
    """How far past the wall budget crash exploration's first pass over the states after
    every acknowledgement may run (CRASH-COV-2): a tenth of the budget, at least 2 s, so the
    whole run keeps to the budget within about 10% and a short run still covers them."""
    return max(2.0, 0.1 * budget)


def _crash_phase(
    loaded: LoadedBackend, run: _Run, budget: float, seed: int, failures_dir: Path, spec: str,
    overrun: float, fs_profile: str = "posix", shard: Shard | None = None,
) -> tuple[tuple[str, ...], Mapping[str, Any] | None, Mapping[str, Units]]:  # fmt: skip
    """Run crash exploration (or say why it cannot run), its first pass at most ``overrun``
    seconds past ``budget``; ``(limits, coverage, units)``.  A failure that happens only
    under other file-system profiles than ``fs_profile`` is a warning (CRASH-SYS-15).  With
    ``shard`` (an infinite budget), its share of the fixed work (FLEET-4)."""
    name = "crash exploration"
    why = crash_skip_reason(loaded.backend, loaded.capabilities.kind)
    explorer = loaded.backend.crash
    if explorer is None or why is not None:
        run.set(name, PhaseReport("skipped", why or "the backend has no crash explorer"))
        return (), None, {}
    run.set(name, PhaseReport("running", "crash states and I/O faults"))
    started = time.perf_counter()
    replay = _replay_crash_findings(loaded, run) if shard is None or shard.index == 1 else None
    replayed = {} if replay is None else replay.seeds
    # The replay's time comes out of the seeded exploration's budget.
    budget = max(0.0, budget - (time.perf_counter() - started))
    try:
        states, runs, records = explorer.explore_with_faults(
            budget, seed, overrun=overrun, shard=shard
        )
    except (Overrun, KeyboardInterrupt):
        _keep_found_so_far(explorer, run, failures_dir, spec, fs_profile, started)
        raise
    kills = explorer.kill_runs
    records = [r for _, _, found in replayed.values() for r in found] + records
    saved = [save_failure(failures_dir, {**record, "spec": spec}) for record in records]
    found = failures_of(saved, name)
    failures = [f for f in found if f.fails_under(fs_profile)]
    warnings = [f for f in found if not f.fails_under(fs_profile)]
    run.failures.extend(failures)
    run.warnings.extend(warnings)
    detail = f"{states:,} crash states, {runs - kills:,} I/O-fault runs"
    if kills:
        detail += f", {kills:,} kill runs"
    detail += f" ({explorer.how})"
    if fs_profile != "posix":
        detail += f"; failing under file-system profile {fs_profile}"
    if warnings:
        detail += f", {len(warnings)} failures only under other profiles (warnings)"
    if replayed:
        failing = sum(
            any(CrashFailure.from_json(r).fails_under(fs_profile) for r in found)
            for _, _, found in replayed.values()
        )
        detail += (
            f"; the example database's {len(replayed)} saved workload seed(s) replayed first "
            f"({failing} still failing)"
        )
    status: Status = "failed" if failures else "ran"
    counts = {"crash_states": states, "crash_fault_runs": runs - kills, "kill_runs": kills,
              "fault_run_ms": round(explorer.run_seconds * 1000)}  # fmt: skip
    if failures and explorer.first_failure_at is not None:
        counts["first_failure_ms"] = run.since_start(explorer.first_failure_at)
    if replayed:
        counts["replayed_seeds"] = len(replayed)
    coverage = explorer.coverage
    if coverage is not None:
        detail += f"; {coverage.describe()}"
        counts.update(
            acked_covered=coverage.acked_covered,
            acked_total=coverage.acked_total,
            points_checked=coverage.points_checked,
            points_total=coverage.points_total,
            points_unjudged=coverage.points_unjudged,
        )
        if not coverage.complete and not failures:
            status = "incomplete"
            detail += f" -- INCOMPLETE: {'; '.join(coverage.shortfall())}; raise --budget"
    replay_limits = replay.limits if replay is not None else ()
    limits = tuple(dict.fromkeys([*replay_limits, *explorer.limits]))
    detail += "".join(f"; limit: {limit}" for limit in limits)
    run.set(name, PhaseReport(status, detail, counts))
    return limits, None if coverage is None else coverage.to_json(), dict(explorer.units)


def _keep_found_so_far(
    explorer: Any, run: _Run, failures_dir: Path, spec: str, fs_profile: str, started: float
) -> None:
    """What a crash exploration stopped from outside had found: its failures are real, and
    saved and listed like any (INSTALL-20, INSTALL-21); they end no search, so none is lost."""
    from scopecheck.crashsim.explore import in_flight

    found = in_flight()
    if found is None or found.began < started:
        return
    records = [explorer.record(failure) for failure in found.findings.failures]
    saved = [save_failure(failures_dir, {**record, "spec": spec}) for record in records]
    kept = failures_of(saved, "crash exploration")
    run.failures.extend(f for f in kept if f.fails_under(fs_profile))
    run.warnings.extend(f for f in kept if not f.fails_under(fs_profile))


def _replay_crash_findings(loaded: LoadedBackend, run: _Run) -> Replayed | None:
    """The workload seeds ``$SCOPECHECK_DB`` holds for the backend's crash target (a HypoFuzz
    worker's or a fleet's findings), each explored again with the fixed work of a seed, before
    the seeded exploration (FLEET-3); nothing when no database is named (INSTALL-12).  Of a
    sharded run, shard 1 alone replays them: they are not the plan's units, and N shards
    would each explore them again."""
    database = named_database()
    if database is None:
        return None
    run.set("crash exploration", PhaseReport("running", "replaying the saved workload seeds"))
    return replay_crash_findings(loaded.backend, database)


def _conformance_phase(
    loaded: LoadedBackend, run: _Run, spec: str, shard: Shard | None
) -> tuple[list[Failure], Units | None]:
    """Run the conformance suite (``shard``: its share); its fork cases' failures are
    returned for the forks phase, with the cases it made."""
    run.set("conformance", PhaseReport("running", "starting pytest"))

    def on_progress(ran: int, failed: int) -> None:
        run.set("conformance", PhaseReport("running", f"{ran} cases, {failed} failed"))

    made = run_conformance(
        spec, forks=loaded.capabilities.fork, on_progress=on_progress, shard=shard
    )
    ran, failures, skipped = made.ran, made.failures, made.skipped
    fork_cases = [attrs.evolve(f, phase="forks") for f in failures if FORK_CONFORMANCE in f.test]
    run.failures.extend(f for f in failures if FORK_CONFORMANCE not in f.test)
    run.failures.extend(fork_cases)
    detail = f"{ran} cases, {len(failures)} failed, {len(skipped)} skipped"
    status: Status = "failed" if failures else "ran"
    if made.unfinished is not None:  # INSTALL-20: what ran is kept, the rest did not
        status, detail = "incomplete", f"{made.unfinished}; so far: {detail}"
    run.set(
        "conformance",
        PhaseReport(
            status, detail, {"cases": ran, "failed": len(failures), "skipped": len(skipped)}
        ),
    )
    return fork_cases, made.units


def phase_overrun(budget: float) -> float:
    """How far past its share of the wall budget a phase may run before the watchdog stops it
    (INSTALL-20): a tenth of the budget, at least 5 s -- beyond the crash phase's own overrun
    (:func:`crash_overrun`), so a run that keeps to its budget never meets the watchdog."""
    return max(5.0, 0.1 * budget)


def rerun_validate(
    spec: str,
    *,
    budget: float,
    seed: int,
    examples: int | None,
    fs_profile: str,
    shard: Shard | None,
) -> str:
    """The ``scopecheck validate`` command that runs the same checks again."""
    words = ["scopecheck", "validate", spec, "--seed", str(seed)]
    words += ["--examples", str(examples)] if examples is not None else ["--budget", f"{budget:g}"]
    if fs_profile != "posix":
        words += ["--fs-profile", fs_profile]
    if shard is not None:
        words += ["--shard", str(shard)]
    return shlex.join(words)


def validate(
    spec: str,
    budget: float = 20.0,
    failures_dir: Path | str = ".scopecheck/failures",
    seed: int = 0,
    progress: Progress | None = None,
    *,
    examples: int | None = None,
    require: Sequence[str] = (),
    started: float | None = None,
    fs_profile: str = "posix",
    shard: Shard | None = None,
    phase_timeout: float = PHASE_TIMEOUT,
) -> Verdict:
    """Check the backend ``PATH_OR_MODULE:FACTORY`` (or ``exec:COMMAND``) with every phase it
    can take (see the module docstring) within ``budget`` seconds of wall time counted from
    ``started`` (a ``time.perf_counter()`` reading; default now); ``examples`` fixes the
    machines' work instead (INSTALL-12); ``require`` names phases (:data:`PHASES`) whose
    skip fails the verdict (INSTALL-13); ``fs_profile`` is the file-system profile a crash
    failure must happen under to fail the verdict, one under other profiles only being a
    warning (CRASH-SYS-15).  ``shard`` makes its share of the fixed work -- conformance cases,
    crash points, fault and kill runs -- and runs the machines from seed ``seed + K - 1``
    (FLEET-4); it needs ``examples``.  A ``UsageError`` when ``spec`` cannot be loaded,
    ``fs_profile`` names no profile or a shard is asked of a wall budget.

    Every phase ends within its limit (INSTALL-20): its share of the budget and
    :func:`phase_overrun`, or ``phase_timeout`` for fixed work (the conformance suite, and
    every phase with ``examples``); one that does not, or that meets an exception of
    scopecheck's own (INSTALL-19), is ``incomplete`` and the run goes on.  A signal
    (``KeyboardInterrupt``, or SIGTERM as one) raises :class:`Stopped` holding the verdict so
    far (INSTALL-21)."""
    check_fs_profile(fs_profile)
    check_shard(shard, examples)
    machine_seed = seed if shard is None else seed + shard.index - 1
    started = time.perf_counter() if started is None else started
    deadline = started + budget
    fixed = examples is not None
    slack = phase_overrun(budget)
    run = _Run(_Quiet() if progress is None else progress)
    failures_dir = Path(failures_dir).resolve()
    run.failures_dir = failures_dir
    run.rerun = rerun_validate(
        spec, budget=budget, seed=seed, examples=examples, fs_profile=fs_profile, shard=shard
    )
    found: dict[str, Any] = {"backend": spec, "limits": (), "coverage": None, "units": {}}

    def verdict_now(run: _Run, stopped: str | None = None) -> Verdict:
        order = {name: index for index, name in enumerate(PHASES)}
        failures = one_protocol_failure(sorted(run.failures, key=lambda f: order[f.phase]))
        return Verdict(
            backend=found["backend"],
            phases=run.phases,
            failures=tuple(failures),
            warnings=tuple(run.warnings),
            fs_profile=fs_profile,
            limits=found["limits"],
            crash_coverage=found["coverage"],
            required=tuple(phase for phase in PHASES if phase in set(require)),
            budget=budget,
            examples=examples,
            seed=seed,
            seconds=time.perf_counter() - started,
            shards=() if shard is None else (shard,),
            units=found["units"],
            internal_errors=tuple(run.internal_errors),
            stopped=stopped,
        )

    run.so_far = verdict_now
    try:
        with scratch_directory():
            loaded = load(spec)
            found["backend"] = loaded.backend.name
            _phases_of(loaded, run, spec, found, budget=budget, deadline=deadline,
                       seed=seed, machine_seed=machine_seed, failures_dir=failures_dir,
                       examples=examples, fs_profile=fs_profile, shard=shard,
                       limits=(phase_timeout, None if fixed else slack))  # fmt: skip
    except KeyboardInterrupt as exc:
        raise Stopped(_stopped(run, verdict_now, signal_name(exc))) from None
    return verdict_now(run)


def signal_name(exc: KeyboardInterrupt) -> str:
    """The signal a ``KeyboardInterrupt`` stands for: SIGINT unless it names another."""
    name = getattr(exc, "signal", None)
    return name if isinstance(name, str) else "SIGINT"


def _stopped(run: _Run, verdict_now: Any, name: str) -> Verdict:
    """The verdict so far of a run ``name`` stopped: the phase that was running is
    incomplete, the phases after it did not run (INSTALL-21)."""
    for phase, report in list(run.phases.items()):
        if report.status == "running":
            run.stop(phase, f"stopped by {name}")
        elif report.status == "pending":
            run.set(phase, PhaseReport("skipped", f"not run: the run was stopped by {name}"))
    verdict: Verdict = verdict_now(run, name)
    return verdict


def _phases_of(
    loaded: LoadedBackend, run: _Run, spec: str, found: dict[str, Any], *, budget: float,
    deadline: float, seed: int, machine_seed: int, failures_dir: Path, examples: int | None,
    fs_profile: str, shard: Shard | None, limits: tuple[float, float | None],
) -> None:  # fmt: skip
    """Every phase of :func:`validate` in its order, each under its guard; what the verdict
    needs besides the phases goes into ``found``.  ``limits``: ``(phase_timeout, slack)``,
    ``slack`` ``None`` for fixed work."""
    phase_timeout, slack = limits
    capabilities = loaded.capabilities
    for name in PHASES:
        run.set(name, PhaseReport())

    # The fixed work first: the conformance suite is a fixed set of cases.
    fork_cases: list[Failure] = []
    with run.guard("conformance", phase_timeout):
        fork_cases, conformance_units = _conformance_phase(loaded, run, spec, shard)
        if conformance_units is not None:
            found["units"] = {"conformance cases": conformance_units}
    stopped = protocol_stop(run.failures)

    # Then crash exploration, whose first round is owed however small the budget: its
    # share of what is left (one round's fixed work with ``examples``).  The machines come
    # last and take what is left after it, so they absorb its overrun.
    if stopped is None:
        left = max(0.0, deadline - time.perf_counter())
        crash_budget = math.inf if slack is None else max(1.0, left * CRASH_SHARE)
        # What the first workload owes may run on to the end of the whole budget and its
        # overrun: the machines after it then run their one example each.
        owed = max(0.0, left - crash_budget) + crash_overrun(budget)
        crash_limit = phase_timeout if slack is None else crash_budget + owed + slack
        with run.guard("crash exploration", crash_limit):
            said, coverage, units = _crash_phase(
                loaded, run, crash_budget, seed, failures_dir, spec, owed, fs_profile, shard
            )
            found.update(limits=said, coverage=coverage, units={**found["units"], **units})
        stopped = protocol_stop(run.failures)

    # What is left: the fork machine's share, then the storage machine's.
    machines_end = deadline
    if capabilities.fork and stopped is None:
        share = FORK_SHARE * max(0.0, machines_end - time.perf_counter())
        forked = _guarded_machine(
            loaded, "fork", run, "forks", seed=machine_seed, failures_dir=failures_dir,
            spec=spec, deadline=time.perf_counter() + share, examples=examples,
            seconds=phase_timeout if slack is None else share + slack,
        )  # fmt: skip
        fork_failures = failures_of(forked.saved, "forks")
        run.failures.extend(fork_failures)
        ours = _our_errors(run, "forks", forked.saved)
        stopped = protocol_stop(run.failures)
        if run.phases["forks"].status != "incomplete":
            cases = (
                f"{len(fork_cases)} fork conformance cases failed"
                if fork_cases
                else "fork conformance cases passed"
            )
            run.set(
                "forks",
                PhaseReport(
                    _machine_status(fork_failures or fork_cases, ours),
                    f"fork machine: {forked.steps:,} steps, {forked.examples:,} examples; "
                    f"{cases}{ours}",
                    {"fork_machine_steps": forked.steps, "fork_machine_examples": forked.examples},
                ),
            )
    elif run.phases["forks"].status == "pending":
        run.set("forks", PhaseReport("skipped", stopped or "the repository has no fork()"))

    skip_machine = stopped
    storage = BackendReport()
    if stopped is None:
        left = max(0.0, machines_end - time.perf_counter())
        storage = _guarded_machine(
            loaded, "storage", run, "machine", seed=machine_seed, failures_dir=failures_dir,
            spec=spec, deadline=machines_end, examples=examples,
            seconds=phase_timeout if slack is None else left + slack,
        )  # fmt: skip
    machine_failures = failures_of(storage.saved, "machine")
    run.failures.extend(machine_failures)
    ours = _our_errors(run, "machine", storage.saved)
    stopped = stopped or protocol_stop(run.failures)
    unshrunk = " (not shrunk: the budget was spent)" if any(
        not f.shrunk for f in machine_failures
    ) else ""  # fmt: skip
    if run.phases["machine"].status != "incomplete":
        run.set(
            "machine",
            PhaseReport(
                _machine_status(machine_failures, ours),
                f"{storage.steps:,} steps, {storage.examples:,} examples{unshrunk}{ours}",
                {"steps": storage.steps, "examples": storage.examples},
            ),
        )

    run.set("restarts", restarts_phase(capabilities, loaded.counts))
    if stopped is not None:
        for name, report in list(run.phases.items()):
            later = report.status == "pending" or name == "restarts"
            if later or (name == "machine" and skip_machine is not None):
                run.set(name, PhaseReport("skipped", stopped))
    if loaded.backend.close is not None:
        with run.guard("restarts", phase_timeout if slack is None else slack):
            loaded.backend.close()


def _our_errors(run: _Run, phase: str, saved: Sequence[SavedFailure]) -> str:
    """Add the internal errors among a machine phase's saved failures to the run
    (:func:`internal_errors_of`, INSTALL-19); what the phase's detail says of them, or
    ``""``.  The machine went on after them (CHECK-9), but not in the examples they ended."""
    errors = internal_errors_of(saved, phase)
    run.internal_errors.extend(errors)
    return "".join(f"; scopecheck's own error ({e.error}), not the backend's" for e in errors)


def _machine_status(failed: object, ours: str) -> Status:
    """A machine phase's status: ``incomplete`` after an internal error of its own (the
    examples it ended checked nothing after it), else ``failed`` or ``ran``."""
    if ours:
        return "incomplete"
    return "failed" if failed else "ran"


def _guarded_machine(
    loaded: LoadedBackend, kind: MachineKind, run: _Run, phase: str, *, seconds: float,
    **options: Any,
) -> BackendReport:  # fmt: skip
    """:func:`_run_machine` under the phase's guard; what it ran and saved before an overrun
    or an internal error is kept (the phase is then incomplete, its failures still real)."""
    partial: list[BackendReport] = [BackendReport()]
    with run.guard(phase, seconds):
        partial[0] = _run_machine(loaded, kind, run, phase, partial=partial, **options)
    return partial[0]
