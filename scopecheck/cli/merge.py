"""``scopecheck merge``: the reports of ``validate --shard K/N`` jobs, one verdict (FLEET-5)."""

from __future__ import annotations

import click

from scopecheck.cli.common import fail, show_verdict
from scopecheck.models.errors import ScopecheckError


@click.command()
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the merged verdict as JSON (docs/validate-json.md); stdout holds nothing else.",
)
def merge(reports: tuple[str, ...], as_json: bool) -> None:
    """Join the --json reports of scopecheck validate --shard K/N jobs into one verdict: exit 0
    when it passed, 1 when a shard failed or the shards do not cover the work exactly once
    (a shard missing: incomplete)."""
    from scopecheck.run.merge import merge_verdicts, read_reports

    try:
        verdict = merge_verdicts(read_reports(reports))
    except ScopecheckError as exc:
        fail(str(exc))
    show_verdict(verdict, as_json)
