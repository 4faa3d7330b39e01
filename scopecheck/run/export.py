"""A standalone bundle of one failure (``scopecheck replay FILE --export DIR``), and the crash
image bundle.

The people who fix a crash-recovery bug need the files as the crash left them, one command
that shows the failure with their own code and nothing else, and the story of the calls that
led there.  A bundle holds exactly that, and nothing in it needs scopecheck to run
(INSTALL-24).  :func:`export` makes the bundle of any reproducer: a crash or a crash during
recovery here, a fault or kill run in :mod:`.export_fault`, a machine failure in
:mod:`.export_machine`; the folder, the script and its one run are :mod:`.bundle`'s.

A crash bundle holds:

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
  the failure shows, 0 once it does not;
* ``README.md``: the story in words, the profiles, and the command that found it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scopecheck.crashsim.failure import BadReproducer, CrashFailure
from scopecheck.crashsim.jsonl_sweep import model_states
from scopecheck.crashsim.jsonl_workloads import workload_from_json
from scopecheck.crashsim.story import Story, lost_lines, story_of, trace_text
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

__all__ = ["Exported", "NotReproduced", "export"]


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
    ]
    reproduce = image_reproduce(backend_command(failure)[0])
    return "\n".join([*lines, *closing_sections(reproduce, status, output, found_by)])


def export(record: Mapping[str, Any], destination: str, found_by: str) -> Exported:
    """Write the bundle of the reproducer ``record`` to ``destination`` (which must not
    exist), run its ``reproduce.py`` once, and say what it found.

    A crash or recovery failure's image is rebuilt from its recorded operations; a fault or
    kill run is rerun until it fails again (:class:`NotReproduced` if it does not) for the
    image whose reopen showed the failure (:mod:`.export_fault`); a machine failure is
    bundled as the protocol requests its example made (:mod:`.export_machine`).  A workload
    record, or what cannot be bundled, is refused with the reason; nothing is written then."""
    target = Path(destination)
    if target.exists() or target.is_symlink():
        raise UsageError("already_exists", f"{destination} exists: export into a new folder")
    if record.get("kind") == "machine":  # the example as protocol requests (INSTALL-26)
        from scopecheck.run.export_machine import export_machine

        return export_machine(record, target, found_by)
    try:
        failure = CrashFailure.from_json(record)
        story = story_of(failure)
    except (BadReproducer, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a crash reproducer: {exc}") from None
    if failure.run in ("fault", "kill"):
        from scopecheck.run.export_fault import export_fault

        return export_fault(failure, record, target, found_by)
    if story is None:
        raise UsageError(
            "invalid_payload",
            f"this reproducer reruns {failure.what}; a bundle holds a crash image rebuilt "
            "from recorded operations, the image a fault or kill run left, or a machine "
            "failure's requests",
        )
    crash = story
    command, cwd = backend_command(failure)
    return write_folder(
        target, lambda work: _fill_crash(work, failure, crash, command, cwd, found_by)
    )


def _fill_crash(
    work: Path, failure: CrashFailure, story: Story, command: list[str], cwd: str, found_by: str
) -> tuple[int, str]:
    if story.recovered is not None:
        write_image(story.after, str(work / "image-before-recovery"))
    write_image(story.last, str(work / "image"))
    (work / "trace.txt").write_text(trace_text(story))
    write_json(work / "expected.json", _expected(failure, story))
    add_script(work, reproduce_bundle.__file__, {
        "command": command, "cwd": cwd, "python": sys.executable, "session": SESSION,
        "probe": True, "backend": failure.backend,
    })  # fmt: skip
    status, output = run_script(work, "--write-actual", str(work / "actual.json"))
    (work / "README.md").write_text(_readme(failure, story, found_by, status, output))
    return status, output
