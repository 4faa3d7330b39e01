"""pytest plugin: run the conformance suite and the machine against a third-party backend::

    pytest --scopecheck-backend=PATH_OR_MODULE:FACTORY --pyargs scopecheck.conformance

Installing scopecheck registers this plugin in every pytest run of the venv, so it is inert
unless asked (INSTALL-2): it adds the ``--scopecheck-backend`` option and declares the markers
scopecheck's own tests use (``rule``, ``slow``), so a user's ``--strict-markers`` collects the
conformance suite; it never loads or registers a Hypothesis profile and never touches the
user's settings.  The conformance suite passes scopecheck's profile to the runs it makes
(``$SCOPECHECK_PROFILE``, default ``dev``) instead of changing the default.

The suite runs the phases ``scopecheck validate`` runs, decided by the same functions
(INSTALL-15): ``test_machine.py`` the machine, ``test_scoped_storage.py`` and
``test_storage_cases.py`` the conformance cases, ``test_fork_cases.py`` and
``test_fork_machine.py`` the forks phase (the fork cases and the fork machine), and
``test_crash.py`` crash exploration -- the generic crash sweep for a factory taking ``fs`` and
``root``, the system-call exploration for a factory taking ``root`` (where strace can run), and
otherwise *skipped* with the reason ``validate`` gives, never passed (CRASH-FS-8).  At the end
the plugin prints the run as a :class:`~scopecheck.run.validate.Verdict` with ``validate``'s
headline and phase lines (INSTALL-10), the machines' with the steps and examples they ran.

The storage and fork machines are the classes ``scopecheck.fuzz_targets_for`` gives HypoFuzz
for the same spec, so the examples the example database (``$SCOPECHECK_DB``) holds for them
run first, and ``test_crash.py`` explores again the workload seeds it holds for the crash
target (FLEET-3).  ``--scopecheck-replay`` makes the machines and crash tests run those alone
-- no generated examples, no seeded workloads -- to recheck a fleet's findings; the conformance
and fork cases, which draw nothing, run as always.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from scopecheck.models.errors import ScopecheckError

if TYPE_CHECKING:
    from hypothesis import settings as Settings

    from scopecheck.backends.adapters import LoadedBackend
    from scopecheck.run.validate import Verdict

#: The markers scopecheck's suites use; declared so ``--strict-markers`` accepts them.
MARKERS = (
    "rule(*ids): the scopecheck spec rules (spec/rules/*.toml) this test checks",
    "slow: a scopecheck test that runs longer (still part of the default run)",
    "hypofuzz: runs HypoFuzz for a few seconds (needs the hypofuzz extra)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("scopecheck")
    group.addoption(
        "--scopecheck-backend",
        action="append",
        dest="scopecheck_backend",
        default=[],
        metavar="PATH_OR_MODULE:FACTORY",
        help="Backend factory to check (repeatable); default: the bundled backends.",
    )
    group.addoption(
        "--scopecheck-replay",
        action="store_true",
        dest="scopecheck_replay",
        default=False,
        help="Run the machines and crash exploration on what the example database "
        "($SCOPECHECK_DB) holds for them alone: recheck what an earlier run, a HypoFuzz worker "
        "or a fleet saved.",
    )
    group.addoption(
        "--scopecheck-phase-timeout",
        dest="scopecheck_phase_timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="Stop a scopecheck test still running after this many seconds: its phase is "
        "incomplete (a hang of the backend or of scopecheck), never passed (default 600).",
    )
    group.addoption(
        "--scopecheck-artifacts",
        dest="scopecheck_artifacts",
        default=".scopecheck",
        metavar="DIR",
        help="Where a failing crash test saves its reproducers (DIR/failures) and the bundles of "
        "its crash images (DIR/bundles), and where the run's HTML report goes "
        "(DIR/report-NAME.html): what a CI job keeps as artifacts (default .scopecheck).",
    )
    group.addoption(
        "--scopecheck-fs-profile",
        dest="scopecheck_fs_profile",
        default="posix",
        metavar="NAME",
        help="File-system profile a crash failure must happen under to fail (posix, "
        "ext4-ordered, btrfs); one under other profiles only is a warning (CRASH-SYS-15).",
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    specs = config.getoption("scopecheck_backend") or []
    profile = config.getoption("scopecheck_fs_profile", default="posix")
    if profile != "posix":
        from scopecheck.crashsim.persistence import profile_named

        try:
            profile_named(profile)
        except ValueError as exc:
            raise pytest.UsageError(f"--scopecheck-fs-profile: {exc}") from None
    if specs:
        for spec in specs:
            try:
                loaded_backend(config, spec)
            except ScopecheckError as exc:
                raise pytest.UsageError(f"--scopecheck-backend: {exc}") from None
        config.pluginmanager.register(VerdictCollector(config, specs), "scopecheck-verdict")
        _sigterm_as_interrupt()


def artifacts_dir(config: pytest.Config) -> Path:
    """``--scopecheck-artifacts``, relative to where pytest was started (INSTALL-25)."""
    folder = Path(config.getoption("scopecheck_artifacts", default=".scopecheck"))
    return folder if folder.is_absolute() else config.invocation_params.dir / folder


def report_path(config: pytest.Config, name: str) -> Path:
    """Where the run's HTML report of the backend named ``name`` is written when the run
    ends."""
    from scopecheck.run.fuzz import report_file_name

    return artifacts_dir(config) / f"report-{report_file_name(name).removesuffix('.json')}.html"


def _sigterm_as_interrupt() -> None:
    """A cancelled CI job's SIGTERM stops the run as Ctrl-C does (INSTALL-21): pytest then
    tears down -- backend processes, strace, FUSE mounts and temp folders go -- and prints
    what it ran, instead of dying on the spot.  Only where SIGTERM has its default action,
    in the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, frame: object) -> None:
        del signum, frame
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the teardown is not cut short
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)


