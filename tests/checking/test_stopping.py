"""A run that cannot finish still ends, on time, with the truth: the watchdog (INSTALL-20), our
own errors as internal errors (INSTALL-19), signals and the supervisor (INSTALL-21), and one
failure for one protocol fault (PROC-10).

Every backend here is real and broken from outside: the good dict example wrapped so its commit
never returns, a process backend whose later ``hello`` never comes back; our own components are
slowed or broken by wrapping them in the test process (the trace reader, the persistence
model), never through a hook that exists for the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.run.internal import EXIT_INTERNAL
from scopecheck.run.stopping import descendants, mounts_under
from scopecheck.run.validate import PHASES, Failure, one_protocol_failure, validate
from scopecheck.run.watchdog import Overrun, doing, limit

ROOT = Path(__file__).resolve().parents[2]

#: The dict example, whose commit never returns (an in-process backend that hangs); its
#: create neither, so the machine's first example meets the hang whatever steps it draws.
HANGS_IN_COMMIT = """
import time
from scopecheck.examples.good_backend import DictRepository, DictStorage

class Hanging(DictStorage):
    def commit(self, writes):
        time.sleep(3600)

class Repository(DictRepository):
    storage_class = Hanging

    def create(self, session_id):
        time.sleep(3600)

def make_backend(clock):
    return Repository(clock)
"""

#: A process backend that answers the probe's ``hello`` -- the first one any of its processes
#: is sent, noted in the marker file its command names -- and then never another one.
HANGS_IN_HELLO = """
import json, os, sys, time
marker = sys.argv[1]
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "hello":
        if os.path.exists(marker):
            time.sleep(3600)
        open(marker, "w").close()
        answer = {"protocol": 1, "name": "hangs-in-hello", "fork": False}
    else:
        answer = None
    print(json.dumps({"id": request["id"], "ok": answer}), flush=True)
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.rule("INSTALL-20")
def test_limit_stops_a_block_and_says_what_it_was_doing() -> None:
    started = time.monotonic()
    with pytest.raises(Overrun) as stopped, limit(0.3, "the phase"), doing("waiting for Godot"):
        time.sleep(30)
    assert time.monotonic() - started < 10
    assert str(stopped.value) == "the phase did not finish within 0s while waiting for Godot"
    # An inner limit never outlives the outer one, and the outer one is armed again after it.
    with pytest.raises(Overrun) as outer, limit(0.5, "outer"):
        with limit(30, "inner"):
            pass
        time.sleep(30)
    assert outer.value.what == "outer"


@pytest.mark.rule("INSTALL-20", "INSTALL-22")
def test_a_backend_that_hangs_in_its_commit_leaves_its_phases_incomplete(tmp_path: Path) -> None:
    """The conformance cases and the machine each end at their limit, incomplete, saying
    what did not finish; nothing is blamed on the backend."""
    spec = f"{_write(tmp_path, 'hanging.py', HANGS_IN_COMMIT)}:make_backend"
    started = time.monotonic()
    verdict = validate(spec, budget=4, failures_dir=tmp_path / "f", phase_timeout=3)
    took = time.monotonic() - started
    conformance, machine = verdict.phases["conformance"], verdict.phases["machine"]
    assert conformance.status == "incomplete", conformance
    assert "conformance did not finish within 3s (running " in conformance.detail
    assert machine.status == "incomplete", machine
    assert "machine did not finish within" in machine.detail
    assert not verdict.failures and not verdict.internal_errors
    assert verdict.outcome == "incomplete" and verdict.exit_code == 1
    assert took < 60, took  # a hang, bounded: the limits are 3 s and the budget 4 s + 5 s


