"""``scopecheck crash``: explore every crash state of JSONL workloads, or replay one.

Quiet when all is well (a progress bar, then one table or JSON), precise when not: each
failure is saved as a reproducer file (kind ``crash``) and the command that replays it is
printed.  Exit 0 when every state passes, 1 on any failure, 2 on a user mistake.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import click
import orjson

from scopecheck.crashsim.failure import profiles_text
from scopecheck.crashsim.jsonl_sweep import (
    Mode,
    WorkloadReport,
    count_states,
    explore_workload,
    trace,
)
from scopecheck.crashsim.jsonl_workloads import BUNDLED, Workload, resolve
from scopecheck.models.errors import UsageError
from scopecheck.run.fuzz import save_reproducer

MAX_REPRODUCERS = 3


def crash_command(
    workloads: tuple[str, ...],
    mode: Mode,
    seed: int,
    faults: bool,
    failures_dir: str,
    as_json: bool,
    replay_file: str | None,
    fs_profile: str = "posix",
) -> int:
    """Explore ``workloads``; exit 1 when a failure happens under ``fs_profile``, one under
    other file-system profiles only being a warning (CRASH-SYS-15)."""
    from rich.console import Console

    if replay_file is not None:
        return replay_command(replay_file)
    chosen: list[Workload] = []
    for name in workloads or tuple(BUNDLED):
        chosen.extend(resolve(name))
    console = Console(stderr=True, quiet=as_json)
    reports: list[WorkloadReport] = []
    saved: list[Path] = []
    started = time.perf_counter()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.fields[name]:<38}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[failures]} failures"),
        console=console,
    ) as progress:
        for workload in chosen:
            estimate = count_states(trace(workload), mode, seed)
            task = progress.add_task("", total=estimate, name=workload.name, failures=0)
            report = explore_workload(
                workload,
                mode=mode,
                seed=seed,
                faults=faults,
                on_state=_updater(progress, task),
            )
            progress.update(
                task, completed=report.states, total=report.states, failures=len(report.failures)
            )
            reports.append(report)
            for failure in report.failures[:MAX_REPRODUCERS]:
                record = attrs.evolve(failure, backend="jsonl").to_json()
                saved.append(save_reproducer(Path(failures_dir), record))
    seconds = time.perf_counter() - started
    states = sum(r.states for r in reports)
    failures = sum(1 for r in reports for f in r.failures if f.fails_under(fs_profile))
    warnings = sum(len(r.failures) for r in reports) - failures
    rate = round(states / seconds, 1) if seconds else 0.0
    if as_json:
        click.echo(
            orjson.dumps(
                {
                    "workloads": [
                        {
                            "name": r.name,
                            "states": r.states,
                            "failures": len(r.failures),
                            "recovery_states": r.recovery_states,
                            "ops": r.ops,
                            "fault_runs": r.faults,
                            "seconds": round(r.seconds, 3),
                        }
                        for r in reports
                    ],
                    "mode": mode,
                    "states": states,
                    "recovery_states": sum(r.recovery_states for r in reports),
                    "failures": failures,
                    "warnings": warnings,
                    "fs_profile": fs_profile,
                    "states_per_second": rate,
                    "reproducers": [str(p) for p in saved],
                },
                option=orjson.OPT_INDENT_2,
            ).decode()
        )
    else:
        from rich.table import Table

        table = Table(title=f"scopecheck crash (mode {mode}, seed {seed})")
        columns = ("workload", "ops", "crash states", "of which in recovery", "fault runs")
        for column in (*columns, "failures", "seconds"):
            table.add_column(column, justify="left" if column == "workload" else "right")
        for r in reports:
            table.add_row(
                r.name,
                str(r.ops),
                f"{r.states:,}",
                f"{r.recovery_states:,}",
                str(r.faults),
                f"[red]{len(r.failures)}[/]" if r.failures else "0",
                f"{r.seconds:.1f}",
            )
        recovery = sum(r.recovery_states for r in reports)
        table.add_row(
            "total", "", f"{states:,}", f"{recovery:,}", "", str(failures), f"{seconds:.1f}"
        )
        Console().print(table)
        Console().print(f"{rate:,.0f} crash states checked per second")
    for report in reports:
        for failure in report.failures[:MAX_REPRODUCERS]:
            what = "Failure" if failure.fails_under(fs_profile) else "Warning"
            click.echo(f"\n{what}: {failure}", err=True)
            click.echo(f"  file-system profiles: fails {profiles_text(failure.profiles)}", err=True)
    for path in saved:
        click.echo(f"Replay it with: scopecheck crash --replay {path}", err=True)
    return 1 if failures else 0


def _updater(progress: Any, task: Any) -> Callable[[int], None]:
    def update(states: int) -> None:
        progress.update(task, completed=states)

    return update


#: The exit status of a replay that neither reproduced nor could be called fixed.
NOT_REPRODUCED = 3


def replay_command(path: str) -> int:
    """Replay one kind ``crash`` reproducer; 1 while it fails, 0 once fixed, 3 when a
    timing-dependent run did not reproduce in several tries (not called fixed)."""
    from scopecheck.run.replay import load_reproducer, replay_crash

    record = load_reproducer(path)
    if record.get("kind") != "crash":
        raise UsageError(
            "invalid_payload",
            f"{path}: reproducer kind {record.get('kind')!r}; replay it with 'scopecheck replay'",
        )
    still, text = replay_crash(record)
    click.echo(text)
    if still is None:
        click.echo("Not reproduced: neither confirmed nor fixed.")
        return NOT_REPRODUCED
    click.echo("Still failing." if still else "Fixed: the recorded crash state now recovers.")
    return 1 if still else 0