#: How a scopecheck test stopped by the watchdog fails: its phase is incomplete, not failed.
INCOMPLETE = "scopecheck: incomplete: "


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A scopecheck test of ``--scopecheck-backend`` ends within ``--scopecheck-phase-timeout``
    (INSTALL-20): one still running then fails with :data:`INCOMPLETE` and what it was doing,
    and the verdict shows its phase incomplete -- never passed, never the backend's failure."""
    if not item.config.getoption("scopecheck_backend", default=None) or (
        item.path.name not in PHASE_OF
    ):
        return (yield)
    from scopecheck.run.watchdog import Overrun, limit

    seconds = item.config.getoption("scopecheck_phase_timeout", default=600.0)
    try:
        with limit(seconds, item.name):
            return (yield)
    except Overrun as exc:
        pytest.fail(f"{INCOMPLETE}{exc}", pytrace=False)


#: The Hypothesis phases (by name) of the machine under ``--scopecheck-replay``: the
#: database's examples and the explicit ones, a failure shrunk, nothing generated.
REPLAY_PHASES = ("explicit", "reuse", "shrink")


def machine_settings(config: pytest.Config) -> Settings:
    """The settings ``test_machine.py`` runs the machine with: scopecheck's profile
    (``$SCOPECHECK_PROFILE``), limited to :data:`REPLAY_PHASES` under ``--scopecheck-replay``.
    Hypothesis is imported here, not with the plugin, which every pytest run of the venv
    loads."""
    from hypothesis import Phase
    from hypothesis import settings as Settings

    from scopecheck.run.profiles import get_profile

    profile = get_profile()
    if config.getoption("scopecheck_replay", default=False):
        return Settings(profile, phases=[Phase[name] for name in REPLAY_PHASES])
    return profile


def run_machine(machine: Any, request: pytest.FixtureRequest) -> None:
    """Run the machine class ``machine`` as the conformance suite runs its machines (with
    :func:`machine_settings`), leaving the steps and examples it ran, passing or not, in the
    test's ``user_properties`` for the verdict (:data:`MACHINE_COUNTS`)."""
    from hypothesis.stateful import run_state_machine_as_test

    try:
        run_state_machine_as_test(machine, settings=machine_settings(request.config))  # type: ignore[no-untyped-call]
    finally:
        counts = {"steps": machine.steps_run, "examples": machine.examples_run}
        request.node.user_properties.append((MACHINE_COUNTS, counts))