@pytest.mark.rule("INSTALL-20")
def test_a_process_backend_that_hangs_in_a_later_hello_leaves_its_phases_incomplete(
    tmp_path: Path,
) -> None:
    script = _write(tmp_path, "backend.py", HANGS_IN_HELLO)
    verdict = validate(
        f"exec:{sys.executable} {script} {tmp_path / 'said-hello'}",
        budget=4,
        failures_dir=tmp_path / "f",
        phase_timeout=3,
    )
    statuses = {name: verdict.phases[name].status for name in PHASES}
    assert statuses["conformance"] == "incomplete", verdict.phases["conformance"]
    assert statuses["machine"] == "incomplete", verdict.phases["machine"]
    assert "waiting for the backend's answer to hello" in verdict.phases["machine"].detail
    assert statuses["crash exploration"] == "incomplete", verdict.phases["crash exploration"]
    assert not verdict.internal_errors and not verdict.failures


@pytest.mark.rule("INSTALL-20")
def test_a_slow_trace_reader_leaves_crash_exploration_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own analysis hanging: the strace reader slowed on purpose.  The crash phase ends
    at its limit and the machine after it still runs."""
    from scopecheck.crashsim.strace import unavailable

    if unavailable() is not None:
        pytest.skip(str(unavailable()))
    import scopecheck.process.syscall_crash as syscall_crash

    real = syscall_crash.read_trace

    def slow(path: str) -> Any:
        with doing(f"reading the trace {os.path.basename(path)}"):
            time.sleep(3600)
        return real(path)

    monkeypatch.setattr(syscall_crash, "read_trace", slow)
    spec = f"{ROOT / 'examples' / 'sqlite3_backend.py'}:make_backend"  # root: under strace
    verdict = validate(spec, budget=4, failures_dir=tmp_path / "f")
    crash = verdict.phases["crash exploration"]
    assert crash.status == "incomplete", crash
    assert "crash exploration did not finish within" in crash.detail
    assert "s while reading the trace trace-0.txt" in crash.detail
    assert verdict.phases["machine"].status == "ran", verdict.phases["machine"]
    assert verdict.phases["conformance"].status == "ran"


@pytest.mark.rule("INSTALL-19")
def test_our_own_exception_is_an_internal_error_never_the_backends_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The persistence model raising where it should not (as its ``PathError`` once did): the
    crash phase is incomplete with an internal error, the other phases run, exit code 4."""
    import scopecheck.crashsim.persistence as persistence

    def broken(self: Any, op: Any) -> None:
        raise persistence.PathError(f"open of a missing {op.path}")

    monkeypatch.setattr(persistence.Volume, "apply", broken)
    spec = f"{ROOT / 'examples' / 'good_file_backend.py'}:make_backend"
    verdict = validate(spec, budget=4, failures_dir=tmp_path / "f", examples=1)
    crash = verdict.phases["crash exploration"]
    assert crash.status == "incomplete", crash
    assert "scopecheck's own error (PathError: open of a missing" in crash.detail
    [error] = verdict.internal_errors
    assert error.phase == "crash exploration" and error.error.startswith("PathError: ")
    assert error.where.startswith("scopecheck/") and "test_stopping.py" in error.where
    assert error.rerun.startswith(f"scopecheck validate {spec} --seed 0 --examples 1")
    assert "Traceback" in Path(error.traceback_file).read_text(encoding="utf-8")
    assert not verdict.failures  # never the backend's
    assert verdict.phases["machine"].status == "ran"
    assert verdict.exit_code == EXIT_INTERNAL
    data = verdict.as_json()
    assert data["internal_errors"][0]["error"] == error.error and data["exit_code"] == 4


