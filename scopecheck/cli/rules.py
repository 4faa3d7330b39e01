"""``scopecheck rules``: every spec rule with the tests that cover it."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def rules(as_json: bool) -> None:
    """Every spec rule with the tests that cover it, then the uncovered ones."""
    from scopecheck.tools.rules import rules_command

    sys.exit(rules_command(as_json))