#: The phase each conformance module checks (``validate``'s phases, INSTALL-15).
PHASE_OF = {
    "test_machine.py": "machine",
    "test_scoped_storage.py": "conformance",
    "test_storage_cases.py": "conformance",
    "test_fork_cases.py": "forks",
    "test_fork_machine.py": "forks",
    "test_crash.py": "crash exploration",
}

_loaded = pytest.StashKey[dict[str, "LoadedBackend"]]()


def loaded_for(config: pytest.Config, backend: Any) -> LoadedBackend:
    """The loaded spec whose backend is ``backend`` (without ``--scopecheck-backend``, a
    bundled backend as ``load`` takes one), so a test asks the capabilities ``validate``
    decides by (INSTALL-15)."""
    from scopecheck.backends.adapters import loaded_as_is

    for spec in config.getoption("scopecheck_backend", default=None) or []:
        loaded = loaded_backend(config, spec)
        if loaded.backend is backend:
            return loaded
    return loaded_as_is(backend)


def loaded_backend(config: pytest.Config, spec: str) -> LoadedBackend:
    """``spec`` loaded once per run: every module's tests use the same backend, and its
    counts (restarts) add up over the run."""
    from scopecheck.backends.adapters import load

    cache = config.stash.setdefault(_loaded, {})
    if spec not in cache:
        cache[spec] = load(spec)
    return cache[spec]


#: The name of the ``user_properties`` entry in which ``test_machine.py`` and
#: ``test_fork_machine.py`` leave the steps and examples their machine ran: the machine and
#: forks phases report them, as ``validate`` does.
MACHINE_COUNTS = "scopecheck_machine"


def machine_counts(reports: list[pytest.TestReport]) -> dict[str, int] | None:
    """The steps and examples the machine tests among ``reports`` ran, summed (``None``: no
    report carries them)."""
    found = [
        value
        for report in reports
        for name, value in report.user_properties
        if name == MACHINE_COUNTS and isinstance(value, dict)
    ]
    if not found:
        return None
    return {key: sum(int(value.get(key, 0)) for value in found) for key in ("steps", "examples")}


def _carries_counts(report: pytest.TestReport) -> bool:
    return any(name == MACHINE_COUNTS for name, _ in report.user_properties)


def machine_detail(counts: dict[str, int]) -> str:
    """The machine phase's line, as ``validate`` words it."""
    return f"{counts['steps']:,} steps, {counts['examples']:,} examples"


#: The phases whose tests include a machine: how ``validate`` names its counts there, the
#: words before its steps and examples, and what the phase's other tests are (``None``: none).
MACHINE_PHASES: dict[str, tuple[str, str, str | None]] = {
    "machine": ("", "", None),
    "forks": ("fork_machine_", "fork machine: ", "fork cases"),
}


