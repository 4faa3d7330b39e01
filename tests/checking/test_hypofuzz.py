"""HypoFuzz, the engine for runs that outgrow one machine, on a planted bug (INSTALL-9).

``hypothesis fuzz`` runs the storage machine over a backend with a retirement bug, saving what
it finds in the example database; a plain pytest run that may only *reuse* examples -- no
generation at all -- replays the failure from that database and fails.  The same run over an empty
database passes, so the failure can only have come from what HypoFuzz saved.

Gotchas this pins down (docs/ci.md): HypoFuzz fuzzes a test only when its database is the
default settings' database, and skips a test whose settings suppress ``nested_given``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# Long: about 40 s, and test_fleet.py runs the same path (HypoFuzz finds, a reuse-only run
# replays) over a user's backend in the default run.
pytestmark = [
    pytest.mark.hypofuzz, pytest.mark.slow, pytest.mark.long, pytest.mark.rule("INSTALL-9")
]  # fmt: skip

TARGET = """
import os

from hypothesis import Phase, settings

from scopecheck.backends.resolve import resolve_backend
from scopecheck.machines.storage import make_machine
from scopecheck.run.profiles import get_profile, load_profile

load_profile("dev")  # its database is $SCOPECHECK_DB, the default HypoFuzz requires
TestPlanted = make_machine(resolve_backend("memory-retire-leaves-lists")).TestCase
if os.environ.get("REUSE_ONLY"):
    TestPlanted.settings = settings(get_profile("dev"), phases=[Phase.explicit, Phase.reuse])
"""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        return -1, str(exc.stdout or "") + str(exc.stderr or "")
    return done.returncode, done.stdout + done.stderr


def test_hypofuzz_finds_a_planted_bug_and_pytest_replays_it_from_the_database(
    tmp_path: Path,
) -> None:
    hypothesis_cli = shutil.which("hypothesis", path=os.path.dirname(sys.executable))
    if hypothesis_cli is None:
        pytest.fail("the hypofuzz extra is not installed: pip install 'scopecheck[hypofuzz]'")
    (tmp_path / "test_planted.py").write_text(textwrap.dedent(TARGET))
    database = tmp_path / "db"
    env = {**os.environ, "SCOPECHECK_DB": str(database)}
    env.pop("SCOPECHECK_PROFILE", None)

    # HypoFuzz runs until stopped (its hub looks for "a failure for every test" once a
    # minute); the test stops it as soon as a reuse-only pytest run fails from the database.
    # Its own process group: HypoFuzz's hub starts worker processes that outlive a signal to the
    # hub alone, so the whole group is stopped at the end.
    fuzz = subprocess.Popen(
        [hypothesis_cli, "fuzz", "--no-dashboard", "-n", "1", "--", "test_planted.py"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    replay = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_planted.py"]
    status, output = 0, "hypofuzz saved nothing in 150 s"
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and fuzz.poll() is None:
            time.sleep(2)
            if any(p.is_file() for p in database.rglob("*")):
                status, output = _run(replay, tmp_path, {**env, "REUSE_ONLY": "1"}, timeout=300)
                if status != 0:
                    break
    finally:
        os.killpg(fuzz.pid, signal.SIGINT)
        try:
            fuzz.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fuzz.kill()
            fuzz.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(fuzz.pid, signal.SIGKILL)  # workers still running after the hub exited
    assert status == 1 and "MismatchError" in output, output[-2000:]

    empty = {**env, "REUSE_ONLY": "1", "SCOPECHECK_DB": str(tmp_path / "empty")}
    status, output = _run(replay, tmp_path, empty, timeout=300)
    assert status == 0, output[-2000:]
