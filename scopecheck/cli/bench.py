"""``scopecheck bench``: the benchmarks, figures and never assertions."""

from __future__ import annotations

import math

import click

from scopecheck.cli.common import emit_json, fail


@click.command()
@click.argument("which", required=False, default="machine")
@click.argument("target", required=False)
@click.option(
    "--runs", type=int, default=3, show_default=True, help="Repetitions (the median is reported)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--large", is_flag=True, help="jsonl only: also open a 100 MB Session.")
@click.option("--exec", "command", help="process only: the backend command to measure.")
@click.option(
    "--budget",
    type=float,
    help="process: machine seconds a run (default 8); fleet: seconds a HypoFuzz run may last "
    "(default 30).",
)
def bench(
    which: str,
    target: str | None,
    runs: int,
    as_json: bool,
    large: bool,
    command: str | None,
    budget: float | None,
) -> None:
    """Benchmarks (figures, never assertions): machine, …; ``process [--exec CMD | SPEC]``;
    ``stores [--exec CMD | SPEC] --runs 1``; ``fleet [--budget S]``."""
    from scopecheck.bench import BENCHMARKS, bench_jsonl_figures

    if which not in BENCHMARKS:
        fail(f"unknown benchmark {which!r}; choose from {', '.join(sorted(BENCHMARKS))}")
    if runs < 1:
        fail("--runs must be at least 1")
    if large and which != "jsonl":
        fail("--large applies to the jsonl benchmark only")
    if which not in ("process", "stores") and (target or command):
        fail("a target and --exec apply to the process and stores benchmarks only")
    if which not in ("process", "fleet") and budget is not None:
        fail("--budget applies to the process and fleet benchmarks only")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        fail(f"--budget must be a positive number of seconds, not {budget:g}")
    if target and command:
        fail("give --exec CMD or a PATH_OR_MODULE:FACTORY, not both")
    if which == "process":
        from scopecheck.bench.process import BUDGET, bench_process

        spec = f"exec:{command}" if command else target
        result = bench_process(runs, spec, BUDGET if budget is None else budget)
    elif which == "stores":
        from scopecheck.bench.stores import bench_stores

        result = bench_stores(runs, f"exec:{command}" if command else target)
    elif which == "fleet":
        from scopecheck.bench.fleet import BUDGET as FLEET_BUDGET
        from scopecheck.bench.fleet import bench_fleet

        result = bench_fleet(runs, FLEET_BUDGET if budget is None else budget)
    elif large:
        result = bench_jsonl_figures(runs, large=True)
    else:
        result = BENCHMARKS[which](runs)
    if as_json:
        emit_json(result)
    else:
        from scopecheck.bench import render

        render(which, result)
