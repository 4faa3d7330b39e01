"""Crash exploration of backend processes from their system calls, end to end under strace:
the two examples pass, the planted durability bugs are caught under their rules, reproducers
replay without strace, and what a trace cannot see is reported (CRASH-SYS-*)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from scopecheck.crashsim.explore import Findings
from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.persistence import power_image
from scopecheck.crashsim.points import ProcessCrash
from scopecheck.crashsim.strace import unavailable
from scopecheck.process.syscall_crash import SyscallSource, explore, replay

ROOT = Path(__file__).resolve().parents[2]
PYTHON_BACKEND = [
    sys.executable,
    "-m",
    "scopecheck",
    "serve",
    f"{ROOT}/examples/sqlite3_backend.py:make_backend",
]
NODE = shutil.which("node")
NODE_BACKEND = ["node", str(ROOT / "examples" / "node" / "backend.js")]


@pytest.fixture(autouse=True)
def _strace_is_here() -> None:
    why = unavailable()
    assert why is None, (
        f"these tests need strace with ptrace permitted ({why}); .ci/run installs it"
    )


def _node() -> None:
    assert NODE is not None, "the Node.js example needs node on PATH"


@pytest.mark.rule("CRASH-SYS-3", "CRASH-SYS-6", "CRASH-SYS-7")
def test_the_sqlite3_example_survives_every_crash_state_fault_and_kill() -> None:
    source = SyscallSource("sqlite3", tuple(PYTHON_BACKEND), str(ROOT))
    found = source.explore(12, seed=3)
    assert found.failures == [], found.failures[0].details()
    assert found.states > 200 and found.fault_runs > source.kill_runs > 0
    # what the time budget left unchecked is said (CRASH-COV-6); nothing else is a limit
    assert [t for t in found.findings.limits if not t.startswith("search:")] == []


@pytest.mark.rule("CRASH-SYS-3", "CRASH-SYS-6", "CRASH-SYS-7")
def test_the_node_example_survives_every_crash_state_fault_and_kill() -> None:
    _node()
    source = SyscallSource("node", tuple(NODE_BACKEND), str(ROOT))
    found = source.explore(12, seed=4)
    assert found.failures == [], found.failures[0].details()
    assert found.states > 50 and found.fault_runs > source.kill_runs > 0


@pytest.mark.rule("CRASH-SYS-3", "CRASH-FS-6", "CRASH-SYS-9")
@pytest.mark.parametrize(
    "flag", ["--no-fsync", pytest.param("--no-dir-fsync", marks=pytest.mark.long)]
)
def test_a_node_backend_that_skips_an_fsync_is_caught_and_replays_without_strace(
    flag: str, tmp_path: Path
) -> None:
    """A short budget: the first workload's states after every acknowledgement are owed past
    it (CRASH-COV-2), and the missing fsync loses the first acknowledged step there."""
    _node()
    found = explore("node", [*NODE_BACKEND, flag], str(ROOT), budget=5, seed=0, faults=False)
    assert found.failures, f"{flag} escaped {found.states} crash states"
    failure = found.failures[0]
    assert failure.rule == "CRASH-FS-6", failure.details()
    assert failure.source == "syscall" and failure.run == "crash" and failure.evidence
    record = failure.to_json()
    saved = tmp_path / "repro.json"
    saved.write_bytes(orjson.dumps(record))
    first = replay(orjson.loads(saved.read_bytes()))
    again = replay(CrashFailure.from_json(record).to_json())
    assert first[0] and first == again, first
    # Replay rebuilds the image from the recorded operations: strace is not needed.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("node",):
        (bare / tool).symlink_to(shutil.which(tool) or tool)
    result = subprocess.run(
        [sys.executable, "-m", "scopecheck", "replay", str(saved)],
        env={**os.environ, "PATH": str(bare)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "CRASH-FS-6" in result.stdout


@pytest.mark.rule("CRASH-SYS-8", "INSTALL-18")
def test_a_shared_writable_mapping_is_reported_as_a_limit() -> None:
    """The ``-shm`` file is a limit, named under ``<root>``: each round records its workload
    in a fresh directory, so a limit naming that directory would be said again by every
    round."""
    backend = [
        sys.executable,
        "-m",
        "scopecheck",
        "serve",
        f"{ROOT}/tests/data/syscall_backends.py:make_wal",
    ]
    found = explore("wal", backend, str(ROOT), budget=4, seed=0, faults=False)
    limits = found.findings.limits
    assert any(f.startswith("mmap: <root>/") and "-shm" in f for f in limits), limits
    assert not any("scopecheck-syscall-" in f for f in limits), limits


@pytest.mark.rule("CRASH-SYS-4")
def test_a_backend_writing_outside_its_root_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside.log"
    monkeypatch.setenv("SCOPECHECK_TEST_OUTSIDE", str(outside))
    backend = [
        sys.executable,
        "-m",
        "scopecheck",
        "serve",
        f"{ROOT}/tests/data/syscall_backends.py:make_outside",
    ]
    found = explore("outside", backend, str(ROOT), budget=4, seed=0, faults=False)
    limits = found.findings.limits
    assert any(f.startswith("outside:") and str(outside) in f for f in limits), limits


@pytest.mark.rule("CRASH-SYS-5")
def test_without_strace_crash_exploration_is_skipped_with_the_reason(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {**os.environ, "PATH": str(bare)}
    probe = "from scopecheck.crashsim.strace import unavailable; print(unavailable())"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert "strace is not installed" in out.stdout
    result = subprocess.run(
        [sys.executable, "-m", "scopecheck", "validate", f"{ROOT}/examples/sqlite3_backend.py:make_backend",  # noqa: E501
         "--budget", "2", "--json", "--failures-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    verdict = orjson.loads(result.stdout)
    phase = verdict["phases"]["crash exploration"]
    assert phase["status"] == "skipped" and "strace is not installed" in phase["detail"]
    assert verdict["crash_exploration"].startswith("skipped")


@pytest.mark.rule("CRASH-COV-4")
def test_a_failure_does_not_end_the_search_and_each_distinct_one_has_its_reproducer(
    tmp_path: Path,
) -> None:
    """The Node example without fsync fails many crash states; the exploration keeps one
    failure per rule and kind of crash point, still runs its fault and kill runs, and saves
    each under its own file name.  Eight seconds hold several distinct failures (five in
    three seconds on one core) and the first round's fault runs."""
    _node()
    from scopecheck.run.fuzz import save_reproducer

    source = SyscallSource("node", (*NODE_BACKEND, "--no-fsync"), str(ROOT))
    found = source.explore(8, seed=0)
    # One per rule and kind -- and another of the same only for profiles it adds: each
    # failure's profiles are those of its own crash point (CRASH-SYS-15).
    keys = [(f.key, f.profiles) for f in found.failures]
    assert len({key for key, _ in keys}) >= 2 and len(set(keys)) == len(keys), keys
    assert found.fault_runs + sum(source.dropped.values()) > 0
    saved = {save_reproducer(tmp_path, f.to_json()) for f in found.failures}
    assert len(saved) == len(found.failures)


