"""What every command shares: the one-line user mistake (ERR-4), JSON output, the defaults."""

from __future__ import annotations

from typing import Any, NoReturn

import click
import orjson

DEFAULT_BUDGET = 20.0
DEFAULT_FAILURES = ".scopecheck/failures"


class UserMistake(click.ClickException):
    """A mistake on the command line: one line, exit 2."""

    exit_code = 2


#: ``--fs-profile NAME``: the file-system profile a crash failure must happen under to fail
#: (CRASH-SYS-15); checked by the command, so an unknown name is one line, exit 2.
FS_PROFILE_OPTION = click.option(
    "--fs-profile",
    default="posix",
    show_default=True,
    metavar="NAME",
    help="The file-system profile a power-loss failure must happen under to fail the run: "
    "posix, ext4-ordered or btrfs; a failure under other profiles only is a warning "
    "(docs/crash-syscalls.md).",
)


def fail(message: str) -> NoReturn:
    raise UserMistake(message)


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
