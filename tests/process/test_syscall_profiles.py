"""File-system profiles on the system-call path (CRASH-SYS-14, CRASH-SYS-15): the planted bugs
that separate the profiles are caught under strace with the right profile list, the reproducer
replays the image of its profile and says where it happens, ``validate --fs-profile`` turns a
failure under other profiles only into a warning, and an unknown profile is one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from scopecheck.crashsim.strace import unavailable
from scopecheck.planted import syscall as planted
from scopecheck.process.syscall_crash import explore, replay
from scopecheck.run.validate import Failure, Verdict, summary_lines
from tests.test_validate_verdict import agrees

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _strace_is_here() -> None:
    why = unavailable()
    assert why is None, (
        f"these tests need strace with ptrace permitted ({why}); .ci/run installs it"
    )


@pytest.mark.rule("CRASH-SYS-14", "CRASH-SYS-15")
@pytest.mark.parametrize(
    "name",
    [
        "syscall-file-create-without-directory-fsync",
        # the swap runs at a reopen, which the first rounds may not reach: a longer budget
        pytest.param("syscall-swap-without-directory-fsync", id="swap"),
        pytest.param("syscall-rename-without-file-fsync", marks=pytest.mark.long),
        pytest.param("syscall-append-without-fsync", marks=pytest.mark.long),
    ],
)
def test_a_planted_bug_is_caught_under_its_profiles_and_replays_them(
    name: str, tmp_path: Path
) -> None:
    """Every crash failure of a power-loss image names exactly the bug's profiles, and its
    replay rebuilds the image and says where it happens and where not."""
    spec = planted.spec_of(name)
    command = [sys.executable, "-m", "scopecheck", "serve", spec]
    budget = 30.0 if "swap" in name else 5.0
    found = explore(spec, command, str(ROOT), budget, seed=0, faults=False)
    crashes = [f for f in found.failures if f.run == "crash" and f.profiles]
    assert crashes, [str(f) for f in found.failures]
    assert {f.profiles for f in crashes} == {planted.PROFILE_BUGS[name]}
    still, text = replay(orjson.loads(orjson.dumps(crashes[0].to_json())))
    assert still, text
    missing = [n for n in ("posix", "ext4-ordered", "btrfs") if n not in crashes[0].profiles]
    words = f"fails under {', '.join(crashes[0].profiles)}"
    assert words in text, text
    if missing:
        assert f"not under {', '.join(missing)}" in text, text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.rule("CRASH-SYS-15")
def test_a_failure_under_other_profiles_only_is_a_warning(tmp_path: Path) -> None:
    """With --fs-profile ext4-ordered, a posix-only bug -- the Node example's create without
    a directory fsync (``--no-dir-fsync``) -- is listed as a warning with its profiles in
    --json (which holds to the schema), and no crash failure fails the run.  The run is fixed
    work (``--examples 1``: crash exploration's one workload with every fault and kill run),
    so a loaded machine cannot cut crash exploration short; a Node backend starts in a
    fraction of the time a Python one does, which keeps that work to seconds."""
    assert shutil.which("node") is not None, "the Node.js example needs node on PATH"
    command = f"node {ROOT / 'examples' / 'node' / 'backend.js'} --no-dir-fsync"
    failures = str(tmp_path / "failures")
    result = _cli(
        "validate", "--exec", command, "--examples", "1", "--fs-profile", "ext4-ordered",
        "--json", "--failures-dir", failures,
    )  # fmt: skip
    data = orjson.loads(result.stdout)
    agrees(data)
    assert data["fs_profile"] == "ext4-ordered"
    assert data["warnings"], data
    assert all(w["profiles"] == ["posix"] for w in data["warnings"]), data["warnings"]
    assert all(w["not_profiles"] == ["ext4-ordered", "btrfs"] for w in data["warnings"])
    assert not [f for f in data["failures"] if f["phase"] == "crash exploration"], data
    assert result.returncode == (0 if data["passed"] else 1)


@pytest.mark.rule("CRASH-SYS-15")
def test_the_summary_says_where_a_failure_happens_and_where_a_warning_does() -> None:
    """A crash failure's summary lines name the profiles it happens under and those it does
    not; one under other profiles only is a WARNING that does not fail the verdict."""
    failure = Failure(
        "crash exploration", "CRASH-FS-6", "lost", "scopecheck replay F", ("CRASH-FS-6",),
        profiles=("posix",),
    )  # fmt: skip
    failed = Verdict("b", failures=(failure,))
    lines = summary_lines(failed)
    assert "  file-system profiles: fails under posix; not under ext4-ordered, btrfs" in lines
    assert not failed.passed
    warned = Verdict("b", warnings=(failure,), fs_profile="ext4-ordered")
    lines = summary_lines(warned)
    assert warned.passed and lines[0].startswith("PASSED b under ext4-ordered, 1 warnings")
    assert "WARNING CRASH-FS-6 (crash exploration): lost" in lines
    assert failure.as_json()["not_profiles"] == ["ext4-ordered", "btrfs"]


@pytest.mark.rule("CRASH-SYS-15")
@pytest.mark.parametrize("command", ["validate", "crash"])
def test_an_unknown_profile_is_one_line(command: str) -> None:
    """An unknown --fs-profile is a one-line user error naming the choices, exit 2."""
    args = [command, "--fs-profile", "zfs"]
    if command == "validate":
        args.append("scopecheck.examples.good_file_backend:make_backend")
    result = _cli(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("scopecheck: error: "), result.stderr
    assert "posix, ext4-ordered, btrfs" in result.stderr
