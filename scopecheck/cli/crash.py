"""``scopecheck crash``: crash exploration of the bundled JSONL workloads, or one replay."""

from __future__ import annotations

import sys

import click

from scopecheck.cli.common import DEFAULT_FAILURES, FS_PROFILE_OPTION, fail, supervised


@click.command()
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    help="Bundled workload name or JSON file (repeatable; default: every bundled workload).",
)
@click.option(
    "--mode",
    type=click.Choice(["prefix", "unsynced"]),
    default="unsynced",
    show_default=True,
    help="prefix: process crashes and torn writes; unsynced: also lose unsynced data.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of sampled cut points.")
@click.option("--no-faults", is_flag=True, help="Skip the single-I/O-fault runs.")
@click.option(
    "--failures-dir", default=DEFAULT_FAILURES, show_default=True, help="Where reproducer files go."
)
@click.option("--replay", "replay_file", default=None, help="Replay one crash reproducer file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@FS_PROFILE_OPTION
def crash(
    workloads: tuple[str, ...],
    mode: str,
    seed: int,
    no_faults: bool,
    failures_dir: str,
    replay_file: str | None,
    as_json: bool,
    fs_profile: str,
) -> None:
    """Explore every crash state of JSONL workloads on a fake filesystem (or replay one)."""
    from scopecheck.models.errors import ScopecheckError
    from scopecheck.run.crash import crash_command
    from scopecheck.run.validate import check_fs_profile

    try:
        check_fs_profile(fs_profile)
    except ScopecheckError as exc:
        fail(str(exc))
    from scopecheck.run.stopping import signals_stop_the_run

    supervised()  # a signal stops it with nothing left behind (INSTALL-21)
    with signals_stop_the_run():
        code = crash_command(
            workloads,
            "prefix" if mode == "prefix" else "unsynced",
            seed,
            not no_faults,
            failures_dir,
            as_json,
            replay_file,
            fs_profile,
        )
    sys.exit(code)
