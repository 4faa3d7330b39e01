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


def fail(message: str) -> NoReturn:
    raise UserMistake(message)


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
