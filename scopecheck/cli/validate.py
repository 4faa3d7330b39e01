"""``scopecheck validate``: every phase a user's backend can take, one verdict (INSTALL-10)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scopecheck.cli.common import (
    DEFAULT_BUDGET,
    DEFAULT_FAILURES,
    FS_PROFILE_OPTION,
    fail,
    print_verdict,
    show_verdict,
    supervised,
)
from scopecheck.crashsim.shards import Shard
from scopecheck.models.errors import ScopecheckError

if TYPE_CHECKING:
    from scopecheck.run.validate import Verdict


@click.command()
@click.argument("factory", required=False)
@click.option(
    "--budget",
    type=float,
    default=DEFAULT_BUDGET,
    show_default=True,
    help="Wall-time seconds of the whole run, process start included: the conformance suite "
    "first, then 30% of what is left to crash exploration, 30% of the rest to the fork machine, "
    "and the machine until it is spent; shrinking a failure stops there (README).",
)
@click.option(
    "--examples",
    type=click.IntRange(min=1),
    default=None,
    help="Run each machine for exactly N examples instead of until the budget is spent: the same "
    "--seed and --examples do the same machine work every time.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Base seed of the machine rounds."
)
@click.option(
    "--require",
    default="",
    metavar="PHASE,...",
    help="Phases that must run (machine, forks, crash, conformance, restarts): one skipped or "
    "incomplete fails the run.",
)
@click.option(
    "--failures-dir", default=DEFAULT_FAILURES, show_default=True, help="Where reproducer files go."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the verdict as JSON (docs/validate-json.md); stdout holds nothing else.",
)
@click.option(
    "--exec",
    "command",
    default=None,
    metavar="'CMD ...'",
    help="Validate a backend process speaking the process protocol (any language) instead.",
)
@click.option(
    "--shard",
    default=None,
    metavar="K/N",
    help="Make the K-th of N shares of the fixed work (conformance cases, crash points, fault "
    "and kill runs; needs --examples) and run the machines from seed --seed + K - 1; join the "
    "jobs' --json reports with scopecheck merge (docs/ci.md).",
)
@click.option(
    "--phase-timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Stop a phase of fixed work (the conformance suite; every phase with --examples) still "
    "running after this many seconds and report it incomplete [default: 600].",
)
@click.option(
    "--html",
    "html",
    default=None,
    metavar="FILE",
    help="Also write the verdict as one self-contained HTML page (what scopecheck report "
    "makes of the --json verdict), at the end of the run.",
)
@FS_PROFILE_OPTION
def validate(
    factory: str | None,
    budget: float,
    examples: int | None,
    seed: int,
    require: str,
    failures_dir: str,
    as_json: bool,
    command: str | None,
    shard: str | None,
    fs_profile: str,
    phase_timeout: float | None,
    html: str | None,
) -> None:
    """Check a backend outside this project: FACTORY is PATH_OR_MODULE:make_backend, or
    exec:'CMD ...' (the same as --exec) for a backend in a child process.

    Runs every phase the backend can take -- the machine, forks, crash exploration, the
    conformance suite, restarts -- and reports each as ran, failed, incomplete or skipped (with
    why)."""
    from scopecheck.run.validate import process_started

    started = process_started()
    if (factory is None) == (command is None):
        fail("give a FACTORY (PATH_OR_MODULE:make_backend) or --exec 'CMD ...', not both")
    spec = f"exec:{command}" if command is not None else str(factory)
    from rich.console import Console
    from rich.live import Live

    from scopecheck.run.stopping import signals_stop_the_run
    from scopecheck.run.validate import (
        PHASE_TIMEOUT,
        PHASES,
        PhaseReport,
        Stopped,
        check_fs_profile,
        check_shard,
        parse_required,
    )
    from scopecheck.run.validate import validate as run_validate

    if not budget > 0:
        fail(f"--budget must be a positive number of seconds (got {budget:g})")
    if phase_timeout is not None and not phase_timeout > 0:
        fail(f"--phase-timeout must be a positive number of seconds (got {phase_timeout:g})")
    timeout = PHASE_TIMEOUT if phase_timeout is None else phase_timeout
    try:
        if html is not None:  # a report that cannot be written is said before the run
            from scopecheck.run.report_html import check_output

            check_output(Path(html))
        required = parse_required(require)
        check_fs_profile(fs_profile)
        share = None if shard is None else Shard.parse(shard)
        check_shard(share, examples)
    except (ScopecheckError, ValueError) as exc:
        fail(str(exc))
    supervised(
        hard_end=time.monotonic() + hard_limit(budget, examples, timeout),
        report_killed=lambda so_far, why: report_killed(so_far, why, as_json),
    )
    console = Console(stderr=True, quiet=as_json)
    shown: dict[str, PhaseReport] = {name: PhaseReport() for name in PHASES}

    def render() -> Any:
        return _phase_table(f"validating {spec} ({time.perf_counter() - started:.0f}s)", shown)

    with (
        stdout_to_stderr(),
        Live(render(), console=console, refresh_per_second=4, transient=True) as live,
    ):

        class LiveProgress:
            def update(self, phase: str, report: PhaseReport) -> None:
                shown[phase] = report
                live.update(render())

        try:
            with signals_stop_the_run():
                verdict = run_validate(
                    spec, budget, Path(failures_dir), seed, progress=LiveProgress(),
                    examples=examples, require=required, started=started,
                    fs_profile=fs_profile, shard=share, phase_timeout=timeout,
                )  # fmt: skip
        except Stopped as stopped:
            verdict = stopped.verdict
        except ScopecheckError as exc:
            live.stop()
            fail(str(exc))
    if html is not None:
        write_html(verdict, Path(html))
    show_verdict(verdict, as_json)


def write_html(verdict: Verdict, out: Path) -> None:
    """Write ``--html``'s page of ``verdict`` (REPORT-1); a page that cannot be written is one
    line on stderr, and the run's exit code stays the verdict's."""
    from scopecheck.run.report_html import write_report

    try:
        write_report(verdict, out)
    except (ScopecheckError, OSError) as exc:
        click.echo(f"scopecheck: could not write the HTML report {out}: {exc}", err=True)


def hard_limit(budget: float, examples: int | None, phase_timeout: float) -> float:
    """Seconds after which the supervisor stops a validation as hung (INSTALL-21): past every
    phase's own limit (INSTALL-20) and a minute more, so the watchdog inside always comes
    first when it can."""
    from scopecheck.run.validate import PHASES, crash_overrun, phase_overrun

    if examples is not None:
        return len(PHASES) * phase_timeout + 60
    return phase_timeout + budget + crash_overrun(budget) + 3 * phase_overrun(budget) + 60


def report_killed(so_far: str, why: str, as_json: bool) -> int:
    """Print the verdict a killed validation saved last (the phase it was in incomplete, the
    rest not run) and return its exit code; one line when it saved none."""
    import orjson

    from scopecheck.run.stopping import STOP_GRACE
    from scopecheck.run.validate import STOP_CODES, PhaseReport, Verdict

    cause = (
        f"it hung past the run's hard end and did not stop within {STOP_GRACE:g} s"
        if why == "hang"
        else f"it did not stop within {STOP_GRACE:g} s of {why}"
    )
    try:
        verdict = Verdict.from_json(orjson.loads(Path(so_far).read_bytes()))
    except (OSError, ValueError):
        click.echo(f"scopecheck: the validation was killed ({cause}) before a verdict", err=True)
        return STOP_CODES.get(why, 1)
    phases = dict(verdict.phases)
    for name, phase in phases.items():
        if phase.status == "running":
            phases[name] = PhaseReport(
                "incomplete", f"killed, {cause}; so far: {phase.detail}", phase.counts
            )
        elif phase.status == "pending":
            phases[name] = PhaseReport("skipped", f"not run: the validation was killed ({cause})")
    import attrs

    verdict = attrs.evolve(verdict, phases=phases, stopped=why)
    print_verdict(verdict, as_json)
    return verdict.exit_code


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While a validation runs, whatever anything writes to stdout -- Hypothesis's reports, a
    library's print, a child process inheriting the descriptor -- goes to stderr, so stdout
    holds the verdict alone (``--json`` is JSON, INSTALL-10)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


_STATUS = {
    "ran": "[green]ran[/]",
    "failed": "[red]FAILED[/]",
    "incomplete": "[yellow]INCOMPLETE[/]",
    "skipped": "[yellow]skipped[/]",
    "running": "[cyan]running[/]",
    "pending": "[dim]pending[/]",
}


def _phase_table(title: str, phases: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column("phase", style="bold")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for name, phase in phases.items():
        table.add_row(name, _STATUS.get(phase.status, phase.status), phase.detail)
    return table
