"""``scopecheck bench``: the benchmarks, figures and never assertions."""

from __future__ import annotations

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
