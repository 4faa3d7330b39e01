"""A standalone bundle of one crash failure (``scopecheck replay FILE --export DIR``).

The people who fix a crash-recovery bug need the files as the crash left them, one command
that shows the loss with their own code and nothing else, and the story of the calls that led
there.  A bundle holds exactly that, and nothing in it needs scopecheck to run
(INSTALL-24):

* ``image/``: the files byte for byte as the crash left them, rebuilt from the reproducer's
  recorded operations (CRASH-SYS-9); for a crash during recovery ``image/`` is what the
  interrupted recovery left and ``image-before-recovery/`` the crash image it started from;
* ``trace.txt``: the calls per file with the acknowledgements and the crash point among them,
  and what the persistence model dropped or tore, under which profile
  (:func:`~scopecheck.crashsim.story.trace_text`);
* ``expected.json``: the model's states at the crash point, in the process protocol's terms
  (docs/protocol.md: entries, usage, values, lists, stats), and ``actual.json``: what
  reopening the image gave when the bundle was made;
* ``reproduce.py`` (:mod:`scopecheck.run.reproduce_bundle`, copied) with ``bundle.json``, the
  backend's command: it reopens a copy of ``image/`` and prints the difference; exit 1 while
  the loss shows, 0 once it does not;
* ``README.md``: the story in words, the profiles, and the command that found it.

The bundle is written beside ``DIR`` and renamed into place, so a failed export leaves
nothing behind, and an existing ``DIR`` is never overwritten.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.failure import BadReproducer, CrashFailure
from scopecheck.crashsim.jsonl_sweep import model_states
from scopecheck.crashsim.jsonl_workloads import workload_from_json
from scopecheck.crashsim.story import Story, lost_lines, story_of, trace_text
from scopecheck.models.errors import UsageError
from scopecheck.models.wire import snapshot_to_json
from scopecheck.process.syscall_crash import PYTHON, SESSION, write_image
from scopecheck.run import reproduce_bundle

#: The bundle layout's version, in ``bundle.json``.
FORMAT = 1
#: Seconds the export gives ``reproduce.py`` to reopen the image once, for ``actual.json``.
REPRODUCE_TIMEOUT = 300


@attrs.frozen
class Exported:
    """What an export wrote: the folder, its size in bytes, and what ``reproduce.py`` said
    when the export ran it (its exit status and output)."""

    directory: Path
    size: int
    status: int
    output: str


def _backend_command(failure: CrashFailure) -> tuple[list[str], str]:
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


def _expected(failure: CrashFailure, story: Story) -> dict[str, Any]:
    """The states the model allows at the crash point (CRASH-SYS-2): after every step
    acknowledged before it, and after the step in flight."""
    assert failure.evidence is not None
    workload = workload_from_json(failure.workload)
    model = model_states(workload)
    done = failure.evidence.acked(story.point)
    indices = [done] if done >= len(workload.steps) else [done, done + 1]
    return {
        "rule": failure.rule,
        "problem": failure.problem,
        "session": SESSION,
        "acknowledged": done,
        "allowed_after_steps": indices,
        "allowed": [
            None if model.snapshots[i] is None else snapshot_to_json(model.snapshots[i])  # type: ignore[arg-type]
            for i in indices
        ],
        "next_seqs": [model.next_seqs[i] for i in indices],
        "narrow_by": "image-before-recovery" if story.recovered is not None else None,
    }


def _readme(failure: CrashFailure, story: Story, found_by: str, status: int, output: str) -> str:
    profiles = ", ".join(failure.profiles) or story.profile
    done = failure.evidence.acked(story.point) if failure.evidence else 0
    lines = [
        f"# {failure.rule}: {failure.what}",
        "",
        f"{failure.problem}",
        "",
        "## What happened",
        "",
        f"The workload ran {len(story.steps)} steps against the backend; {done} of them "
        f"{'was' if done == 1 else 'were'} acknowledged when the crash came, before operation "
        f"{story.point} of {len(story.ops)} (`{story.variant}`).",
    ]
    if story.power_loss:
        lines += ["", "A power loss: what the disk kept is what the persistence model lets it "
                  "keep of what was not yet synced.", "", "```", *lost_lines(story.before,
                  story.after), "```"]  # fmt: skip
    elif story.after != story.before:
        lines += ["", "A process crash in the middle of that operation: the image holds every "
                  "byte written before it and part of it (`trace.txt` says how much)."]  # fmt: skip
    else:
        lines += ["", "A process crash: the page cache survived, so the image holds every "
                  "byte written before that operation."]  # fmt: skip
    if story.recovered is not None:
        lines += ["", f"The backend then reopened that image and crashed during its recovery "
                  f"(`{story.recovery_variant}`, before its operation {story.recovery_point}): "
                  "`image-before-recovery/` is the crash image, `image/` what the interrupted "
                  "recovery left."]  # fmt: skip
    lines += [
        "",
        f"It fails under the file-system profiles: {profiles} (the image is built under "
        f"{story.profile}).",
        "",
        "## Files",
        "",
        "- `image/`: the files as the crash left them, byte for byte",
        "- `trace.txt`: every call per file, the acknowledgements and the crash among them, "
        "and what the power loss lost",
        "- `expected.json`: the states the model allows (the process protocol's snapshot "
        "form); `actual.json`: what reopening gave when this bundle was made",
        "- `reproduce.py`, `bundle.json`: reopen a copy of `image/` with the backend",
        "",
        "## Reproduce",
        "",
        "```",
        "python reproduce.py            # exit 1 while the loss shows, 0 once it does not",
        "python reproduce.py --command 'CMD' --cwd DIR   # the same image, another build",
        "```",
        "",
        "It needs only Python's standard library and the backend's own command "
        f"(`{_shown(_backend_command(failure)[0])}`, run where it was found -- "
        "`bundle.json` says where -- or give `--cwd`). A fix in how the backend *reads* "
        "shows here; a fix in how it *writes* leaves this image as it is, and shows in a new "
        "run of the command that found it.",
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
    return "\n".join(lines)


def _shown(command: list[str]) -> str:
    return shlex.join("python" if part == PYTHON else part for part in command)


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def export(record: Mapping[str, Any], destination: str, found_by: str) -> Exported:
    """Write the bundle of the crash reproducer ``record`` to ``destination`` (which must not
    exist), run its ``reproduce.py`` once for ``actual.json``, and say what it found.  A
    record with no crash image to rebuild (a fault, kill or workload run) is refused with
    the reason; nothing is written then."""
    target = Path(destination)
    if target.exists() or target.is_symlink():
        raise UsageError("already_exists", f"{destination} exists: export into a new folder")
    try:
        failure = CrashFailure.from_json(record)
        story = story_of(failure)
    except (BadReproducer, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a crash reproducer: {exc}") from None
    if story is None:
        raise UsageError(
            "invalid_payload",
            f"this reproducer reruns {failure.what}; a bundle holds a crash image rebuilt "
            "from recorded operations, which only a crash or recovery failure has",
        )
    command, cwd = _backend_command(failure)
    parent = target.resolve().parent
    if not parent.is_dir():
        raise UsageError("not_found", f"no folder {parent} to export into")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=parent))
    work.chmod(0o755)  # a folder to hand on, as any other the user makes
    try:
        if story.recovered is not None:
            write_image(story.after, str(work / "image-before-recovery"))
        write_image(story.last, str(work / "image"))
        (work / "trace.txt").write_text(trace_text(story))
        expected = _expected(failure, story)
        (work / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2))
        bundle = {"format": FORMAT, "command": command, "cwd": cwd, "session": SESSION,
                  "probe": True, "backend": failure.backend}  # fmt: skip
        (work / "bundle.json").write_bytes(orjson.dumps(bundle, option=orjson.OPT_INDENT_2))
        script = work / "reproduce.py"
        shutil.copyfile(reproduce_bundle.__file__, script)
        script.chmod(0o755)
        status, output = _run(work)
        (work / "README.md").write_text(_readme(failure, story, found_by, status, output))
        with contextlib.suppress(OSError):
            (work / "stderr.txt").unlink()
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Exported(target, _size(target), status, output)


def _run(bundle: Path) -> tuple[int, str]:
    """Run the bundle's ``reproduce.py`` as a user would, writing ``actual.json``."""
    try:
        done = subprocess.run(
            [sys.executable, str(bundle / "reproduce.py"), "--write-actual",
             str(bundle / "actual.json")],
            capture_output=True, text=True, timeout=REPRODUCE_TIMEOUT, cwd=bundle,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return 2, f"reproduce.py did not finish in {REPRODUCE_TIMEOUT} s"
    text = (done.stdout + done.stderr).replace(str(bundle), "<bundle>")
    return done.returncode, text
