"""``scopecheck mutants``: the planted-bug catalogue, each run and reported caught or missed."""

from __future__ import annotations

import sys

import click

from scopecheck.cli.common import emit_json, fail


@click.command()
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