@pytest.mark.rule("CRASH-COV-2")
def test_a_phase_cut_short_is_incomplete_not_passed() -> None:
    """With no budget and no overrun, nothing after an acknowledgement is checked: the
    coverage says so, and the verdict would be incomplete."""
    found = explore("sqlite3", PYTHON_BACKEND, str(ROOT), budget=0.01, seed=0, faults=False,
                    overrun=0)  # fmt: skip
    assert found.failures == []
    assert found.coverage.acked_total > 0 or found.states == 0
    assert not found.coverage.complete, found.coverage


@pytest.mark.rule("CRASH-COV-1", "CRASH-COV-2")
def test_the_sqlite3_example_covers_every_acknowledged_step_within_a_small_budget() -> None:
    found = explore("sqlite3", PYTHON_BACKEND, str(ROOT), budget=3, seed=1, faults=False)
    assert found.failures == [], found.failures[0].details()
    assert found.coverage.complete, found.coverage
    assert found.coverage.points_checked < found.coverage.points_total


def _fault_record(command: list[str], mode: str) -> dict[str, object]:
    """A fault reproducer for the seeded workload of ``command``, rerunning ``mode``."""
    from scopecheck.crashsim.generic_sweep import workload
    from scopecheck.process.syscall_crash import fault_kind

    source = SyscallSource("node", tuple(command), str(ROOT))
    failure = CrashFailure(
        source="syscall", rule="CRASH-FS-9", problem="planted", run="fault",
        kind=fault_kind(mode), seed=0, workload=workload(0, 4).to_json(), point=0,
        variant=mode.split(":", 2)[2], target=source.target(mode),
    )  # fmt: skip
    return failure.to_json()


