"""A fleet sharing one real Redis (FLEET-1..3): two HypoFuzz workers over a user's backend with a
bug, each with its own local directory database, save what they find in Redis; a third process
standing for another machine, with an empty local directory, replays the failure from Redis
alone.  And a Redis that stops answering loses no finding.

The Redis is a real ``redis-server`` (Debian package redis-server, which .ci/run installs).  Where
none can be started the tests skip with the reason in capitals -- except under
``SCOPECHECK_REQUIRE_REDIS=1`` (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson
import pytest

from scopecheck.bench.fleet import Skipped, free_port, redis_server

pytestmark = [pytest.mark.hypofuzz, pytest.mark.slow]

#: A user's backend with a bug the storage machine finds (the README's broken example).
SPEC = "scopecheck.examples.broken_backend:make_backend"

TARGETS = f"""
import os

from hypothesis import Phase, settings

import scopecheck

globals().update(scopecheck.fuzz_targets_for({SPEC!r}, profile="dev"))
if os.environ.get("REUSE_ONLY"):
    for _name, _test in list(globals().items()):
        if _name.startswith("Test"):
            _test.settings = settings(settings.default, phases=[Phase.explicit, Phase.reuse])
"""


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server on a free loopback port, stopped afterwards (the one
    ``scopecheck bench fleet`` starts)."""
    with redis_server(tmp_path) as url:
        if isinstance(url, Skipped):
            message = f"NO REDIS SERVER: {url.reason} (.ci/run installs one)"
            if os.environ.get("SCOPECHECK_REQUIRE_REDIS") == "1":
                pytest.fail(message)
            pytest.skip(message)
        yield url


