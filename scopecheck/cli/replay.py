"""``scopecheck replay``: re-run one saved failure; it reproduces (exit 1) or could not (3)."""

from __future__ import annotations

import sys

import click

from scopecheck.cli.common import fail


@click.command()
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