@pytest.mark.rule("CRASH-COV-3", "CRASH-COV-5")
def test_a_fault_that_misses_its_call_is_dropped_and_its_replay_is_not_called_fixed(
    tmp_path: Path,
) -> None:
    """strace's ``when=1`` on ``write`` hits the backend's first write -- its answer to
    ``hello`` on the protocol pipe, not a file: the run is dropped, never judged, and a replay
    that cannot reproduce says so and exits 3 -- never "fixed"."""
    _node()
    record = _fault_record(NODE_BACKEND, "fault:0:write:error=EIO:when=1")
    still, text = replay(record)
    assert still is None, text
    assert "not reproduced in 5 tries" in text and "another call" in text
    assert "steps ran:" in text and "files the run left:" in text  # what the last run did
    assert "fixed" not in text.replace("neither confirmed nor fixed", "")
    saved = tmp_path / "fault.json"
    saved.write_bytes(orjson.dumps(record))
    result = subprocess.run([sys.executable, "-m", "scopecheck", "replay", str(saved)],
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Not reproduced" in result.stdout and "Fixed" not in result.stdout


@pytest.mark.rule("CRASH-COV-3", "CRASH-SYS-6")
def test_a_fault_on_the_mount_hits_exactly_the_call_it_names() -> None:
    """The FUSE mount fails the second fsync of the Session's log, whatever thread makes it:
    the good Node example answers it with a coded error and loses nothing, so a replay of
    that run finds nothing to report (and says it did not reproduce, not that it is fixed)."""
    _node()
    from scopecheck.crashsim.fuse_faults import unavailable as fuse_unavailable

    assert fuse_unavailable() is None, "the FUSE fault tests need /dev/fuse and libfuse 3"
    record = _fault_record(NODE_BACKEND, "fault:0:fuse=fsync:EIO:2:-:/s.log")
    still, text = replay(record)
    assert still is None and "not reproduced" in text and "another call" not in text, text


@pytest.mark.rule("CRASH-COV-4")
def test_fault_and_kill_failures_keep_their_call_and_fault_apart() -> None:
    """A fault failure's kind names the call and the fault (a partial write apart from a
    failed one), a kill's is ``kill``: what keeps two of one rule distinct."""
    from scopecheck.process.syscall_crash import fault_kind

    assert fault_kind("fault:0:fuse=write:ENOSPC:3:10:/s.log") == "fault:write:ENOSPC+partial"
    assert fault_kind("fault:0:fuse=write:ENOSPC:3:-:/s.log") == "fault:write:ENOSPC"
    assert fault_kind("fault:1:fsync:error=EIO:when=2") == "fault:fsync:EIO"
    assert fault_kind("kill:0:fsync:signal=SIGKILL:when=2") == "kill"


@pytest.mark.rule("CRASH-COV-5")
def test_a_reproducer_of_an_older_format_is_refused_with_what_to_do() -> None:
    from scopecheck.models.errors import UsageError
    from scopecheck.run.replay import replay_crash

    old = {"kind": "crash", "engine": "syscall", "version": 2, "backend": "node", "ops": []}
    with pytest.raises(UsageError) as raised:
        replay_crash(old)
    assert raised.value.code == "invalid_payload"
    assert "rerun the exploration" in str(raised.value)


@pytest.mark.rule("CRASH-COV-3")
def test_faults_through_strace_alone_say_no_write_was_left_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where FUSE cannot mount, faults fall back to strace's injection, which fails a call
    whole: the verdict lists that as a limit instead of implying partial writes were tried."""
    import scopecheck.process.syscall_crash as syscall_crash

    _node()
    monkeypatch.setattr(syscall_crash, "fuse_unavailable", lambda: "no /dev/fuse here")
    source = SyscallSource("node", tuple(NODE_BACKEND), str(ROOT))
    found = source.explore(4, seed=4)
    assert found.fault_runs > 0
    assert any("no write was left partial" in text for text in found.findings.limits), (
        found.findings.limits
    )


@pytest.mark.rule("CRASH-SYS-3")
def test_an_image_met_again_is_answered_by_its_passed_check_and_a_failed_one_judged_again(
    tmp_path: Path,
) -> None:
    """Crash points often leave the files an earlier one left: the checker answers such an
    image by the check it passed (no request to the child), but judges a failed one again."""
    _node()
    source = SyscallSource("node", tuple(NODE_BACKEND), str(ROOT), base=str(tmp_path))
    with source.round(3, Findings()) as rnd:
        assert rnd is not None
        rec, checker = rnd.recording, rnd.checker
        end = len(rec.ops)
        assert end > 0
        image = power_image(rec.ops, end, ProcessCrash())
        assert checker.check(end, ProcessCrash(), image, rec.allowed(end)) is None
        checked = checker.checked
        assert checker.check(end - 1, ProcessCrash(), image, rec.allowed(end)) is None
        assert (checker.checked, checker.reused) == (checked, 1)
        wrong = (0,)  # no Session yet: the final image holds one
        assert checker.check(end, ProcessCrash(), image, wrong) is not None
        assert checker.check(end, ProcessCrash(), image, wrong) is not None
        assert (checker.checked, checker.reused) == (checked + 2, 1)
