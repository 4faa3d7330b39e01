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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.failure import ROOT_SHOWN, BadReproducer, CrashFailure, profiles_text
from scopecheck.crashsim.fault_check import FaultProblem, FaultRerun
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
        "after": f"{done} acknowledged steps",
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
        "python reproduce.py            # exit 1 while the failure shows, 0 once it does not",
        "python reproduce.py --command 'CMD' --cwd DIR   # the same image, another build",
        "```",
        "",
        "It needs only Python's standard library and the backend's own command "
        f"(`{_shown(_backend_command(failure)[0])}`, run where it was found -- "
        "`bundle.json` says where -- or give `--cwd`; a Python backend runs under the Python "
        "that made the bundle, or the one `--python` gives). A fix in how the backend *reads* "
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


class NotReproduced(Exception):
    """A fault or kill run that did not fail again when the export reran it: there is no
    failing image to bundle (the message says how the reruns went, CRASH-COV-5)."""


def export(record: Mapping[str, Any], destination: str, found_by: str) -> Exported:
    """Write the bundle of the crash reproducer ``record`` to ``destination`` (which must not
    exist), run its ``reproduce.py`` once for ``actual.json``, and say what it found.

    A crash or recovery failure's image is rebuilt from its recorded operations; a fault or
    kill run is rerun until it fails again (:class:`NotReproduced` if it does not), and its
    image is the one whose reopen showed the failure -- the disk the run left, or a power
    loss of it.  A machine failure is bundled as the protocol requests its example made
    (:mod:`scopecheck.run.export_machine`).  A workload record, or what cannot be bundled,
    is refused with the reason; nothing is written then."""
    target = Path(destination)
    if target.exists() or target.is_symlink():
        raise UsageError("already_exists", f"{destination} exists: export into a new folder")
    if record.get("kind") == "machine":  # the example as protocol requests (INSTALL-26)
        from scopecheck.run.export_machine import write_machine_bundle

        return _write(target, lambda work: write_machine_bundle(record, work, found_by))
    try:
        failure = CrashFailure.from_json(record)
        story = story_of(failure)
    except (BadReproducer, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a crash reproducer: {exc}") from None
    command, cwd = _backend_command(failure)
    if failure.run in ("fault", "kill"):
        rerun = _rerun(failure, record)
        if rerun.problem is None:
            raise NotReproduced("\n".join([*rerun.story, rerun.why]))
        problem = rerun.problem
        return _write(target, lambda work: _fill_fault(
            work, failure, rerun, problem, command, cwd, found_by))  # fmt: skip
    if story is None:
        raise UsageError(
            "invalid_payload",
            f"this reproducer reruns {failure.what}; a bundle holds a crash image rebuilt "
            "from recorded operations, or the image a fault or kill run left",
        )
    crash = story
    return _write(target, lambda work: _fill_crash(work, failure, crash, command, cwd, found_by))


def _write(target: Path, fill: Callable[[Path], tuple[int, str]]) -> Exported:
    """Fill a new folder beside ``target`` and rename it into place: a failed export leaves
    nothing behind."""
    parent = target.resolve().parent
    if not parent.is_dir():
        raise UsageError("not_found", f"no folder {parent} to export into")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=parent))
    work.chmod(0o755)  # a folder to hand on, as any other the user makes
    try:
        status, output = fill(work)
        with contextlib.suppress(OSError):
            (work / "stderr.txt").unlink()
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Exported(target, _size(target), status, output)


def _script(work: Path, bundle: Mapping[str, Any]) -> None:
    (work / "bundle.json").write_bytes(orjson.dumps(bundle, option=orjson.OPT_INDENT_2))
    script = work / "reproduce.py"
    shutil.copyfile(reproduce_bundle.__file__, script)
    script.chmod(0o755)


