"""The ``scopecheck`` command line.

Quiet when all is well, precise when not: a user mistake prints one line and exits 2
(ERR-4), a found bug prints the shrunk program and the command that replays it and exits 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click
import orjson

from scopecheck.models.errors import ScopecheckError

DEFAULT_BUDGET = 20.0
DEFAULT_FAILURES = ".scopecheck/failures"


class UserMistake(click.ClickException):
    """A mistake on the command line: one line, exit 2."""

    exit_code = 2


def fail(message: str) -> NoReturn:
    raise UserMistake(message)


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="scopecheck")
def cli() -> None:
    """Model-check scoped session storage backends against the reference model."""


# -- fuzz -----------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--backend",
    "backends",
    multiple=True,
    help="Backend to fuzz: a bundled name or PATH_OR_MODULE:FACTORY (repeatable; default: all"
    " bundled).",
)
@click.option(
    "--budget", type=float, default=None, help=f"Seconds per backend (default {DEFAULT_BUDGET:g})."
)
@click.option("--seed", type=int, default=None, help="Base seed (default: derived from the clock).")
@click.option(
    "--profile",
    default=None,
    help="Hypothesis profile: dev, ci, nightly (default $SCOPECHECK_PROFILE or dev).",
)
@click.option(
    "--failures-dir", default=DEFAULT_FAILURES, show_default=True, help="Where reproducer files go."
)
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Fuzz backends in parallel on N pytest-xdist workers.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of a table.")
def fuzz(
    backends: tuple[str, ...],
    budget: float | None,
    seed: int | None,
    profile: str | None,
    failures_dir: str,
    workers: int,
    as_json: bool,
) -> None:
    """Run the stateful machine against each backend for a time budget."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from scopecheck.backends.registry import BUNDLED, Backend, is_user_spec
    from scopecheck.backends.resolve import resolve_backend
    from scopecheck.run.fuzz import BackendReport, fuzz_backend
    from scopecheck.run.profiles import PROFILES, chosen_name, load_profile

    names = list(backends) or sorted(BUNDLED)
    chosen: dict[str, Backend] = {}
    for name in names:
        try:
            chosen[name] = resolve_backend(name)  # bundled, a catalogue mutant, or PATH:FACTORY
        except ScopecheckError as exc:
            if is_user_spec(name):
                fail(str(exc))
            fail(
                f"unknown backend {name!r}; choose from {', '.join(sorted(BUNDLED))} "
                "(or a mutant name from 'scopecheck mutants', or PATH_OR_MODULE:FACTORY)"
            )
    per_backend = DEFAULT_BUDGET if budget is None else budget
    if not per_backend > 0:
        fail(f"--budget must be a positive number of seconds (got {budget:g})")
    try:
        profile_name = chosen_name(profile)
    except ValueError:
        given = profile if profile is not None else os.environ.get("SCOPECHECK_PROFILE", "")
        where = "--profile" if profile is not None else "$SCOPECHECK_PROFILE"
        fail(f"unknown profile {given!r} ({where}); choose from {', '.join(PROFILES)}")
    if workers < 1:
        fail(f"--workers must be at least 1 (got {workers})")
    chosen_seed = seed if seed is not None else int(time.time()) % 1_000_000
    settings = load_profile(profile_name)
    console = Console(stderr=True, quiet=as_json)
    reports: dict[str, BackendReport] = {}
    with Progress(
        TextColumn("{task.fields[name]:<14}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[steps]:>8} steps {task.fields[failures]} failures"),
        console=console,
        transient=False,
    ) as progress:
        if workers > 1:
            from scopecheck.run.parallel import fuzz_in_workers

            reports = fuzz_in_workers(
                names, per_backend, chosen_seed, profile_name, Path(failures_dir), workers, progress
            )
        for name in names if workers == 1 else ():
            task = progress.add_task("", total=per_backend, name=name, steps=0, failures=0)

            def update(report: BackendReport, task: Any = task) -> None:
                progress.update(
                    task,
                    completed=min(report.seconds, per_backend),
                    steps=report.steps,
                    failures=report.failures,
                )

            reports[name] = fuzz_backend(
                chosen[name],
                budget=per_backend,
                seed=chosen_seed,
                settings=settings,
                failures_dir=Path(failures_dir),
                profile=profile_name,
                on_progress=update,
                spec=name if is_user_spec(name) else None,
            )
            progress.update(task, completed=per_backend)
    total_failures = sum(r.failures for r in reports.values())
    if as_json:
        emit_json(
            {
                "backends": {n: r.as_json() for n, r in reports.items()},
                "failures": total_failures,
                "seed": chosen_seed,
            }
        )
    else:
        table = Table(title=f"scopecheck fuzz (seed {chosen_seed}, profile {profile_name})")
        columns = ("backend", "examples", "steps", "crash states", "I/O faults", "failures")
        for column in (*columns, "steps/s"):
            table.add_column(column, justify="left" if column == "backend" else "right")
        for name, r in reports.items():
            table.add_row(
                name,
                str(r.examples),
                str(r.steps),
                str(r.crash_states),
                str(r.crash_fault_runs),
                f"[red]{r.failures}[/]" if r.failures else "0",
                f"{r.steps_per_second:,.0f}",
            )
        Console().print(table)
    for report in reports.values():
        for path in report.reproducers:
            record = orjson.loads(Path(path).read_bytes())
            click.echo(
                f"\nFailure on {record['backend']}: {record['error'].splitlines()[0]}", err=True
            )
            click.echo(_failure_text(record), err=True)
            click.echo(f"Replay it with: scopecheck replay {path}", err=True)
    sys.exit(1 if total_failures else 0)


