"""One writer per trace file (CRASH-SYS-16): a backend process whose hello fails is stopped at
once, so it never writes under strace while the next process's strace writes the same file --
what cut lines in two and hung the regex reader (tests/data/traces/two-writers.txt) -- and a
workload reads the trace of such a process with the others, since its calls changed the disk."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scopecheck.crashsim.generic_sweep import workload
from scopecheck.crashsim.sandbox import StepClock
from scopecheck.crashsim.strace import Unreadable, read_trace, unavailable
from scopecheck.models.errors import ScopecheckError
from scopecheck.process.client import BackendProcess
from scopecheck.process.syscall_crash import run_workload

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [
    sys.executable, "-m", "scopecheck", "serve",
    f"{ROOT}/tests/data/failing_hello_backend.py:make_backend",
]  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_backend_process_whose_hello_fails_is_stopped_before_the_error_is_raised(
    tmp_path: Path,
) -> None:
    (tmp_path / "poison").touch()
    with pytest.raises(ScopecheckError, match="cannot open the store"):
        BackendProcess(COMMAND, str(tmp_path), StepClock())
    (pid,) = map(int, (tmp_path / "pids").read_text().split())
    assert not _alive(pid)


@pytest.mark.rule("CRASH-SYS-16")
def test_each_backend_process_of_a_workload_writes_a_trace_of_its_own(tmp_path: Path) -> None:
    """The first process's hello fails and the next starts at once: every trace file holds one
    process's lines, whole, and the failed process's file write is among the operations."""
    why = unavailable()
    assert why is None, f"this test needs strace with ptrace permitted ({why})"
    root, traces = tmp_path / "root", tmp_path / "traces"
    root.mkdir()
    traces.mkdir()
    (root / "poison").touch()
    run = run_workload(COMMAND, workload(0, 3), str(root), str(tmp_path), str(traces))
    assert run.outcomes[0] == "io_error"
    pids = [int(pid) for pid in (root / "pids").read_text().split()]
    files = sorted(traces.iterdir())
    assert len(files) == len(pids) >= 2
    for trace, pid in zip(sorted(files, key=lambda f: int(f.stem.split("-")[1])), pids,
                          strict=True):  # fmt: skip
        records = read_trace(str(trace))
        seen = {r.pid for r in records}
        assert pid in seen and not seen & (set(pids) - {pid}), trace
        assert not any(isinstance(r, Unreadable) for r in records), trace
        assert b"\0" not in trace.read_bytes()
    written = [op for op in run.ops if op.path == "scratch" and op.kind == "write"]
    assert sum(len(op.data) for op in written) == 20000
