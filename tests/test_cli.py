"""The command line as a user drives it: subprocesses, exit codes, one-line mistakes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent


def scopecheck(
    *args: str, cwd: Path = ROOT, hash_seed: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={
            **__import__("os").environ,
            **({"PYTHONHASHSEED": hash_seed} if hash_seed is not None else {}),
        },
    )


@pytest.mark.rule("ERR-4")
@pytest.mark.parametrize(
    "args",
    [
        ("fuzz", "--backend", "nope"),
        ("fuzz", "--backend", "examples/nope.py:make_backend"),
        ("fuzz", "--backend", "examples/good_backend.py:nothing"),
        ("fuzz", "--budget", "0"),
        ("fuzz", "--budget", "soon"),
        ("fuzz", "--profile", "weekly"),
        ("replay", "/nonexistent/file.json"),
        ("frobnicate",),
        ("mutants", "--name", "nope"),
        ("bench", "nope"),
        ("bench", "machine", "--large"),
        ("bench", "fleet", "--budget", "0"),
        ("bench", "machine", "--budget", "5"),
        ("bench", "fleet", "examples/good_backend.py:make_backend"),
    ],
)
def test_user_mistakes_print_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    """No traceback: one ``scopecheck: error:`` line on stderr and status 2."""
    result = scopecheck(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scopecheck: error: "), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.rule("ERR-4")
def test_malformed_reproducer_file_is_a_user_mistake(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = scopecheck("replay", str(bad))
    assert result.returncode == 2 and "not a reproducer file" in result.stderr


@pytest.mark.rule("LIFE-2")
def test_fuzz_json_summary_parses_and_passes(tmp_path: Path) -> None:
    """``fuzz --json`` prints the documented shape and exits 0 on a correct backend."""
    result = scopecheck(
        "fuzz",
        "--backend",
        "memory",
        "--budget",
        "2",
        "--seed",
        "7",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    report = data["backends"]["memory"]
    assert data["failures"] == 0
    assert report["steps"] > 0 and report["examples"] > 0 and report["steps_per_second"] > 0
    assert set(report) >= {
        "examples", "steps", "crash_states", "crash_fault_runs", "failures", "steps_per_second"
    }  # fmt: skip


@pytest.mark.rule("ARCH-2", "RETIRE-2")
def test_found_bug_saves_a_reproducer_that_replays_to_the_same_failure(tmp_path: Path) -> None:
    """A planted bug makes fuzz exit 1 with a replay command; replay fails the same way.  The
    run goes on for its budget after the finding (CHECK-9): the one bug may be reported once
    per rule it breaks (a retire step, a reuse after retirement), each its own reproducer."""
    result = scopecheck(
        "fuzz",
        "--backend",
        "memory-retire-leaves-lists",
        "--budget",
        "4",
        "--seed",
        "3",
        "--failures-dir",
        str(tmp_path),
    )
    assert result.returncode == 1, result.stderr
    assert "Replay it with: scopecheck replay" in result.stderr
    # the shrunk program retires a scope: a retire step, or a related-ids step that retires
    retiring = ("state.retire", "'retire': 0", "'retire': 1")
    assert any(f in result.stderr for f in retiring)
    saved = sorted(tmp_path.glob("*.json"))
    assert saved
    replayed = scopecheck("replay", str(saved[0]))
    assert replayed.returncode == 1
    assert "Still failing." in replayed.stdout
    assert "lists: model=" in replayed.stdout  # the same failure: a retired list was kept


@pytest.mark.rule("ARCH-2", "RETIRE-2")
def test_fuzz_takes_a_user_backend_and_its_reproducer_replays(tmp_path: Path) -> None:
    """``fuzz --backend PATH:FACTORY`` fuzzes a backend outside the project; the broken example
    fails with a reproducer that names the spec, and replaying it loads the same factory."""
    spec = "examples/broken_backend.py:make_backend"
    result = scopecheck(
        "fuzz", "--backend", spec, "--budget", "4", "--seed", "1", "--json",
        "--failures-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    data = orjson.loads(result.stdout)
    saved = sorted(tmp_path.glob("*.json"))
    assert data["backends"][spec]["failures"] == len(saved) >= 1
    assert all(orjson.loads(path.read_bytes())["spec"] == spec for path in saved)
    replayed = scopecheck("replay", str(saved[0]))
    assert replayed.returncode == 1 and "Still failing." in replayed.stdout


@pytest.mark.rule("ERR-4")
@pytest.mark.parametrize(
    "factory",
    [
        "examples/nope.py:make_backend",
        "no_such_module_xyz:make",
        "examples/good_backend.py:nothing",
        "examples/good_backend.py",
        "tests/data/raising_backend.py:make_backend",
    ],
)
def test_validate_refuses_bad_factories_with_one_line(factory: str) -> None:
    """Bad paths, missing attributes and factories that raise are user mistakes (exit 2)."""
    result = scopecheck("validate", factory, "--budget", "1")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "scopecheck: error:" in result.stderr


@pytest.mark.rule("ARCH-2")
def test_validate_passes_the_good_example_and_fails_the_broken_one(tmp_path: Path) -> None:
    """The good adapter passes; the broken one fails with rules and replayable reproducers.
    Both run a fixed number of machine examples (``--examples``; the broken example fails in
    the first ten) rather than until a wall budget is spent, so a loaded machine does the same
    work, only slower; the budget bounds shrinking alone."""
    good = scopecheck(
        "validate",
        "examples/good_backend.py:make_backend",
        "--budget",
        "3",
        "--examples",
        "10",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert good.returncode == 0, good.stdout + good.stderr
    verdict = orjson.loads(good.stdout)
    assert verdict["passed"] is True and verdict["failures"] == [] and verdict["machine_steps"] > 0
    assert verdict["conformance_tests"] > 40
    # A dict backend takes no FileSystem: crash exploration is skipped, and says so (CRASH-FS-8).
    assert verdict["crash_exploration"].startswith("skipped") and verdict["crash_states"] == 0

    bad = scopecheck(
        "validate",
        "examples/broken_backend.py:make_backend",
        "--budget",
        "20",
        "--examples",
        "10",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert bad.returncode == 1
    verdict = orjson.loads(bad.stdout)
    assert verdict["passed"] is False
    assert "RETIRE-2" in {f["rule"] for f in verdict["failures"]}
    replays = [
        f["reproducer"]
        for f in verdict["failures"]
        if f["reproducer"].startswith("scopecheck replay")
    ]
    assert replays, verdict
    replayed = scopecheck(*replays[0].split()[1:])
    assert replayed.returncode == 1 and "Still failing." in replayed.stdout


@pytest.mark.rule("ARCH-2", "CRASH-FS-6", "CRASH-FS-8", "CRASH-COV-2", "CRASH-COV-4")
def test_validate_explores_crashes_of_backends_that_take_a_filesystem(tmp_path: Path) -> None:
    """The file-backed example passes with crash states explored; its unsynced variant fails
    CRASH-FS-6 with a reproducer that ``scopecheck replay`` reruns to the same failure."""
    good = scopecheck(
        "validate",
        "examples/good_file_backend.py:make_backend",
        "--budget",
        "3",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert good.returncode == 0, good.stdout + good.stderr
    verdict = orjson.loads(good.stdout)
    assert verdict["passed"] is True and verdict["crash_exploration"] == "ran"
    assert verdict["crash_states"] > 0 and verdict["machine_steps"] > 0
    assert verdict["crash_fault_runs"] > 0
    assert verdict["crash_coverage"]["complete"] is True  # a state after every acknowledgement

    bad = scopecheck(
        "validate",
        "examples/broken_file_backend.py:make_backend",
        "--budget",
        "3",
        "--failures-dir",
        str(tmp_path),
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "CRASH-FS-6" in bad.stdout and "crash exploration:" in bad.stdout
    # one reproducer per distinct failure, each under its own name (CRASH-COV-4)
    saved_all = sorted(tmp_path.glob("broken_file_backend-*.json"))
    records = {path: orjson.loads(path.read_bytes()) for path in saved_all}
    assert len(records) >= 2
    saved = next(p for p, r in records.items() if r["rule"] == "CRASH-FS-6" and r["run"] == "crash")
    record = records[saved]
    assert record["kind"] == "crash" and record["source"] == "fs" and record["version"] == 3
    assert f"scopecheck replay {saved}" in bad.stdout.replace("\n", "")
    replayed = scopecheck("replay", str(saved))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert (
        "Still failing." in replayed.stdout and "files on disk after the crash" in replayed.stdout
    )


@pytest.mark.rule("CRASH-FS-8", "INSTALL-15", "INSTALL-10")
@pytest.mark.parametrize(
    ("example", "status", "outcome", "crash"),
    [
        ("good_file_backend", 0, "4 passed", "ran"),
        ("broken_file_backend", 1, "4 failed", "FAILED"),
        ("sqlite3_backend", 0, "4 passed", "ran"),
        ("good_backend", 0, "5 skipped", "skipped"),
    ],
)
def test_pytest_plugin_runs_crash_exploration_as_validate_does_or_skips_it(
    example: str, status: int, outcome: str, crash: str
) -> None:
    """``pytest --scopecheck-backend=...`` runs the crash and I/O-fault tests for a backend
    that takes a FileSystem (the generic sweep) or only ``root`` (its system calls), as
    ``validate`` does, and reports them *skipped* (not passed) with ``validate``'s reason for
    one that takes neither; its closing verdict says the same."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "scopecheck.pytest_plugin",
            "-p",
            "no:cacheprovider",
            f"--scopecheck-backend=examples/{example}.py:make_backend",
            "--pyargs",
            "scopecheck.conformance.test_crash",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=dict(__import__("os").environ),
    )
    assert result.returncode == status, result.stdout + result.stderr
    assert outcome in result.stdout, result.stdout
    assert f"  crash exploration: {crash} " in result.stdout, result.stdout
    if status == 1:
        # no fsync: power loss after a crash, and power loss right after a failed commit
        assert "CRASH-FS-6" in result.stdout and "CRASH-FS-9" in result.stdout
    if crash == "skipped":
        from scopecheck.run.validate import CRASH_SKIPPED

        reason = f"crash exploration: skipped ({CRASH_SKIPPED['plain']})"
        assert reason in result.stdout, result.stdout


