"""The standalone bundle of a fault or kill run (``scopecheck replay FILE --export DIR``,
INSTALL-24).

A fault or kill reproducer names an injection, not an image: the image is whatever the run
leaves, and a run with a fault or a kill is not deterministic (a thread, a timing).  So the
export reruns it as its replay does, until it fails again (:class:`~.bundle.NotReproduced`
when no rerun does: nothing is written), and bundles what that rerun showed:

* ``image/``: the image whose reopen showed the failure -- the disk the run left (what a
  process crash right then leaves), or a power loss of it under the persistence model;
* ``expected.json``: the states the model allows for that reopen (every acknowledged step, no
  failed commit, CRASH-FS-9; a failed create or delete done or not, CRASH-FS-11; in a killed
  run the step in flight done or not);
* ``trace.txt``: the run's steps and what each answered, the call the fault or kill hit, the
  run's operations in order and per file with the acknowledgements among them
  (:func:`~scopecheck.crashsim.story.op_lines`), and what the power loss lost;
* ``reproduce.py``: the crash bundle's script (:mod:`.reproduce_bundle`), which reopens a copy
  of ``image/`` and commits nothing after it.

A failure in what the run's own steps answered (an uncoded error, a commit acknowledged on a
handle after ``outcome_unknown``) shows in no reopen: its bundle holds the disk the run left,
to read, and its ``reproduce.py`` says it cannot judge it (exit 2); the export still says the
failure happened again.  A fault that never fired (CRASH-FS-7) has no image and is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scopecheck.crashsim.failure import CrashFailure, profiles_text
from scopecheck.crashsim.fault_check import FaultProblem, FaultRerun
from scopecheck.crashsim.generic_faults import UNFIRED_RULE
from scopecheck.crashsim.jsonl_workloads import workload_from_json
from scopecheck.crashsim.persistence import Image
from scopecheck.crashsim.story import Ack, Story, lost_lines, op_lines
from scopecheck.models.errors import UsageError
from scopecheck.models.wire import snapshot_to_json
from scopecheck.process.syscall_crash import SESSION, write_image
from scopecheck.run import reproduce_bundle
from scopecheck.run.bundle import (
    Exported,
    NotReproduced,
    add_script,
    backend_command,
    closing_sections,
    image_reproduce,
    run_script,
    write_folder,
    write_json,
)

#: A story's crash point when nothing crashed (a fault or kill run's operations).
NO_CRASH = -1


def export_fault(
    failure: CrashFailure, record: Mapping[str, Any], target: Path, found_by: str
) -> Exported:
    """Rerun the fault or kill reproducer ``record`` until it fails again and bundle what it
    showed in ``target`` (see the module docstring)."""
    command, cwd = backend_command(failure)
    rerun = _rerun(failure, record)
    problem = rerun.problem
    if problem is None:
        raise NotReproduced("\n".join([*rerun.story, rerun.why]))
    if problem.rule == UNFIRED_RULE:
        raise UsageError(
            "invalid_payload",
            f"the fault never fired when the run was rerun ({problem.problem}): there is no "
            "faulted run to bundle",
        )
    return write_folder(
        target,
        lambda work: _fill(work, failure, rerun, problem, command, cwd, found_by),
        failed_again=True,
    )


def _rerun(failure: CrashFailure, record: Mapping[str, Any]) -> FaultRerun:
    """Run a fault or kill reproducer again, as its source does (CRASH-COV-5)."""
    if failure.source == "syscall":
        from scopecheck.process.syscall_crash import rerun_fault_record

        return rerun_fault_record(record)
    from scopecheck.crashsim.generic_sweep import rerun_fault_record as rerun_fs
    from scopecheck.run.replay import fs_factory

    return rerun_fs(failure, fs_factory(record))


def injected(failure: CrashFailure) -> str:
    """The fault or kill a run was made with, in words."""
    mode = str(failure.target.get("mode", ""))
    if failure.source == "syscall" and mode.count(":") >= 2:
        return mode.split(":", 2)[2]
    what = failure.shown.get("op") or f"call {failure.point}"
    return f"{failure.variant.removeprefix('fault:')} injected into {what}"


def _story(failure: CrashFailure, rerun: FaultRerun, problem: FaultProblem) -> Story:
    """The run as a story with no crash in it: its operations and acknowledgements, the page
    cache when the failing image was taken (``before``) and that image (``after``)."""
    disk = rerun.disk or Image({})
    image = problem.image or disk
    try:
        steps = tuple(step.op for step in workload_from_json(failure.workload).steps)
    except (KeyError, TypeError, ValueError):
        steps = ()
    acks = tuple(Ack(at, step, steps[step] if step < len(steps) else f"step {step + 1}")
                 for step, at in enumerate(rerun.acked_at) if at is not None)  # fmt: skip
    before = problem.cache if problem.power_loss and problem.cache is not None else disk
    return Story(rerun.ops, acks, NO_CRASH, "", "posix", problem.power_loss, before, image, steps)


def _expected(failure: CrashFailure, problem: FaultProblem) -> dict[str, Any]:
    return {
        "rule": problem.rule,
        "problem": problem.problem,
        "session": SESSION,
        "after": f"the run with {injected(failure)}"
        + (" and a power loss" if problem.power_loss else ""),
        "allowed": [None if s is None else snapshot_to_json(s) for s in problem.allowed],
        "narrow_by": None,
    }


def trace_text(failure: CrashFailure, rerun: FaultRerun, story: Story, judged: bool) -> str:
    """What the rerun did (its steps and answers, the call hit, the files it left), its
    operations in order and per file with the acknowledgements among them, and what the
    power loss lost against the page cache."""
    problem = rerun.problem
    assert problem is not None
    lines = [f"{failure.run} run: {injected(failure)}", "", *rerun.story, ""]
    if story.ops:
        lines.append(f"the run's {len(story.ops)} operations on the files, in order:")
        lines += op_lines(story.ops, range(len(story.ops) + 1), story)
        lines += ["", "per file:"]
        for name, indices in sorted(story.by_file().items()):
            lines += [f"  {name}:", *op_lines(story.ops, indices, story)]
        lines.append("")
    if not judged:
        lines.append("the failure is in what the run's steps answered, not in a reopen")
    elif story.power_loss:
        lines.append("the image is a power loss of the disk at that moment, under the "
                     "persistence model")  # fmt: skip
        lines += lost_lines(story.before, story.after)
    else:
        lines.append("the image is the disk as the run left it (a process crash right then)")
    lines += ["", f"{problem.rule}: {problem.problem}",
              f"file-system profiles: fails {profiles_text(problem.profiles)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _fill(
    work: Path,
    failure: CrashFailure,
    rerun: FaultRerun,
    problem: FaultProblem,
    command: list[str],
    cwd: str,
    found_by: str,
) -> tuple[int, str]:
    judged = problem.image is not None
    story = _story(failure, rerun, problem)
    write_image(story.after, str(work / "image"))
    (work / "trace.txt").write_text(trace_text(failure, rerun, story, judged))
    if judged:
        write_json(work / "expected.json", _expected(failure, problem))
    settings: dict[str, Any] = {
        "command": command, "cwd": cwd, "python": sys.executable, "session": SESSION,
        "probe": False, "backend": failure.backend,
    }  # fmt: skip
    if not judged:
        settings["unjudged"] = (
            f"this failure ({problem.rule}) is in what the run's own steps answered with "
            f"{injected(failure)}, not in a file the run left, so reopening image/ (the disk "
            f"the run left) cannot show it: rerun the run with `{found_by}`"
        )
    add_script(work, reproduce_bundle.__file__, settings)
    status, output = run_script(work, "--write-actual", str(work / "actual.json"))
    (work / "README.md").write_text(
        _readme(failure, rerun, problem, command, found_by, status, output)
    )
    return status, output


def _readme(
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
        f"{injected(failure)}, and failed again:",
        "",
        "```",
        *rerun.story,
        "```",
        "",
    ]
    files = ["- `image/`: the files, byte for byte"]
    if problem.image is None:
        lines += ["The failure is in what the run's own steps answered, not in a file it "
                  "left. `image/` is the disk the run left, to read; `reproduce.py` says "
                  "it cannot show this failure (exit 2); the command below reruns it."]  # fmt: skip
        files += ["- `trace.txt`: the run's steps and answers, its operations per file with "
                  "the acknowledgements",
                  "- `reproduce.py`, `bundle.json`: say why it needs a rerun"]  # fmt: skip
    else:
        if problem.power_loss:
            lines += ["Then a power loss right after the run: `image/` is what the disk kept "
                      "of what the run left, as the persistence model allows (`trace.txt` "
                      "says what was lost). It fails under the profiles: "
                      f"{profiles_text(problem.profiles)}."]  # fmt: skip
        else:
            lines += ["`image/` is the disk as the run left it: what a process crash right "
                      "then leaves."]  # fmt: skip
        files += ["- `trace.txt`: the run's steps and answers, its operations per file with "
                  "the acknowledgements, and what the power loss lost",
                  "- `expected.json`: the states the model allows for that reopen (the "
                  "process protocol's snapshot form); `actual.json`: what reopening gave "
                  "when this bundle was made",
                  "- `reproduce.py`, `bundle.json`: reopen a copy of `image/` with the "
                  "backend"]  # fmt: skip
    lines += ["", "## Files", "", *files, ""]
    reproduce = image_reproduce(command)
    return "\n".join([*lines, *closing_sections(reproduce, status, output, found_by)])
