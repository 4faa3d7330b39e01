"""What every standalone bundle shares (``scopecheck replay FILE --export DIR``, INSTALL-24,
INSTALL-26): the folder written beside ``DIR`` and renamed into place, the ``reproduce.py`` it
carries (a stdlib-only script copied as it is) with ``bundle.json``, the one run of that
script the export makes, and the README's closing sections.

The kinds of bundle differ only in what they hold: a crash image (:mod:`.export`), the image a
fault or kill run left (:mod:`.export_fault`), a machine failure's protocol requests
(:mod:`.export_machine`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.failure import CrashFailure
from scopecheck.models.errors import UsageError
from scopecheck.process.syscall_crash import PYTHON

#: The bundle layout's version, in ``bundle.json``.
FORMAT = 1
#: Seconds the export gives ``reproduce.py`` to run once.
REPRODUCE_TIMEOUT = 300


@attrs.frozen
class Exported:
    """What an export wrote: the folder, its size in bytes, and what ``reproduce.py`` said
    when the export ran it (its exit status and output).  ``failed_again``: the export
    reran the failure and saw it fail (a fault, kill or machine failure), so the failure is
    confirmed whatever the bundle's own script could show."""

    directory: Path
    size: int
    status: int
    output: str
    failed_again: bool = False


class NotReproduced(Exception):
    """A failure the export reran, to find what to bundle, that did not fail again: nothing
    is written (the message says how the reruns went, CRASH-COV-5)."""


def write_folder(
    target: Path, fill: Callable[[Path], tuple[int, str]], *, failed_again: bool = False
) -> Exported:
    """Fill a new folder beside ``target`` (``fill`` returns what ``reproduce.py`` said) and
    rename it into place: a failed export leaves nothing behind, and an existing ``target``
    is never replaced."""
    if target.exists() or target.is_symlink():
        raise UsageError("already_exists", f"{target} exists: export into a new folder")
    parent = target.resolve().parent
    if not parent.is_dir():
        raise UsageError("not_found", f"no folder {parent} to export into")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=parent))
    work.chmod(0o755)  # a folder to hand on, as any other the user makes
    try:
        status, output = fill(work)
        with contextlib.suppress(OSError):
            (work / "stderr.txt").unlink()
        if target.exists() or target.is_symlink():  # made while the bundle was written
            raise UsageError("already_exists", f"{target} exists: export into a new folder")
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Exported(target, _size(target), status, output, failed_again)


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def write_json(path: Path, value: Any) -> None:
    path.write_bytes(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def add_script(work: Path, script: str, settings: Mapping[str, Any]) -> None:
    """Copy the stdlib-only script at ``script`` as the bundle's ``reproduce.py``, with
    ``settings`` as its ``bundle.json`` (the layout's :data:`FORMAT` first)."""
    write_json(work / "bundle.json", {"format": FORMAT, **settings})
    target = work / "reproduce.py"
    shutil.copyfile(script, target)
    target.chmod(0o755)


def run_script(work: Path, *args: str) -> tuple[int, str]:
    """Run the bundle's ``reproduce.py`` once as a user would, with ``args``: its exit
    status and output, the bundle's path shown as ``<bundle>``.  It runs in a session of its
    own with its temporary folders in one of ours, so a script that runs out of time is
    killed with the backend it started, and nothing it made is left behind."""
    scratch = tempfile.mkdtemp(prefix="scopecheck-reproduce-")
    try:
        child = subprocess.Popen(
            [sys.executable, str(work / "reproduce.py"), *args], cwd=work,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, env={**os.environ, "TMPDIR": scratch},
        )  # fmt: skip
        try:
            output, _ = child.communicate(timeout=REPRODUCE_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return 2, f"reproduce.py did not finish in {REPRODUCE_TIMEOUT} s"
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # what the script left running
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return child.returncode, output.replace(str(work), "<bundle>")


def backend_command(failure: CrashFailure) -> tuple[list[str], str]:
    """The command that serves the backend over the process protocol, and where it runs: a
    process backend's own (source ``syscall``), or ``python -m scopecheck serve SPEC`` for a
    Python factory (source ``fs``)."""
    target = failure.target
    if failure.source == "syscall":
        return [str(part) for part in target["command"]], str(target["cwd"])
    spec = target.get("spec")
    if failure.source == "fs" and isinstance(spec, str):
        return [PYTHON, "-m", "scopecheck", "serve", spec], os.getcwd()
    raise UsageError(
        "invalid_payload",
        f"a bundle reopens the image with the backend's own process; a reproducer of source "
        f"{failure.source!r} (scopecheck's built-in backends) has none: replay it instead",
    )


def shown_command(command: Sequence[str]) -> str:
    """A backend's command as a README shows it (the interpreter placeholder as
    ``python``)."""
    return shlex.join("python" if part == PYTHON else part for part in command)


def image_reproduce(command: Sequence[str]) -> list[str]:
    """How to run an image bundle's ``reproduce.py``, and what a fix shows there."""
    return [
        "```",
        "python reproduce.py            # exit 1 while the failure shows, 0 once it does not",
        "python reproduce.py --command 'CMD' --cwd DIR   # the same image, another build",
        "```",
        "",
        "It needs only Python's standard library and the backend's own command "
        f"(`{shown_command(command)}`, run where it was found -- `bundle.json` says where -- "
        "or give `--cwd`; a Python backend runs under the Python that made the bundle, or the "
        "one `--python` gives). A fix in how the backend *reads* shows here; a fix in how it "
        "*writes* leaves this image as it is, and shows in a new run of the command that "
        "found it.",
    ]


def closing_sections(
    reproduce: Sequence[str], status: int, output: str, found_by: str
) -> list[str]:
    """A bundle README's last sections: how to run ``reproduce.py`` (``reproduce``, its
    lines), what it said when the bundle was made, and the command that found the failure."""
    return [
        "## Reproduce",
        "",
        *reproduce,
        "",
        f"When this bundle was made, `reproduce.py` exited {status}:",
        "",
        "```",
        output.strip(),
        "```",
        "",
        "## Found by",
        "",
        "```",
        found_by,
        "```",
        "",
    ]
