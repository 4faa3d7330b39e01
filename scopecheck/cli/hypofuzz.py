"""``scopecheck hypofuzz``: HypoFuzz over a user's backend, with a file of targets to keep."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import click

from scopecheck.cli.common import fail, supervised

TARGETS = '''"""HypoFuzz targets for {spec}, written by `scopecheck hypofuzz`.

Run: hypothesis fuzz --no-dashboard -n {workers} -- {name}
"""

import scopecheck

globals().update(scopecheck.fuzz_targets_for({spec!r}))
'''


@click.command()
@click.argument("spec")
@click.option(
    "-n", "workers", type=click.IntRange(min=1), default=1, show_default=True,
    help="HypoFuzz worker processes.",
)  # fmt: skip
@click.option(
    "--write",
    "path",
    default=None,
    metavar="FILE",
    help="Write the targets file here and stop (default: .scopecheck/hypofuzz/<name>_targets.py,"
    " then run it).",
)
def hypofuzz(spec: str, workers: int, path: str | None) -> None:
    """Fuzz SPEC (PATH_OR_MODULE:make_backend or exec:'CMD ...') with HypoFuzz until stopped
    (Ctrl-C): its storage machine, its fork machine when it has fork(), and its crash
    exploration.  Failures go to the example database ($SCOPECHECK_DB: a directory or
    redis://HOST:PORT/DB shared by a fleet) and replay first in the next run."""
    from scopecheck.backends.adapters import anchored, load
    from scopecheck.models.errors import ScopecheckError

    spec = anchored(spec, os.getcwd())
    try:  # a spec that cannot load fails here, in one line, not in every worker
        loaded = load(spec)
    except ScopecheckError as exc:
        fail(str(exc))
    if loaded.backend.close is not None:
        loaded.backend.close()
    target = Path(path) if path else default_path(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(TARGETS.format(spec=spec, name=target, workers=workers), encoding="utf-8")
    if path:
        click.echo(f"wrote {target}; run: hypothesis fuzz --no-dashboard -n {workers} -- {target}")
        return
    program = shutil.which("hypothesis", path=os.path.dirname(sys.executable)) or shutil.which(
        "hypothesis"
    )
    if program is None or not _has_hypofuzz():
        fail("HypoFuzz is not installed: pip install 'scopecheck[hypofuzz]'")
    command = [program, "fuzz", "--no-dashboard", "-n", str(workers), "--", str(target)]
    from scopecheck.run.stopping import signals_stop_the_run
    from scopecheck.run.validate import STOP_CODES, signal_name

    supervised()
    click.echo(f"fuzzing {spec} ({' '.join(command[1:])}); stop with Ctrl-C", err=True)
    # Its own process group: HypoFuzz's workers outlive a signal to the hub alone.
    child = subprocess.Popen(command, start_new_session=True)
    try:
        with signals_stop_the_run():
            status = child.wait()
    except KeyboardInterrupt as exc:  # SIGINT, SIGTERM or SIGHUP: HypoFuzz stops as on Ctrl-C
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)
        status = STOP_CODES.get(signal_name(exc), 130)
        click.echo(f"scopecheck: stopped by {signal_name(exc)}", err=True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)
    sys.exit(status)


def default_path(spec: str) -> Path:
    stem = "".join(ch if ch.isalnum() else "_" for ch in Path(spec.rpartition(":")[0]).stem)
    return Path(".scopecheck") / "hypofuzz" / f"{stem or 'backend'}_targets.py"


def _has_hypofuzz() -> bool:
    import importlib.util

    return importlib.util.find_spec("hypofuzz") is not None