@pytest.mark.rule("PROC-10")
def test_one_protocol_fault_is_one_failure_under_proc_2() -> None:
    def failure(phase: str, rule: str | None, error: str) -> Failure:
        return Failure(
            phase=phase, rule=rule, error=error, reproducer="r", rules=(rule,) * bool(rule)
        )

    said = "reopening raised ProtocolError: unexpected field(s) ['timestamp']"
    failures = [
        failure("machine", "PROC-2", "ProtocolError: unexpected field(s) ['timestamp']"),
        failure("crash exploration", "CRASH-FS-1", said),
        failure("crash exploration", "CRASH-FS-11", said),
        failure("conformance", "PROC-2", "ProtocolError: the same"),
        failure("crash exploration", "CRASH-FS-6", "a power loss lost step 2"),
    ]
    kept = one_protocol_failure(failures)
    assert [(f.phase, f.rule) for f in kept] == [
        ("machine", "PROC-2"),
        ("crash exploration", "CRASH-FS-6"),
    ]
    assert "also showed in: crash exploration (2x), conformance (1x)" in kept[0].message
    # A crash rule's failure that is a protocol error alone becomes PROC-2.
    [only] = one_protocol_failure([failures[1]])
    assert only.rule == "PROC-2" and only.rules == ("PROC-2",)


# -- signals and the supervisor ------------------------------------------------------------------


def _scopecheck(*args: str, tmpdir: Path, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    env.pop("SCOPECHECK_VERDICT_SO_FAR", None)
    command = [str(Path(sys.executable).parent / "scopecheck"), *args]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_phase(tmpdir: Path, phase: str, timeout: float = 120) -> None:
    """Until the run's saved verdict so far shows ``phase`` running."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for saved in tmpdir.glob("scopecheck-run-*/verdict-so-far.json"):
            try:
                data = orjson.loads(saved.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            if data["phases"][phase]["status"] == "running":
                return
        time.sleep(0.1)
    raise AssertionError(f"{phase} never ran")


def _ours_left(tmpdir: Path, pid: int) -> list[str]:
    """What of the stopped run remains: files in its TMPDIR, mounts there, processes."""
    left = [f"file {name}" for name in os.listdir(tmpdir)]
    left += [f"mount {point}" for point in mounts_under(str(tmpdir))]
    left += [f"process {child}" for child in descendants(pid)]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                line = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:
                continue
            if str(tmpdir).encode() in line:
                left.append(f"process {entry.name}: {line[:120]!r}")
    return left


@pytest.mark.rule("INSTALL-21")
@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.long)],
    ids=lambda s: s.name,
)
def test_a_signal_prints_the_verdict_so_far_and_leaves_nothing(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """``validate`` of a root-taking backend stopped in crash exploration -- strace and the
    FUSE mounts at work -- prints the verdict so far and exits 128 + the signal within a few
    seconds; its TMPDIR is empty, nothing is mounted, no process of it is left."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    spec = f"{ROOT / 'examples' / 'good_file_backend.py'}:make_backend"
    run = _scopecheck("validate", spec, "--budget", "60", "--failures-dir", str(tmp_path / "f"),
                      "--json", tmpdir=tmpdir, cwd=tmp_path)  # fmt: skip
    try:
        _wait_for_phase(tmpdir, "crash exploration")
        time.sleep(1)
        stopped_at = time.monotonic()
        run.send_signal(sig)
        out, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert time.monotonic() - stopped_at < 25
    assert run.returncode == 128 + sig, (run.returncode, err[-2000:])
    verdict = orjson.loads(out)
    assert verdict["stopped"] == sig.name and verdict["exit_code"] == 128 + sig
    crash = verdict["phases"]["crash exploration"]
    # Stopped by the run itself, or -- on a loaded machine, past the grace -- killed by its
    # supervisor, which prints the verdict the run saved last: either way it says why.
    assert crash["status"] == "incomplete" and sig.name in crash["detail"], crash
    assert verdict["phases"]["conformance"]["status"] == "ran"
    assert verdict["phases"]["machine"]["status"] == "skipped"
    assert _ours_left(tmpdir, run.pid) == []


@pytest.mark.rule("INSTALL-21")
@pytest.mark.parametrize(
    "args",
    [
        ("fuzz", "--backend", "jsonl", "--budget", "60", "--seed", "1"),
        pytest.param(("crash", "--seed", "1"), marks=pytest.mark.long),
        pytest.param(
            ("hypofuzz", f"{ROOT / 'examples' / 'good_backend.py'}:make_backend"),
            marks=pytest.mark.long,
        ),
    ],
    ids=lambda a: a[0],
)
def test_fuzz_crash_and_hypofuzz_stopped_by_sigterm_leave_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # A short TMPDIR: HypoFuzz's workers bind unix sockets there (108 bytes at most).
    tmpdir = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    more = () if args[0] == "hypofuzz" else ("--failures-dir", str(tmp_path / "f"))
    run = _scopecheck(*args, *more, tmpdir=tmpdir, cwd=tmp_path)
    try:
        time.sleep(4 if args[0] != "hypofuzz" else 12)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=30)
        assert run.returncode == 143, (run.returncode, err[-2000:])
        assert "stopped by SIGTERM" in out + err
        assert _ours_left(tmpdir, run.pid) == []
    finally:
        run.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.mark.rule("INSTALL-20")
