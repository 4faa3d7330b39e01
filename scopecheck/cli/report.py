"""``scopecheck report``: a ``validate --json`` verdict as one self-contained HTML page
(REPORT-1..6)."""

from __future__ import annotations

from pathlib import Path

import click

from scopecheck.cli.common import fail
from scopecheck.models.errors import ScopecheckError


@click.command()
@click.argument("verdict", metavar="VERDICT.json")
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE",
    help="The HTML file to write (replaced whole; nothing is written on a mistake).",
)
@click.option(
    "--failures-dir",
    default=None,
    metavar="DIR",
    help="Read each failure's reproducer by its file name from DIR instead of the path the "
    "verdict names (a verdict moved from another machine, a CI artifact).",
)
def report(verdict: str, output: str, failures_dir: str | None) -> None:
    """Draw VERDICT.json (what scopecheck validate --json prints) as one HTML page that needs
    nothing else: the phases, crash coverage, and every failure with its reproducer's story."""
    from scopecheck.run.report_html import check_output, read_verdict, write_report

    out = Path(output)
    try:
        check_output(out)
        if failures_dir is not None and not Path(failures_dir).is_dir():
            fail(f"not_found: {failures_dir}: no such directory of reproducers")
        read = read_verdict(Path(verdict))
        write_report(read, out, None if failures_dir is None else Path(failures_dir))
    except ScopecheckError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"io_error: {out}: cannot write the report: {exc.strerror or exc}")