def _failure_text(record: dict[str, Any]) -> str:
    """What a saved failure shows: a machine's program, a crash failure's point and image."""
    if "program" in record:
        return str(record["program"])
    from scopecheck.crashsim.failure import BadReproducer, CrashFailure

    try:
        return str(CrashFailure.from_json(record))
    except BadReproducer:
        return ""


# -- replay ---------------------------------------------------------------------------------


@cli.command()
@click.argument("file")
def replay(file: str) -> None:
    """Re-run a saved failure exactly; exit 1 while it still fails, 3 when a machine failure
    (or a timing-dependent crash run) could not be reproduced, 0 once a crash state recovers."""
    from scopecheck.run.crash import NOT_REPRODUCED
    from scopecheck.run.replay import load_reproducer, replay_machine

    record = load_reproducer(file)
    if record["kind"] == "crash":
        from scopecheck.run.crash import replay_command

        sys.exit(replay_command(file))
    if record["kind"] != "machine":
        fail(f"{file}: unknown reproducer kind {record['kind']!r}")
    click.echo(f"Replaying {record['backend']} (seed {record['seed']}):")
    replayed = replay_machine(record)
    click.echo(replayed.text)
    if replayed.reproduced:
        click.echo("Still failing.")
        sys.exit(1)
    click.echo("Not reproduced: neither confirmed nor fixed.")
    sys.exit(NOT_REPRODUCED)


# -- crash ----------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    help="Bundled workload name or JSON file (repeatable; default: every bundled workload).",
)
@click.option(
    "--mode",
    type=click.Choice(["prefix", "unsynced"]),
    default="unsynced",
    show_default=True,
    help="prefix: process crashes and torn writes; unsynced: also lose unsynced data.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of sampled cut points.")
@click.option("--no-faults", is_flag=True, help="Skip the single-I/O-fault runs.")
@click.option(
    "--failures-dir", default=DEFAULT_FAILURES, show_default=True, help="Where reproducer files go."
)
@click.option("--replay", "replay_file", default=None, help="Replay one crash reproducer file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def crash(
    workloads: tuple[str, ...],
    mode: str,
    seed: int,
    no_faults: bool,
    failures_dir: str,
    replay_file: str | None,
    as_json: bool,
) -> None:
    """Explore every crash state of JSONL workloads on a fake filesystem (or replay one)."""
    from scopecheck.run.crash import crash_command

    sys.exit(
        crash_command(
            workloads,
            "prefix" if mode == "prefix" else "unsynced",
            seed,
            not no_faults,
            failures_dir,
            as_json,
            replay_file,
        )
    )