@pytest.mark.rule("ARCH-2")
def test_example_adapter_stays_short() -> None:
    """A dict-backed adapter needs fewer than 150 lines."""
    lines = (ROOT / "examples" / "good_backend.py").read_text().splitlines()
    assert len(lines) < 150, len(lines)


@pytest.mark.long  # about 45 s; --workers 2 also runs in the I/O-fault count test below
@pytest.mark.rule("STATS-3")
def test_fuzz_workers_spread_backends_over_xdist(tmp_path: Path) -> None:
    """``--workers 2`` fuzzes two backends in parallel and aggregates both reports."""
    result = scopecheck(
        "fuzz",
        "--backend",
        "memory",
        "--backend",
        "memory-stats-count-scoped",
        "--workers",
        "2",
        "--budget",
        "3",
        "--seed",
        "1",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert result.returncode == 1, result.stderr
    data = orjson.loads(result.stdout)
    assert data["backends"]["memory"]["failures"] == 0
    assert data["backends"]["memory"]["steps"] > 0
    assert data["backends"]["memory-stats-count-scoped"]["failures"] == 1
    assert len(list(tmp_path.glob("*.json"))) == 1


@pytest.mark.rule("CRASH-FS-9")
@pytest.mark.parametrize("workers", [pytest.param("1", marks=pytest.mark.long), "2"])
def test_fuzz_counts_the_single_io_fault_runs_of_a_file_backend(
    tmp_path: Path, workers: str
) -> None:
    """Crash injection of a backend taking ``fs`` and ``root`` makes I/O-fault runs too, and
    the report counts them apart from crash states, in one process and with ``--workers``.
    One process is long: each ``--workers`` worker fuzzes its backend in one process the same
    way, and the default run counts its report through the workers' aggregation."""
    result = scopecheck(
        "fuzz",
        "--backend",
        "examples/good_file_backend.py:make_backend",
        "--backend",
        "memory",
        "--workers",
        workers,
        "--budget",
        "4",
        "--seed",
        "2",
        "--json",
        "--failures-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    backends = orjson.loads(result.stdout)["backends"]
    good = backends["examples/good_file_backend.py:make_backend"]
    assert good["crash_states"] > 0 and good["crash_fault_runs"] > 0, good
    assert backends["memory"]["crash_fault_runs"] == 0  # Memory has no files to fail


@pytest.mark.rule("ERR-4")
def test_inspect_reads_a_session_and_refuses_a_non_session(tmp_path: Path) -> None:
    """``scopecheck inspect`` reports a real JSONL session and says one line for a bad path."""
    from scopecheck.impl.fs import OsFileSystem
    from scopecheck.impl.jsonl import JsonlRepository
    from scopecheck.models.addresses import value
    from scopecheck.models.scope import ephemeral_scope
    from scopecheck.models.writes import retire_scope, set_value

    repo = JsonlRepository(str(tmp_path), OsFileSystem(), lambda: 1, cwd="/")
    storage = repo.create("s1")
    op = ephemeral_scope("op")
    storage.commit([set_value(value("a", "k", op), 1)])
    storage.commit([set_value(value("a"), 2), retire_scope(op)])
    storage.close()
    result = scopecheck("inspect", str(tmp_path / "s1.jsonl"), "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["open"] == "succeeds"
    missing = scopecheck("inspect", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
