"""``scopecheck replay``: re-run one saved failure; it reproduces (exit 1) or could not (3)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from scopecheck.cli.common import fail, supervised

if TYPE_CHECKING:
    from scopecheck.run.bundle import Exported


@click.command()
@click.argument("file")
@click.option(
    "--export",
    "export_to",
    metavar="DIR",
    help="Write a standalone bundle of the failure to DIR (a new folder): for a crash, fault or "
    "kill failure the image, the trace, the expected and actual states; for a machine failure "
    "the protocol requests with the model's answers; and reproduce.py, which needs only Python.",
)
def replay(file: str, export_to: str | None) -> None:
    """Re-run a saved failure exactly; exit 1 while it still fails, 3 when a machine failure
    (or a timing-dependent crash run) could not be reproduced, 0 once a crash state recovers.
    With --export DIR, write the failure's bundle instead and run its reproduce.py once: the
    same exit statuses, from what it found (a fault or kill run is rerun for its image first;
    exit 3 and nothing written when it does not fail again)."""
    from scopecheck.run.stopping import signals_stop_the_run

    supervised()  # a signal stops it with nothing left behind (INSTALL-21)
    with signals_stop_the_run():
        _replay(file, export_to)


def _replay(file: str, export_to: str | None) -> None:
    from scopecheck.run.crash import NOT_REPRODUCED
    from scopecheck.run.replay import load_reproducer, replay_machine

    record = load_reproducer(file)
    if export_to is not None:
        from scopecheck.run.export import NotReproduced, export

        if os.path.lexists(export_to):
            fail(f"{export_to} exists: export into a new folder")
        if record["kind"] not in ("crash", "machine"):
            fail(f"{file}: unknown reproducer kind {record['kind']!r}")
        try:
            done = export(record, export_to, f"scopecheck replay {file}")
        except NotReproduced as missed:
            click.echo(str(missed))
            click.echo("nothing exported: no rerun failed again (above), so there is nothing "
                       "failing to bundle")  # fmt: skip
            sys.exit(NOT_REPRODUCED)
        click.echo(f"exported to {export_to} ({done.size:,} bytes)")
        click.echo(done.output.rstrip())
        sys.exit(_exported_status(done, export_to, file))
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


def _exported_status(done: Exported, folder: str, file: str) -> int:
    """The export's exit status, true to what it saw.  A crash bundle's is its script's: 1
    while the image fails, 0 once it recovers, 3 when it could not judge.  A fault, kill or
    machine failure was rerun and seen failing before it was bundled: 1, whatever its script
    could show -- a script that cannot judge it says why; one that finds it passing makes
    the export not reproduced (3), never fixed (CRASH-COV-5)."""
    from scopecheck.run.crash import NOT_REPRODUCED

    rerun = f"scopecheck replay {file}"
    if done.status == 2:
        click.echo(f"its reproduce.py cannot judge it (above); rerun the failure with: {rerun}")
    else:
        click.echo(f"run it again with: python {folder}/reproduce.py")
    if not done.failed_again:
        return {1: 1, 0: 0}.get(done.status, NOT_REPRODUCED)
    if done.status == 0:
        click.echo(
            "the rerun failed, but the bundle's reproduce.py, run once, did not show it: the "
            f"failure depends on timing or on state the bundle does not hold ({rerun} reruns it)"
        )
        return NOT_REPRODUCED
    return 1
