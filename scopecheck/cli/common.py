"""What every command shares: the one-line user mistake (ERR-4), JSON output, the defaults,
and the supervisor the long-running commands run under (INSTALL-21)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
import orjson

if TYPE_CHECKING:
    from scopecheck.run.validate import Verdict

DEFAULT_BUDGET = 20.0
DEFAULT_FAILURES = ".scopecheck/failures"

#: Set by :func:`~scopecheck.cli.main.main` when it is the process's entry point (the
#: ``scopecheck`` command), not a call from Python: only then does a command fork a supervisor.
ENTRY_POINT: list[bool] = [False]
#: ``$SCOPECHECK_NO_SUPERVISOR=1`` runs a command in one process (to debug it under a tracer).
NO_SUPERVISOR_ENV = "SCOPECHECK_NO_SUPERVISOR"


def supervised(
    *, hard_end: float | None = None, report_killed: Callable[[str, str], int] | None = None
) -> None:
    """Run the rest of the command under the supervisor
    (:func:`scopecheck.run.stopping.supervise`) when it is the ``scopecheck`` command's own
    process; else nothing happens (a call from Python keeps its process and its signals)."""
    if not ENTRY_POINT[0] or os.environ.get(NO_SUPERVISOR_ENV) == "1":
        return
    from scopecheck.run.stopping import supervise

    supervise(hard_end=hard_end, report_killed=report_killed)


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
    """Print ``verdict`` and exit with its exit code (``validate`` and ``merge``)."""
    print_verdict(verdict, as_json)
    sys.exit(verdict.exit_code)


def print_verdict(verdict: Verdict, as_json: bool) -> None:
    """Print ``verdict``: its ``--json`` object, or the summary with its first words
    coloured (``docs/validate-json.md``, "Exit codes")."""
    if as_json:
        emit_json(verdict.as_json())
        return
    from rich.console import Console
    from rich.text import Text

    from scopecheck.run.validate import summary_lines

    out = Console(highlight=False)
    styles = {
        "PASSED": "green", "FAILED": "red", "INCOMPLETE": "yellow", "REQUIRED": "red",
        "INTERNAL": "red",
    }  # fmt: skip
    for line in summary_lines(verdict):
        text = Text(line)
        first = line.split(" ", 1)[0]
        if first in styles:
            text.stylize(styles[first], 0, len(first))
        out.print(text, soft_wrap=True)