class VerdictCollector:
    """Registered when ``--scopecheck-backend`` is given: keeps each test's outcome by phase
    and prints the run as a verdict at the end."""

    def __init__(self, config: pytest.Config, specs: list[str]) -> None:
        self.config = config
        self.specs = specs
        self.rules: dict[str, tuple[str, ...]] = {}
        self.modules: dict[str, str] = {}
        self.outcomes: list[tuple[str, pytest.TestReport]] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.rules[item.nodeid] = tuple(r for m in item.iter_markers("rule") for r in m.args)
            self.modules[item.nodeid] = item.path.name

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # A test's module by its path: run from outside the package (an installed wheel,
        # ``--pyargs``), a node id holds no file name.
        module = self.modules.get(report.nodeid)
        if module is None:
            module = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        if module in PHASE_OF and (report.when == "call" or report.outcome != "passed"):
            self.outcomes.append((PHASE_OF[module], report))

    def verdict(self, spec: str) -> Verdict:
        """What this pytest run checked of ``spec``, phase by phase: a phase whose tests all
        ran is ``ran``, one with a failing test ``failed``, one whose tests were all skipped
        ``skipped`` with their reason, one not in the run ``skipped`` too; restarts are judged
        by the function ``validate`` uses.  The machine and forks phases count their machine's
        steps and examples (what ``test_machine.py`` and ``test_fork_machine.py`` put in their
        ``user_properties``) and say them as ``validate`` does."""
        from scopecheck.run.report_plugin import explain_failure
        from scopecheck.run.validate import (
            PHASES,
            PhaseReport,
            Verdict,
            conformance_failure,
            restarts_phase,
        )

        loaded = loaded_backend(self.config, spec)
        name = loaded.backend.name
        phases: dict[str, PhaseReport] = {}
        failures = []
        for phase in PHASES[:-1]:
            seen = [r for p, r in self.outcomes if p == phase and name in r.nodeid.rsplit("[")[-1]]
            stopped = [r for r in seen if r.failed and INCOMPLETE in (r.longreprtext or "")]
            seen = [r for r in seen if r not in stopped]
            failed = [report for report in seen if report.failed]
            skipped = [report for report in seen if report.skipped]
            passed = len(seen) - len(failed) - len(skipped)
            for report in failed:
                error, message = explain_failure(report)
                test = {"nodeid": report.nodeid, "rules": self.rules.get(report.nodeid, ()),
                        "error": error, "message": message}  # fmt: skip
                rerun = shlex.join(["python", "-m", "pytest", "-p", "scopecheck.pytest_plugin",
                                    f"--scopecheck-backend={spec}", report.nodeid])  # fmt: skip
                failure = conformance_failure(test, rerun, phase)
                saved = [str(v) for k, v in report.user_properties if k == "scopecheck_reproducer"]
                failures += [attrs.evolve(failure, reproducer=f"scopecheck replay {path}")
                             for path in saved] or [failure]  # fmt: skip
            counts = {"passed": passed, "failed": len(failed), "skipped": len(skipped)}
            machine = machine_counts(seen) if phase in MACHINE_PHASES else None
            ran = f"{passed} tests passed"
            if machine is not None:
                prefix, label, others = MACHINE_PHASES[phase]
                counts.update({prefix + key: value for key, value in machine.items()})
                ran = label + machine_detail(machine)
                if others is not None:
                    machines = sum(1 for r in seen if r.passed and _carries_counts(r))
                    ran += f"; {passed - machines} {others} passed"
            if stopped and not failed:
                why = (stopped[0].longreprtext or "").split(INCOMPLETE, 1)[-1].strip()
                done = f"{ran}; " if passed else ""
                phases[phase] = PhaseReport("incomplete", f"{done}{why}", counts)
            elif not seen:
                phases[phase] = PhaseReport("skipped", "not in this pytest run")
            elif failed:
                detail = f"{len(failed)} of {len(seen)} tests failed"
                if machine is not None:
                    detail = f"{label}{machine_detail(machine)}; {detail}"
                phases[phase] = PhaseReport("failed", detail, counts)
            elif not passed:
                longrepr = skipped[0].longrepr
                reason = str(longrepr[2]) if isinstance(longrepr, tuple) else ""
                phases[phase] = PhaseReport("skipped", reason.removeprefix("Skipped: "), counts)
            else:
                phases[phase] = PhaseReport("ran", ran, counts)
        phases["restarts"] = restarts_phase(loaded.capabilities, loaded.counts)
        return Verdict(name, phases, tuple(failures))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.outcomes:
            return
        from scopecheck.run.report_html import write_report
        from scopecheck.run.validate import headline, phase_line

        for spec in self.specs:
            verdict = self.verdict(spec)
            terminalreporter.section(f"scopecheck verdict: {spec}")
            terminalreporter.write_line(headline(verdict).rsplit(" (", 1)[0])
            for name, phase in verdict.phases.items():
                terminalreporter.write_line(phase_line(name, phase))
            report = report_path(self.config, verdict.backend)
            try:
                report.parent.mkdir(parents=True, exist_ok=True)
                write_report(verdict, report)
            except (OSError, ScopecheckError) as exc:
                terminalreporter.write_line(f"report: not written ({exc})")
            else:
                terminalreporter.write_line(f"report: {report}")
