"""Backends in other runtimes, validated end to end as a user would (`scopecheck validate --exec
... --json`): the Go example (examples/go, built here with `go build`) and the Node.js example
doing its file I/O through `fs/promises` on libuv's thread pool.

Both are correct backends, so every phase must pass, crash exploration included.  In these
runtimes the thread that makes a given file write is not fixed -- goroutines migrate between OS
threads, libuv's workers answer the main thread through an eventfd -- so strace's per-thread
``when=N`` once landed the fault meant for a file write on the response written to stdout (Go)
or on a worker's eventfd write (Node, which libuv answers with abort()).  Faults now go through
the FUSE mount, which names the call by what it does across every thread (CRASH-COV-3): no false
failure may come back.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from scopecheck.backends.adapters import load
from scopecheck.crashsim.strace import unavailable
from scopecheck.run.fuzz import fuzz_backend
from scopecheck.run.profiles import get_profile
from scopecheck.run.validate import run_conformance, scratch_directory

ROOT = Path(__file__).resolve().parents[2]
GO = shutil.which("go")
NODE = shutil.which("node")
PROMISES_BACKEND = f"node {ROOT / 'examples' / 'node' / 'backend-promises.js'}"
#: Machine examples of `validate --examples` for each backend: fixed work (the conformance
#: suite, the machine's examples, crash exploration's one workload with every fault and kill
#: run), about 10 s (Go) and 17 s (Node) on an idle machine, and the same work on a loaded one,
#: whose crash exploration a wall budget could leave incomplete.
EXAMPLES = 10
#: Seconds of `validate --budget`: with `--examples` it bounds only the shrinking of a failure.
BUDGET = 20


def validate_exec(command: str, failures: Path, examples: int = EXAMPLES) -> dict[str, Any]:
    """`scopecheck validate --exec COMMAND --examples EXAMPLES --json` in a child, as a user
    runs it; the verdict with its ``exit_status``."""
    assert unavailable() is None, "crash exploration needs strace with ptrace permitted"
    run = subprocess.run(
        [sys.executable, "-m", "scopecheck", "validate", "--exec", command, "--examples",
         str(examples), "--budget", str(BUDGET), "--json", "--failures-dir", str(failures)],
        cwd=ROOT, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.stdout, run.stderr.decode(errors="replace")[-3000:]
    verdict: dict[str, Any] = orjson.loads(run.stdout)
    verdict["exit_status"] = run.returncode
    return verdict


@pytest.fixture(scope="module", params=["go", "node-promises"])
def verdict(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """One `validate --exec` run per backend, shared by the two tests."""
    if request.param == "go":
        command = shlex.quote(str(request.getfixturevalue("go_backend")))
    else:
        assert NODE is not None, "the Node.js example needs node on PATH"
        command = PROMISES_BACKEND
    yield validate_exec(command, tmp_path_factory.mktemp("failures"))


def _failures(verdict: dict[str, Any], *phases: str) -> list[dict[str, Any]]:
    return [f for f in verdict["failures"] if f.get("phase") in phases]


@pytest.mark.rule("PROC-1", "PROC-3")
def test_a_backend_in_another_runtime_passes_the_machine_conformance_and_restarts(
    verdict: dict[str, Any],
) -> None:
    phases = verdict["phases"]
    assert _failures(verdict, "machine", "conformance", "restarts") == []
    assert phases["machine"]["status"] == "ran" and phases["machine"]["steps"] > 0
    assert phases["conformance"]["status"] == "ran"
    assert phases["conformance"]["failed"] == 0 and phases["conformance"]["skipped"] == 0
    assert phases["conformance"]["cases"] > 0
    assert phases["restarts"]["status"] == "ran" and phases["restarts"]["restarts"] > 0
    assert phases["forks"]["status"] == "skipped"
    assert phases["crash exploration"]["status"] == "ran", phases["crash exploration"]


@pytest.mark.rule("CRASH-SYS-3", "CRASH-SYS-6", "CRASH-SYS-7", "CRASH-COV-3")
def test_crash_exploration_of_a_backend_in_another_runtime_finds_no_failure(
    verdict: dict[str, Any],
) -> None:
    crash = verdict["phases"]["crash exploration"]
    assert crash["crash_states"] > 0 and crash["crash_fault_runs"] > 0
    found = _failures(verdict, "crash exploration")
    assert found == [], [(f["rule"], f["error"]) for f in found]
    assert crash["status"] == "ran"
    assert verdict["passed"] and verdict["exit_status"] == 0


@pytest.mark.long
@pytest.mark.rule("PROC-1")
def test_the_go_backend_passes_the_machine_and_the_conformance_suite(
    go_backend: Path, tmp_path: Path
) -> None:
    """The quick check: the machine for a few seconds and the conformance suite, no strace.
    Long: in the default run the ``go`` verdict above checks the same (machine, conformance
    and restarts on the Go example) in its `validate` run."""
    spec = f"exec:{shlex.quote(str(go_backend))}"
    with scratch_directory():
        loaded = load(spec)
        try:
            report = fuzz_backend(
                attrs.evolve(loaded.backend, crash=None),
                budget=4,
                seed=0,
                settings=get_profile("ci"),
                failures_dir=tmp_path,
                profile="ci",
                spec=spec,
            )
        finally:
            assert loaded.backend.close is not None
            loaded.backend.close()  # the pool's processes
        assert report.failures == 0, report.reproducers
        assert report.steps > 100 and loaded.counts.restarts > 0
        cases = run_conformance(spec, forks=False)
    assert cases.failures == (), cases.failures[0]
    assert cases.ran > 0 and cases.skipped == ()