def test_the_plugin_stops_a_hanging_test_and_calls_its_phase_incomplete(tmp_path: Path) -> None:
    spec = f"{_write(tmp_path, 'hanging.py', HANGS_IN_COMMIT)}:make_backend"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "scopecheck.pytest_plugin", "-p", "no:cacheprovider",
         "-o", "addopts=", f"--scopecheck-backend={spec}", "--scopecheck-phase-timeout", "2",
         "--pyargs", "scopecheck.conformance.test_machine",
         "scopecheck.conformance.test_storage_cases", "-k", "machine or retire_then_reopen"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "scopecheck: incomplete: " in out and "did not finish within 2s" in out, out[-3000:]
    verdict = out.split("scopecheck verdict:", 1)[1]
    assert "INCOMPLETE" in verdict.splitlines()[1], verdict
    assert any(line.strip().startswith("machine:") and "INCOMPLETE" in line
               for line in verdict.splitlines()), verdict  # fmt: skip


@pytest.mark.rule("INSTALL-20", "INSTALL-22")
def test_what_crash_exploration_found_before_it_hung_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search hangs right after its first failure (our analysis slowed on purpose): the
    phase is incomplete, and the failure it had found is in the verdict with its reproducer."""
    from scopecheck.crashsim.explore import Findings

    real = Findings.add

    def add_then_hang(self: Findings, failure: Any) -> bool:
        kept = real(self, failure)
        if kept:
            with doing("judging what came after the first failure"):
                time.sleep(3600)
        return kept

    monkeypatch.setattr(Findings, "add", add_then_hang)
    spec = f"{ROOT / 'examples' / 'broken_file_backend.py'}:make_backend"
    verdict = validate(spec, budget=4, failures_dir=tmp_path / "f")
    crash = verdict.phases["crash exploration"]
    assert crash.status == "incomplete", crash
    assert "while judging what came after the first failure" in crash.detail
    found = [f for f in verdict.failures if f.phase == "crash exploration"]
    assert found and found[0].rule and found[0].rule.startswith("CRASH"), verdict.failures
    assert Path(found[0].reproducer.removeprefix("scopecheck replay ")).exists()


@pytest.mark.rule("INSTALL-21")
def test_a_signal_that_lands_where_python_cannot_raise_still_stops_the_run() -> None:
    """SIGTERM arriving in a ``__del__`` (as in a garbage-collection callback) is printed as
    ignored there; it is given back and stops the run at the next place that can raise."""
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        from scopecheck.run.stopping import Signalled, signals_stop_the_run

        class Slow:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs in here: its exception cannot leave

        try:
            with signals_stop_the_run():
                Slow()
                time.sleep(30)
        except Signalled as stopped:
            print("stopped by", stopped.signal)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "stopped by SIGTERM", (done.stdout, done.stderr)