def _fill_crash(
    work: Path, failure: CrashFailure, story: Story, command: list[str], cwd: str, found_by: str
) -> tuple[int, str]:
    if story.recovered is not None:
        write_image(story.after, str(work / "image-before-recovery"))
    write_image(story.last, str(work / "image"))
    (work / "trace.txt").write_text(trace_text(story))
    expected = _expected(failure, story)
    (work / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2))
    _script(work, {"format": FORMAT, "command": command, "cwd": cwd, "python": sys.executable,
                   "session": SESSION, "probe": True, "backend": failure.backend})  # fmt: skip
    status, output = _run(work)
    (work / "README.md").write_text(_readme(failure, story, found_by, status, output))
    return status, output


def _rerun(failure: CrashFailure, record: Mapping[str, Any]) -> FaultRerun:
    """Run a fault or kill reproducer again, as its source does (CRASH-COV-5)."""
    if failure.source == "syscall":
        from scopecheck.process.syscall_crash import rerun_fault_record

        return rerun_fault_record(record)
    from scopecheck.backends.factory import load_factory, takes_filesystem
    from scopecheck.crashsim.generic_sweep import rerun_fault_record as rerun_fs

    _, factory = load_factory(str(failure.target["spec"]))
    if not callable(factory) or not takes_filesystem(factory):
        raise UsageError("invalid_payload", f"{failure.target['spec']} no longer takes fs and root")
    return rerun_fs(failure, factory)


def _fault_expected(failure: CrashFailure, problem: FaultProblem) -> dict[str, Any]:
    """The states the reopen that showed the failure was allowed to give: every
    acknowledged step, no failed commit (CRASH-FS-9), a failed create or delete done or not
    (CRASH-FS-11), in a killed run the step in flight done or not."""
    return {
        "rule": problem.rule,
        "problem": problem.problem,
        "session": SESSION,
        "after": f"the run with {_injected(failure)}"
        + (" and a power loss" if problem.power_loss else ""),
        "allowed": [None if s is None else snapshot_to_json(s) for s in problem.allowed],
        "narrow_by": None,
    }


def _injected(failure: CrashFailure) -> str:
    """The fault or kill a run was made with, in words."""
    mode = str(failure.target.get("mode", ""))
    if failure.source == "syscall" and mode.count(":") >= 2:
        return mode.split(":", 2)[2]
    what = failure.shown.get("op") if isinstance(failure.shown, Mapping) else None
    return (
        f"{failure.variant.removeprefix('fault:')} injected into {what or f'call {failure.point}'}"
    )


