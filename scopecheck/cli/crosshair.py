"""``scopecheck crosshair``: CrossHair over the pure functions' contracts (CHECK-1..5)."""

from __future__ import annotations

import sys

import click


@click.command()
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
