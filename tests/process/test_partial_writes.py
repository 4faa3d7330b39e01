"""Partial writes reach every runtime (CRASH-SYS-18): a Node or Go backend whose append stores
part of its line -- a short write, the rest failing with ENOSPC, the FUSE mount's partial fault
-- and which then appends its next line after those bytes fails; one that cuts them back
passes.  The bug is planted from outside, by the examples' ``--no-cut-back`` flag (a failed
append is left in the file and the handle stays usable).

libuv retries a short write inside ``fs.writeSync``, ``FileHandle.write`` and a write stream's
write, and when that retry fails returns the short count and drops the error, so the fault
must also fail the application's own retry of the rest for a Node backend to see it; Go's
``(*os.File).Write`` retries once and returns the error with the count.

The default run checks the writeSync backend on the cheapest run that shows it: one recorded
workload and one fault run, the first commit's line cut short with the second commit on the
same handle.  The long run validates every Node API and the Go example, the bug and the fix,
end to end as a user would (`scopecheck validate --exec`), the planner choosing the faults.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from scopecheck.crashsim.explore import Findings
from scopecheck.crashsim.fuse_faults import unavailable as fuse_unavailable
from scopecheck.crashsim.strace import unavailable as strace_unavailable
from scopecheck.process.syscall_crash import FUSE, SyscallSource, fault_run
from tests.process.test_runtimes import validate_exec

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
SYNC = ["node", str(ROOT / "examples" / "node" / "backend.js")]
PROMISES = ["node", str(ROOT / "examples" / "node" / "backend-promises.js")]
#: The first write to the Session's log -- the first commit's line -- stores 20 bytes and the
#: rest fails with ENOSPC; seed 0's workload commits again on the same handle right after.
FIRST_LINE_CUT_SHORT = f"{FUSE}write:ENOSPC:1:20:/s.log"
#: A fault run's failure names its plan: a partial write's has a byte count, not ``-``.
PARTIAL_PLAN = re.compile(r"fuse=write:ENOSPC:\d+:\d+:/s\.log")
#: Machine examples of each long `validate` (fixed work; its crash exploration runs the
#: planner's fault runs, partial writes among them, on one workload).
EXAMPLES = 5


@pytest.fixture(autouse=True)
def _tools_are_here() -> None:
    assert NODE is not None, "the Node.js examples need node on PATH"
    why = strace_unavailable() or fuse_unavailable()
    assert why is None, f"these tests need strace and FUSE ({why}); .ci/run installs both"


def _partial_fault_run(command: list[str], base: Path) -> tuple[str, tuple[str, ...] | None]:
    """Record seed 0's workload of ``command`` under strace and rerun it once with
    :data:`FIRST_LINE_CUT_SHORT` on the FUSE mount: what became of the run and the rule it
    broke with why (``None``: it passed)."""
    source = SyscallSource("node", tuple(command), str(ROOT), base=str(base))
    with source.round(0, Findings()) as rnd:
        assert rnd is not None
        rec = rnd.recording
        k = next(i for i, op in enumerate(rec.ops) if op.kind == "write" and op.path == "s.log")
        steps = [step.op for step in rec.workload.steps]
        assert steps[1:3] == ["commit", "commit"], steps  # the next commit, on the same handle
        done = fault_run(
            source.command, source.cwd, rec, source.base, rnd.checker, 0,
            FIRST_LINE_CUT_SHORT, k,
        )  # fmt: skip
    problem = done.problem
    return done.outcome, None if problem is None else (problem.rule, problem.problem)


@pytest.mark.rule("CRASH-SYS-18", "CRASH-FS-9")
@pytest.mark.parametrize(
    ("flags", "rule"),
    [([], None), (["--no-cut-back"], "CRASH-FS-9")],
    ids=["cut-back", "append-after"],
)
def test_a_partial_write_reaches_a_node_backend_through_write_sync(
    flags: list[str], rule: str | None, tmp_path: Path
) -> None:
    """The fault fired and the run was judged (never dropped): the backend that leaves the
    stored bytes and appends after them leaves a log that does not reopen (CRASH-FS-9); the
    one that cuts them back loses nothing."""
    outcome, problem = _partial_fault_run([*SYNC, *flags], tmp_path)
    assert outcome == "fault"
    if rule is None:
        assert problem is None, problem
    else:
        assert problem is not None, "a Node backend appending after a partial write passed"
        assert problem[0] == rule and FIRST_LINE_CUT_SHORT in problem[1], problem


def _command(name: str, request: pytest.FixtureRequest) -> tuple[str, bool]:
    """The backend's command line and whether it is the planted bug."""
    runtime, _, variant = name.partition(":")
    bug = ["--no-cut-back"] if variant.endswith("append-after") else []
    if runtime == "go":
        binary = request.getfixturevalue("go_backend")
        return shlex.join([str(binary), *bug]), bool(bug)
    base = {"writeSync": SYNC, "FileHandle.write": PROMISES, "stream": [*PROMISES, "--stream"]}
    return shlex.join([*base[runtime], *bug]), bool(bug)


def _crash_failures(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in verdict["failures"] if f.get("phase") == "crash exploration"]


@pytest.mark.long
@pytest.mark.rule("CRASH-SYS-18", "CRASH-SYS-6", "CRASH-FS-9")
@pytest.mark.parametrize(
    "name",
    [f"{api}:{variant}" for api in ("writeSync", "FileHandle.write", "stream", "go")
     for variant in ("cut-back", "append-after")],
)  # fmt: skip
def test_validate_fails_every_runtime_that_appends_after_a_partial_write(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`validate --exec` with the planner's own faults: every phase of a backend that cuts a
    partial write back passes; one that appends after it fails crash exploration on a partial
    write (CRASH-FS-9 or CRASH-FS-2), and nowhere else."""
    command, bug = _command(name, request)
    verdict = validate_exec(command, tmp_path, EXAMPLES)
    crash = verdict["phases"]["crash exploration"]
    assert crash["status"] == ("failed" if bug else "ran"), crash
    assert crash["crash_fault_runs"] > 0, crash
    found = _crash_failures(verdict)
    others = [f for f in verdict["failures"] if f not in found]
    assert others == [], [(f["phase"], f["rule"], f["error"]) for f in others]
    if not bug:
        assert found == [], [(f["rule"], f["error"]) for f in found]
        assert verdict["passed"] and verdict["exit_status"] == 0
        return
    assert not verdict["passed"] and verdict["exit_status"] == 1
    partial = [f for f in found if PARTIAL_PLAN.search(f["error"])]
    assert partial, [(f["rule"], f["error"]) for f in found]
    assert {f["rule"] for f in partial} <= {"CRASH-FS-9", "CRASH-FS-2"}, partial