def _saved(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    return sum(int(client.scard(key)) for key in client.keys(b"hypothesis-example:*"))


def _signal(workers: Iterable[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    """``sig`` to each worker's process group: HypoFuzz's hub and the workers it started."""
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, sig)


def _local_files(path: Path) -> int:
    return sum(1 for found in path.rglob("*") if found.is_file()) if path.exists() else 0


@pytest.mark.rule("FLEET-1", "FLEET-3", "INSTALL-9")
def test_two_workers_share_a_failure_that_a_third_machine_replays_from_redis_alone(
    tmp_path: Path, redis_url: str, request: pytest.FixtureRequest
) -> None:
    hypothesis_cli = shutil.which("hypothesis", path=os.path.dirname(sys.executable))
    if hypothesis_cli is None:
        pytest.fail("the hypofuzz extra is not installed: pip install 'scopecheck[hypofuzz]'")
    (tmp_path / "test_targets.py").write_text(textwrap.dedent(TARGETS))
    # The workers' own temporary folders (multiprocessing's pymp-*, which a worker killed on
    # the way out leaves behind) go into a folder of their own, removed at the end; a short
    # one under /tmp, since their manager's Unix socket lives there (108 bytes at most).
    scratch = tempfile.mkdtemp(prefix="fleet-", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    base = {**os.environ, "SCOPECHECK_DB": redis_url, "TMPDIR": scratch}
    base.pop("SCOPECHECK_PROFILE", None)
    workers = {}
    for name in ("a", "b"):
        env = {**base, "SCOPECHECK_LOCAL_DB": str(tmp_path / f"local-{name}")}
        with (tmp_path / f"worker-{name}.log").open("wb") as log:
            workers[name] = subprocess.Popen(
                [hypothesis_cli, "fuzz", "--no-dashboard", "-n", "1", "--", "test_targets.py"],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
    third = {**base, "SCOPECHECK_LOCAL_DB": str(tmp_path / "local-third"), "REUSE_ONLY": "1"}
    replay = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_targets.py"]
    # Under the whole suite on two cores the fuzzers share the CPU with the other tests.
    status, output = 0, "the workers saved nothing in Redis in 300 s"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(2)
            ended = [name for name, worker in workers.items() if worker.poll() is not None]
            if ended and not _saved(redis_url):
                output = f"worker(s) {', '.join(ended)} ended before saving anything"
                break
            if _saved(redis_url):
                # The workers are paused while the third process replays (each fuzzes on a
                # whole core): the replay reads Redis alone either way, and neither it nor the
                # tests running beside this one wait for CPU the fuzzers hold.
                _signal(workers.values(), signal.SIGSTOP)
                done = subprocess.run(
                    replay, cwd=tmp_path, env=third, capture_output=True, text=True, timeout=300
                )
                status, output = done.returncode, done.stdout + done.stderr
                if status != 0:
                    break
                _signal(workers.values(), signal.SIGCONT)
    finally:
        _signal(workers.values(), signal.SIGCONT)
        _signal(workers.values(), signal.SIGINT)
        for worker in workers.values():
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
    logs = "".join(
        f"\n--- worker {name} ---\n"
        + (tmp_path / f"worker-{name}.log").read_text(errors="replace")[-1500:]
        for name in workers
    )
    assert status == 1 and "MismatchError" in output, output[-2000:] + logs
    found_by = [name for name in workers if _local_files(tmp_path / f"local-{name}")]
    assert found_by, "a worker's local database holds nothing: the finding was only in Redis"
    print(
        f"found by worker(s) {', '.join(found_by)} ({_saved(redis_url)} examples in Redis); "
        "replayed by the third process from Redis alone"
    )
    empty = {**third, "SCOPECHECK_DB": redis_url.rsplit("/", 1)[0] + "/1"}
    empty["SCOPECHECK_LOCAL_DB"] = str(tmp_path / "local-empty")
    done = subprocess.run(replay, cwd=tmp_path, env=empty, capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]

    # scopecheck validate replays the database's examples before its seeded rounds: one seeded
    # example does not find the bug, the shared finding does.
    validate = [sys.executable, "-m", "scopecheck", "validate", SPEC, "--examples", "1", "--json"]
    for env, expected in (
        (empty, "ran"),
        ({**third, "SCOPECHECK_LOCAL_DB": str(tmp_path / "v")}, "failed"),
    ):
        checked = subprocess.run(validate, cwd=tmp_path, env=env, capture_output=True, timeout=300)
        # the conformance cases fail either way
        assert checked.returncode == 1, checked.stderr[-2000:]
        assert orjson.loads(checked.stdout)["phases"]["machine"]["status"] == expected


@pytest.mark.rule("FLEET-2")
def test_a_redis_that_stops_answering_loses_no_finding(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hypothesis.database import DirectoryBasedExampleDatabase

    from scopecheck.run.example_db import SharedDatabase, redis_database

    local = DirectoryBasedExampleDatabase(str(tmp_path / "local"))
    shared = SharedDatabase(local, redis_database(redis_url), redis_url)
    shared.save(b"key", b"first")
    other = SharedDatabase(
        DirectoryBasedExampleDatabase(str(tmp_path / "other")), redis_database(redis_url), redis_url
    )
    assert list(other.fetch(b"key")) == [b"first"]  # from Redis: the other local is empty

    shared.shared.redis.shutdown(nosave=True)  # type: ignore[attr-defined]
    shared.save(b"key", b"second")
    shared.save(b"key", b"third")
    assert sorted(shared.fetch(b"key")) == [b"first", b"second", b"third"]
    assert sorted(local.fetch(b"key")) == [b"first", b"second", b"third"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "stopped answering" in lines[0] and str(tmp_path) in lines[0]


@pytest.mark.rule("FLEET-1")
def test_an_unreachable_redis_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    env = {**os.environ, "SCOPECHECK_DB": url}
    done = subprocess.run(
        [sys.executable, "-m", "scopecheck", "fuzz", "--backend", "memory", "--budget", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scopecheck: error:"), done.stderr
    assert url in lines[0] and "Traceback" not in done.stderr


@pytest.mark.rule("FLEET-3")
def test_scopecheck_hypofuzz_writes_targets_pytest_collects(tmp_path: Path) -> None:
    """``--write`` leaves a file of targets: a backend taking ``fs`` gets its machine and a
    crash-exploration test; a spec that does not load is one line, exit 2, and no file."""
    spec = "scopecheck.examples.good_file_backend:make_backend"
    command = [sys.executable, "-m", "scopecheck", "hypofuzz", spec, "--write", "targets.py"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    listed = subprocess.run(
        [*collect, "targets.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "targets.py::TestGoodFileBackendMachine::runTest" in listed.stdout
    assert "targets.py::test_crash_exploration_good_file_backend" in listed.stdout

    bad = [sys.executable, "-m", "scopecheck", "hypofuzz", "nope.py:make", "--write", "x.py"]
    done = subprocess.run(bad, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (tmp_path / "x.py").exists()
    assert done.stderr.strip().splitlines() == [
        f"scopecheck: error: not_found: no Python file at {tmp_path / 'nope.py'}"
    ]
