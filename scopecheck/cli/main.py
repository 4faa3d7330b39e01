"""The ``scopecheck`` group: every command, and the entry point that turns mistakes into one line.

Quiet when all is well, precise when not: a user mistake prints one line and exits 2
(ERR-4), a found bug prints the shrunk program and the command that replays it and exits 1.
"""

from __future__ import annotations

import sys

import click

from scopecheck.cli.bench import bench
from scopecheck.cli.crash import crash
from scopecheck.cli.crosshair import crosshair
from scopecheck.cli.fuzz import fuzz
from scopecheck.cli.hypofuzz import hypofuzz
from scopecheck.cli.inspect_session import inspect
from scopecheck.cli.merge import merge
from scopecheck.cli.mutants import mutants
from scopecheck.cli.replay import replay
from scopecheck.cli.report import report
from scopecheck.cli.rules import rules
from scopecheck.cli.serve import serve
from scopecheck.cli.validate import validate
from scopecheck.models.errors import ScopecheckError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="scopecheck")
def cli() -> None:
    """Model-check scoped session storage backends against the reference model."""


for command in (
    fuzz,
    hypofuzz,
    replay,
    crash,
    validate,
    merge,
    report,
    serve,
    mutants,
    crosshair,
    inspect,
    rules,
    bench,
):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: click in non-standalone mode so every mistake is one line and exit 2.
    Called with no ``argv`` it is the ``scopecheck`` command's own process, and the
    long-running commands fork their supervisor (:func:`~scopecheck.cli.common.supervised`)."""
    from scopecheck.cli.common import ENTRY_POINT

    ENTRY_POINT[0] = argv is None
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
    except click.exceptions.Abort as exc:
        from scopecheck.run.validate import STOP_CODES, signal_name

        stopped = exc.__cause__ if isinstance(exc.__cause__, KeyboardInterrupt) else None
        name = signal_name(stopped) if stopped is not None else "SIGINT"
        click.echo(f"scopecheck: stopped by {name}", err=True)
        sys.exit(STOP_CODES.get(name, 130))
    except ScopecheckError as exc:
        click.echo(f"scopecheck: error: {exc}", err=True)
        sys.exit(2 if exc.code != "corrupt" else 1)
    sys.exit(0)
