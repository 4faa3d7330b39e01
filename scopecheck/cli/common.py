"""What every command shares: the one-line user mistake (ERR-4), JSON output, the defaults."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click
import orjson

if TYPE_CHECKING:
    from scopecheck.run.validate import Verdict

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
    from scopecheck.crashsim.shown import dumps  # odd strings a backend gave, escaped

    click.echo(dumps(data, option=orjson.OPT_INDENT_2).decode())


def show_verdict(verdict: Verdict, as_json: bool) -> NoReturn:
    """Print ``verdict`` -- its ``--json`` object, or the summary with its first words
    coloured -- and exit 0 when it passed, else 1 (``validate`` and ``merge``)."""
    if as_json:
        emit_json(verdict.as_json())
        sys.exit(0 if verdict.passed else 1)
    from rich.console import Console
    from rich.text import Text

    from scopecheck.run.validate import summary_lines

    out = Console(highlight=False)
    styles = {"PASSED": "green", "FAILED": "red", "INCOMPLETE": "yellow", "REQUIRED": "red"}
    for line in summary_lines(verdict):
        text = Text(line)
        first = line.split(" ", 1)[0]
        if first in styles:
            text.stylize(styles[first], 0, len(first))
        out.print(text, soft_wrap=True)
    sys.exit(0 if verdict.passed else 1)