def _fault_trace(failure: CrashFailure, rerun: FaultRerun, problem: FaultProblem) -> str:
    """What the rerun did (its steps and answers, the call hit, the files it left), its
    operations in order and per file with the acknowledgements among them, and what the
    power loss lost against the disk the run left."""
    acks: dict[int, list[int]] = {}
    for step, at in enumerate(rerun.acked_at):
        if at is not None:
            acks.setdefault(at, []).append(step)

    def line(index: int) -> str:
        op = rerun.ops[index]
        step = f"step {op.step + 1}: " if op.step >= 0 else ""
        return f"  {index:5} {step}{op.describe()}"

    lines = [f"{failure.run} run: {_injected(failure)}", "", *rerun.story, ""]
    if rerun.ops:
        lines.append(f"the run's {len(rerun.ops)} operations on the files, in order:")
        for index in range(len(rerun.ops) + 1):
            for step in acks.get(index, []):
                lines.append(f"     -- step {step + 1} acknowledged")
            if index < len(rerun.ops):
                lines.append(line(index))
        lines += ["", "per file:"]
        by_file: dict[str, list[int]] = {}
        for index, op in enumerate(rerun.ops):
            for name in (op.path, op.target) if op.target else (op.path,):
                by_file.setdefault(name or ROOT_SHOWN, []).append(index)
        for name, indices in sorted(by_file.items()):
            lines += [f"  {name}:", *(f"  {line(i)}" for i in indices)]
        lines.append("")
    if problem.image is None:
        lines.append("the failure is in what the run's steps answered, not in a reopen")
    elif problem.power_loss:
        lines.append("the image is a power loss of the disk at that moment, under the "
                     "persistence model")  # fmt: skip
        if problem.cache is not None:
            lines += lost_lines(problem.cache, problem.image)
    else:
        lines.append("the image is the disk as the run left it (a process crash right then)")
    lines += ["", f"{problem.rule}: {problem.problem}",
              f"file-system profiles: fails {profiles_text(problem.profiles)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _fill_fault(
    work: Path,
    failure: CrashFailure,
    rerun: FaultRerun,
    problem: FaultProblem,
    command: list[str],
    cwd: str,
    found_by: str,
) -> tuple[int, str]:
    image = problem.image if problem.image is not None else rerun.disk
    if image is not None:
        write_image(image, str(work / "image"))
    else:
        (work / "image").mkdir()
    (work / "trace.txt").write_text(_fault_trace(failure, rerun, problem))
    expected = _fault_expected(failure, problem)
    (work / "expected.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2))
    bundle: dict[str, Any] = {
        "format": FORMAT, "command": command, "cwd": cwd, "python": sys.executable,
        "session": SESSION, "probe": False, "backend": failure.backend,
    }  # fmt: skip
    if problem.image is None:
        bundle["unjudged"] = (
            f"this failure ({problem.rule}) is in what the run's own steps answered with "
            f"{_injected(failure)}, not in a file the run left, so reopening image/ (the disk "
            f"the run left) cannot show it: rerun the run with `{found_by}`"
        )
    _script(work, bundle)
    status, output = _run(work)
    (work / "README.md").write_text(
        _fault_readme(failure, rerun, problem, command, found_by, status, output)
    )
    return status, output


def _fault_readme(
    failure: CrashFailure,
    rerun: FaultRerun,
    problem: FaultProblem,
    command: list[str],
    found_by: str,
    status: int,
    output: str,
) -> str:
    kill = failure.run == "kill"
    lines = [
        f"# {problem.rule}: {failure.what}",
        "",
        problem.problem,
        "",
        "## What happened",
        "",
        f"The workload ran once more against the backend, {'killed by' if kill else 'with'} "
        f"{_injected(failure)}, and failed again:",
        "",
        "```",
        *rerun.story,
        "```",
        "",
    ]
    if problem.image is None:
        lines += ["The failure is in what the run's own steps answered, not in a file it "
                  "left. `image/` is the disk the run left, to read; `reproduce.py` says "
                  "it cannot show this failure (exit 2); the command below reruns it."]  # fmt: skip
    elif problem.power_loss:
        lines += ["Then a power loss right after the run: `image/` is what the disk kept of "
                  "what the run left, as the persistence model allows (`trace.txt` says "
                  "what was lost). It fails under the profiles: "
                  f"{profiles_text(problem.profiles)}."]  # fmt: skip
    else:
        lines += ["`image/` is the disk as the run left it: what a process crash right "
                  "then leaves."]  # fmt: skip
    lines += [
        "",
        "## Files",
        "",
        "- `image/`: the files, byte for byte",
        "- `trace.txt`: the run's steps and answers, its operations per file with the "
        "acknowledgements, and what the power loss lost",
        "- `expected.json`: the states the model allows for that reopen (the process "
        "protocol's snapshot form); `actual.json`: what reopening gave when this bundle was made",
        "- `reproduce.py`, `bundle.json`: reopen a copy of `image/` with the backend",
        "",
        "## Reproduce",
        "",
        "```",
        "python reproduce.py            # exit 1 while the failure shows, 0 once it does not",
        "python reproduce.py --command 'CMD' --cwd DIR   # the same image, another build",
        "```",
        "",
        f"It needs only Python's standard library and the backend's own command "
        f"(`{_shown(command)}`; a Python backend runs under the Python that made the "
        "bundle, or the one `--python` gives). A fix in how the backend *reads* shows here; "
        "a fix in how it handles the fault shows in a new run of the command that found it.",
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
