"""``scopecheck fuzz``: the stateful machine against each backend for a time budget."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from scopecheck.cli.common import (
    DEFAULT_BUDGET,
    DEFAULT_FAILURES,
    FS_PROFILE_OPTION,
    emit_json,
    fail,
    supervised,
)
from scopecheck.models.errors import ScopecheckError


@click.command()
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
@FS_PROFILE_OPTION
def fuzz(
    backends: tuple[str, ...],
    budget: float | None,
    seed: int | None,
    profile: str | None,
    failures_dir: str,
    workers: int,
    as_json: bool,
    fs_profile: str,
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
    from scopecheck.run.validate import check_fs_profile

    try:
        check_fs_profile(fs_profile)
    except ScopecheckError as exc:
        fail(str(exc))
    if workers > 1 and fs_profile != "posix":
        fail("--fs-profile other than posix runs with --workers 1 only")
    chosen_seed = seed if seed is not None else int(time.time()) % 1_000_000
    settings = load_profile(profile_name)
    from scopecheck.run.internal import EXIT_INTERNAL, InternalError
    from scopecheck.run.stopping import signals_stop_the_run
    from scopecheck.run.validate import STOP_CODES, phase_overrun, signal_name
    from scopecheck.run.watchdog import Overrun, limit

    # Each backend's run ends within its budget and overrun (INSTALL-20); the supervisor
    # stops the whole run a minute after the last could have ended (INSTALL-21).
    backend_limit = per_backend + 2 * phase_overrun(per_backend)
    supervised(hard_end=time.monotonic() + len(names) * backend_limit + 60)
    console = Console(stderr=True, quiet=as_json)
    reports: dict[str, BackendReport] = {}
    unfinished: dict[str, str] = {}
    internal: list[InternalError] = []
    stopped: str | None = None
    rerun = " ".join(
        ["scopecheck", "fuzz", *(f"--backend {name}" for name in names), "--budget",
         f"{per_backend:g}", "--seed", str(chosen_seed), "--profile", profile_name]
    )  # fmt: skip
    with (
        signals_stop_the_run(),
        Progress(
            TextColumn("{task.fields[name]:<14}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[steps]:>8} steps {task.fields[failures]} failures"),
            console=console,
            transient=False,
        ) as progress,
    ):
        try:
            if workers > 1:
                from scopecheck.run.parallel import fuzz_in_workers

                reports = fuzz_in_workers(
                    names, per_backend, chosen_seed, profile_name, Path(failures_dir), workers,
                    progress,
                )  # fmt: skip
            for name in names if workers == 1 else ():
                task = progress.add_task("", total=per_backend, name=name, steps=0, failures=0)
                reports[name] = BackendReport()

                def update(report: BackendReport, task: Any = task, name: str = name) -> None:
                    reports[name] = report  # what ran so far, if the run is stopped
                    progress.update(
                        task,
                        completed=min(report.seconds, per_backend),
                        steps=report.steps,
                        failures=report.failures,
                    )

                try:
                    with limit(backend_limit, f"fuzzing {name}"):
                        reports[name] = fuzz_backend(
                            chosen[name],
                            budget=per_backend,
                            seed=chosen_seed,
                            settings=settings,
                            failures_dir=Path(failures_dir),
                            profile=profile_name,
                            on_progress=update,
                            spec=name if is_user_spec(name) else None,
                            fs_profile=fs_profile,
                        )
                except Overrun as exc:
                    unfinished[name] = str(exc)
                except Exception as exc:  # scopecheck's own error: never the backend's
                    internal.append(InternalError.of(name, exc, rerun, Path(failures_dir)))
                    unfinished[name] = f"scopecheck's own error ({internal[-1].error})"
                progress.update(task, completed=per_backend)
        except KeyboardInterrupt as exc:
            stopped = signal_name(exc)
    total_failures = sum(r.failures for r in reports.values())
    if as_json:
        emit_json(
            {
                "backends": {n: r.as_json() for n, r in reports.items()},
                "failures": total_failures,
                "warnings": sum(r.warnings for r in reports.values()),
                "fs_profile": fs_profile,
                "seed": chosen_seed,
                "incomplete": unfinished,
                "internal_errors": [error.as_json() for error in internal],
                "stopped": stopped,
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
    ours = 0
    for report in reports.values():
        for path in report.reproducers:
            record = orjson.loads(Path(path).read_bytes())
            if record.get("origin") == "scopecheck":  # our own exception (INSTALL-19)
                ours += 1
                click.echo(
                    f"\nINTERNAL ERROR on {record['backend']}: "
                    f"{str(record['error']).splitlines()[0]}\n  at {record.get('where', '?')}\n"
                    "  this is scopecheck's own error, not the backend's: please report it with "
                    f"the reproducer (it holds the traceback)\n  rerun: scopecheck replay {path}",
                    err=True,
                )
                continue
            profiles = record.get("profiles") or ()
            what = "Warning" if profiles and fs_profile not in profiles else "Failure"
            click.echo(
                f"\n{what} on {record['backend']}: {record['error'].splitlines()[0]}", err=True
            )
            click.echo(_failure_text(record), err=True)
            if record.get("kind") == "crash":
                from scopecheck.crashsim.failure import profiles_text

                click.echo(f"file-system profiles: fails {profiles_text(profiles)}", err=True)
            click.echo(f"Replay it with: scopecheck replay {path}", err=True)
    for name, why in unfinished.items():
        click.echo(f"\nINCOMPLETE {name}: {why}", err=True)
    for error in internal:
        click.echo("\n" + "\n".join(error.lines()), err=True)
    if stopped is not None:
        click.echo(f"\nstopped by {stopped}: the figures so far", err=True)
        sys.exit(STOP_CODES.get(stopped, 1))
    if internal or ours:
        sys.exit(EXIT_INTERNAL)
    sys.exit(1 if total_failures or unfinished else 0)


def _failure_text(record: dict[str, Any]) -> str:
    """What a saved failure shows: a machine's program, a crash failure's point and image."""
    if "program" in record:
        return str(record["program"])
    from scopecheck.crashsim.failure import BadReproducer, CrashFailure

    try:
        return str(CrashFailure.from_json(record))
    except BadReproducer:
        return ""