# -- validate -------------------------------------------------------------------------------


@cli.command()
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
def validate(
    factory: str | None,
    budget: float,
    examples: int | None,
    seed: int,
    require: str,
    failures_dir: str,
    as_json: bool,
    command: str | None,
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

    from scopecheck.run.validate import PHASES, PhaseReport, parse_required, summary_lines
    from scopecheck.run.validate import validate as run_validate

    if not budget > 0:
        fail(f"--budget must be a positive number of seconds (got {budget:g})")
    try:
        required = parse_required(require)
    except ScopecheckError as exc:
        fail(str(exc))
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
            verdict = run_validate(
                spec, budget, Path(failures_dir), seed, progress=LiveProgress(),
                examples=examples, require=required, started=started,
            )  # fmt: skip
        except ScopecheckError as exc:
            live.stop()
            fail(f"{exc.code}: {exc}")
    if as_json:
        emit_json(verdict.as_json())
        sys.exit(0 if verdict.passed else 1)
    from rich.text import Text

    out = Console(highlight=False)
    styles = {"PASSED": "green", "FAILED": "red", "INCOMPLETE": "yellow", "REQUIRED": "red"}
    for line in summary_lines(verdict):
        text = Text(line)
        first = line.split(" ", 1)[0]
        if first in styles:
            text.stylize(styles[first], 0, len(first))
        out.print(text, soft_wrap=True)
    sys.exit(0 if verdict.passed else 1)


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


# -- serve --------------------------------------------------------------------------------


@cli.command()
@click.argument("factory")
def serve(factory: str) -> None:
    """Run FACTORY (PATH_OR_MODULE:make_backend) behind the process protocol on stdin/stdout.

    The child a process backend runs as: `scopecheck validate --exec 'scopecheck serve
    my_backend.py:make_backend'` checks the factory in a separate process, with real
    restarts.  See docs/protocol.md."""
    from scopecheck.backends.factory import load_factory
    from scopecheck.process.server import main as serve_main

    serve_main(factory, load_factory)


# -- mutants --------------------------------------------------------------------------------


@cli.command()
@click.option("--backend", default=None, help="Only mutants of this backend.")
@click.option("--name", "names", multiple=True, help="Only these mutants (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def mutants(backend: str | None, names: tuple[str, ...], as_json: bool) -> None:
    """Run every planted bug through the machine and report whether it was caught."""
    from rich.console import Console
    from rich.table import Table

    from scopecheck.planted import all_mutants, run_mutant

    chosen = all_mutants(backend)
    if names:
        known = {m.name for m in chosen}
        missing = [n for n in names if n not in known]
        if missing:
            fail(f"unknown mutant {missing[0]!r}; run 'scopecheck mutants --json' to list them")
        chosen = [m for m in chosen if m.name in names]
    if not chosen:
        fail(f"no mutants for backend {backend!r}")
    console = Console(stderr=True, quiet=as_json)
    results = []
    for mutant in chosen:
        with console.status(f"{mutant.name}…"):
            results.append(run_mutant(mutant))
        r = results[-1]
        console.print(
            f"{'[green]caught[/]' if r.caught else '[red]MISSED[/]'} {r.name} "
            f"({r.seconds:.1f}s, {r.steps} steps)"
        )
    if as_json:
        emit_json(
            {
                "mutants": [
                    {
                        "name": r.name,
                        "backend": r.backend,
                        "description": r.description,
                        "caught": r.caught,
                        "seconds": r.seconds,
                        "steps": r.steps,
                    }
                    for r in results
                ]
            }
        )
    else:
        table = Table(title="planted bugs")
        for column in ("mutant", "backend", "caught", "seconds", "steps", "description"):
            table.add_column(column)
        for r in results:
            table.add_row(
                r.name,
                r.backend,
                "yes" if r.caught else "[red]NO[/]",
                f"{r.seconds:.1f}",
                str(r.steps),
                r.description,
            )
        Console().print(table)
    sys.exit(0 if all(r.caught for r in results) else 1)


# -- crosshair ------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--planted", is_flag=True, help="Also check that a planted bug in each function is caught."
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=None,
    help="Override every module's --max_uninteresting_iterations (default: per-module budget).",
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def crosshair(planted: bool, iterations: int | None, workers: int, as_json: bool) -> None:
    """Run CrossHair over the PEP 316 contracts of the pure functions (CHECK-1..CHECK-5)."""
    from scopecheck.tools.crosshair_check import crosshair_command

    sys.exit(
        crosshair_command(planted=planted, iterations=iterations, workers=workers, as_json=as_json)
    )


# -- inspect --------------------------------------------------------------------------------


@cli.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inspect(path: str, as_json: bool) -> None:
    """Read a JSONL Session (main file or its directory) without changing a byte: header,
    transactions, retirement boundaries, live and retired sidecar records, high-water mark,
    torn tails and corruption.  Exit 0 if it would open, 1 if corrupt, 2 if not a Session."""
    from scopecheck.tools.inspect_jsonl import inspect_session, render

    try:
        report = inspect_session(path)
    except ScopecheckError as exc:
        fail(f"{path}: {exc}")
    if as_json:
        emit_json(report)
    else:
        click.echo(render(report))
    sys.exit(1 if report["open"] != "succeeds" else 0)


# -- rules ----------------------------------------------------------------------------------


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def rules(as_json: bool) -> None:
    """Every spec rule with the tests that cover it, then the uncovered ones."""
    from scopecheck.tools.rules import rules_command

    sys.exit(rules_command(as_json))


# -- bench ----------------------------------------------------------------------------------


@cli.command()
@click.argument("which", required=False, default="machine")
@click.argument("target", required=False)
@click.option(
    "--runs", type=int, default=3, show_default=True, help="Repetitions (the median is reported)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--large", is_flag=True, help="jsonl only: also open a 100 MB Session.")
@click.option("--exec", "command", help="process only: the backend command to measure.")
@click.option("--budget", type=float, help="process only: machine seconds a run (default 8).")
def bench(
    which: str,
    target: str | None,
    runs: int,
    as_json: bool,
    large: bool,
    command: str | None,
    budget: float | None,
) -> None:
    """Benchmarks (figures, never assertions): machine, …; ``process [--exec CMD | SPEC]``."""
    from scopecheck.bench import BENCHMARKS, bench_jsonl_figures

    if which not in BENCHMARKS:
        fail(f"unknown benchmark {which!r}; choose from {', '.join(sorted(BENCHMARKS))}")
    if runs < 1:
        fail("--runs must be at least 1")
    if large and which != "jsonl":
        fail("--large applies to the jsonl benchmark only")
    if which != "process" and (target or command or budget is not None):
        fail("a target, --exec and --budget apply to the process benchmark only")
    if target and command:
        fail("give --exec CMD or a PATH_OR_MODULE:FACTORY, not both")
    if which == "process":
        from scopecheck.bench.process import BUDGET, bench_process

        spec = f"exec:{command}" if command else target
        result = bench_process(runs, spec, BUDGET if budget is None else budget)
    elif large:
        result = bench_jsonl_figures(runs, large=True)
    else:
        result = BENCHMARKS[which](runs)
    if as_json:
        emit_json(result)
    else:
        from scopecheck.bench import render

        render(which, result)


def main(argv: list[str] | None = None) -> None:
    """Entry point: click in non-standalone mode so every mistake is one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="scopecheck", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # pragma: no cover - depends on click
        click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
        sys.exit(2)
    except click.UsageError as exc:
        click.echo(f"scopecheck: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"scopecheck: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("scopecheck: aborted", err=True)
        sys.exit(130)
    except ScopecheckError as exc:
        click.echo(f"scopecheck: error: {exc}", err=True)
        sys.exit(2 if exc.code != "corrupt" else 1)
    sys.exit(0)
