"""``scopecheck inspect``: read a JSONL Session without changing a byte."""

from __future__ import annotations

import sys

import click

from scopecheck.cli.common import emit_json, fail
from scopecheck.models.errors import ScopecheckError


@click.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inspect(path: str, as_json: bool) -> None:
    """Read a JSONL Session (main file or its directory) without changing a byte: header,
    transactions, retirement boundaries, live and retired sidecar records, high-water mark,
    torn tails and corruption.  Exit 0 if it would open, 1 if corrupt, 2 if not a Session."""
    from scopecheck.tools.inspect_jsonl import inspect_session, render

    try:
        report = inspect_session(path)
    except ScopecheckError as exc:
        fail(f"{path}: {exc}")
    if as_json:
        emit_json(report)
    else:
        click.echo(render(report))
    sys.exit(1 if report["open"] != "succeeds" else 0)
