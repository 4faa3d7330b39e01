"""The JSONL crash simulator: disk model, every crash state of the bundled workloads, faults
without a crash, Hypothesis-generated workloads, planted bugs, and the CLI (CRASH-*).

The default run explores the seven small named workloads in unsynced mode (their prefix
states included), about 40,000 states; ``SCOPECHECK_LONG_CRASH=1`` adds the ``mixed-*`` ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scopecheck.crashsim.fs_recorder import Op
from scopecheck.crashsim.fs_source import file_ops
from scopecheck.crashsim.jsonl_sweep import (
    MAIN,
    SCOPES,
    Checker,
    CrashState,
    allowed_for,
    crash_states,
    dead_sidecars,
    explore_workload,
    fault_sweep,
    max_seq_on_disk,
    trace,
)
from scopecheck.crashsim.jsonl_workloads import (
    BUNDLED,
    NAMED,
    Step,
    Workload,
    generated,
    load_workloads,
    workload_from_json,
)
from scopecheck.crashsim.persistence import Image, Volume
from scopecheck.crashsim.points import EntriesKept, Only, ProcessCrash, Strict, Torn
from scopecheck.crashsim.workload import make_workload
from scopecheck.planted import all_mutants

ROOT = Path(__file__).resolve().parent.parent.parent
LONG = os.environ.get("SCOPECHECK_LONG_CRASH") == "1"


# -- the persistence model, fed by the recorder ---------------------------------------------


def _volume(ops: list[Op], start: Image | None = None) -> Volume:
    volume = Volume(start)
    for op in file_ops(ops, "/r", start):
        volume.apply(op)
    return volume


@pytest.mark.rule("CRASH-8", "CRASH-SYS-1")
def test_strict_power_loss_drops_unsynced_data_and_undurable_entries() -> None:
    ops = [
        Op("write", "/r/a.tmp", b"head\n"),
        Op("fsync_file", "/r/a.tmp"),
        Op("rename", "/r/a.tmp", target="/r/a"),
    ]
    # neither the create nor the rename is durable yet
    assert _volume(ops).power_image(Strict()).files == {}
    ops.append(Op("fsync_dir", "/r"))
    assert _volume(ops).power_image(Strict()).files == {"a": b"head\n"}
    ops.append(Op("append", "/r/a", b"line\n"))
    assert _volume(ops).power_image(Strict()).files == {"a": b"head\n"}
    ops.append(Op("append", "/r/a", b"more\n"))
    volume = _volume(ops)
    assert volume.power_image(EntriesKept()).files == {"a": b"head\n"}
    assert volume.power_image(Only("a")).files == {"a": b"head\nline\nmore\n"}
    # the second unsynced append torn after 3 bytes, the first one kept
    assert volume.power_image(Torn(1, "a", 1, 3)).files == {"a": b"head\nline\nmor"}
    assert volume.process_image().files == {"a": b"head\nline\nmore\n"}
    ops += [Op("truncate", "/r/a", size=10), Op("fsync", "/r/a")]
    volume = _volume(ops)
    assert volume.power_image(Strict()).files == {"a": b"head\nline\n"}
    assert volume.power_image(Strict()) == volume.process_image()


@pytest.mark.rule("CRASH-8", "CRASH-9")
def test_a_durably_removed_directory_takes_its_entries_along() -> None:
    start = Image({"d/x": b"old"}, frozenset({"", "d"}))
    volume = _volume(
        [
            Op("remove", "/r/d", recursive=True),
            Op("fsync_dir", "/r"),
            Op("create_dir", "/r/d"),
            Op("fsync_dir", "/r"),
        ],
        start,
    )
    assert volume.power_image(Strict()) == Image({}, frozenset({"", "d"}))


@pytest.mark.rule("CRASH-3", "CRASH-6")
def test_seq_scan_and_dead_sidecars_read_complete_lines_only() -> None:
    files = {
        MAIN: b'{"v":4,"kind":"header","id":"s","nextSeq":4}\n'
        b'{"kind":"scope","op":"retire","seq":7,"scopeId":"a"}\n{"seq":99',
        f"{SCOPES}/scope-a.scope": b'{"kind":"scope_header"}\n{"seq":6}\n',
        f"{SCOPES}/scope-b.scope": b'{"kind":"scope_header"}\n{"seq":8}\n',
        f"{SCOPES}/scope-c.scope.tmp": b'{"seq":500}\n',
    }
    assert max_seq_on_disk(files) == 8
    assert dead_sidecars(files) == [f"{SCOPES}/scope-a.scope"]


# -- bundled workloads -----------------------------------------------------------------------


@pytest.mark.rule(
    "CRASH-1",
    "CRASH-2",
    "CRASH-3",
    "CRASH-4",
    "CRASH-5",
    "CRASH-6",
    "CRASH-8",
    "CRASH-9",
    "CRASH-13",
)
@pytest.mark.parametrize("name", NAMED)
def test_every_crash_state_of_a_named_workload_recovers(name: str) -> None:
    """Every process-crash state and every power-loss state of the persistence model (strict,
    data or entries kept, one file's unsynced writes kept, torn writes), plus crashes during
    each recovery, reopens to an allowed model state."""
    report = explore_workload(BUNDLED[name](), mode="unsynced", faults=False)
    assert report.states > 200 and report.recovery_states > 0
    assert [str(f) for f in report.failures] == []


@pytest.mark.rule("CRASH-13")
@pytest.mark.skipif(not LONG, reason="long sweep: set SCOPECHECK_LONG_CRASH=1")
@pytest.mark.parametrize("name", [n for n in BUNDLED if n not in NAMED])
def test_every_crash_state_of_a_mixed_workload_recovers(name: str) -> None:
    report = explore_workload(BUNDLED[name](), mode="unsynced")
    assert [str(f) for f in report.failures] == []


@pytest.mark.rule("CRASH-2", "CRASH-13")
def test_prefix_mode_is_a_subset_of_unsynced_mode() -> None:
    workload = BUNDLED["crash-after-retire-before-unlink"]()
    tr = trace(workload)
    prefix = list(crash_states(tr.file_ops, tr.initial, "prefix", allowed_for(tr)))
    unsynced = list(crash_states(tr.file_ops, tr.initial, "unsynced", allowed_for(tr)))
    assert {(c.op_index, c.variant) for c in prefix} < {(c.op_index, c.variant) for c in unsynced}
    assert any(c.variant == "strict" for c in unsynced)
    ops = {op.kind for op in tr.ops}
    assert {"write", "append", "fsync", "fsync_file", "fsync_dir", "rename", "unlink"} <= ops


@pytest.mark.rule("CRASH-7")
def test_leftover_temp_files_are_never_data() -> None:
    """Garbage temp files (a valid-looking sidecar line, a header) next to a crash state
    change nothing and open removes the ones in .scopes."""
    workload = BUNDLED["crash-during-first-sidecar-creation"]()
    tr = trace(workload)
    checker = Checker(tr, "prefix")
    final = list(crash_states(tr.file_ops, tr.initial, "prefix", allowed_for(tr)))[-1]
    files = dict(final.state.files)
    scopes = SCOPES.removeprefix("/sessions/")
    files[f"{scopes}/scope-op-Z.scope.tmp"] = (
        b'{"v":4,"kind":"scope_header","sessionId":"s","scopeId":"op-Z","storageVersion":1}\n'
        b'{"kind":"value","op":"set","seq":500,"namespace":"x","key":"k","value":1,'
        b'"scopeId":"op-Z"}\n'
    )
    files[f"{MAIN.removeprefix('/sessions/')}.tmp"] = b"garbage"
    crash = CrashState(
        final.op_index, ProcessCrash(), Image(files, final.state.dirs), final.allowed
    )
    assert checker.check(crash) is None
    assert f"{SCOPES}/scope-op-Z.scope.tmp" not in checker.box.tree()


@pytest.mark.rule("CRASH-5")
def test_recovery_itself_is_crashed() -> None:
    workload = BUNDLED["crash-during-torn-tail-repair"]()
    plain = explore_workload(workload, mode="unsynced", faults=False, recovery=False)
    full = explore_workload(workload, mode="unsynced", faults=False)
    assert full.failures == [] and full.states > plain.states + 200


# -- faults without a crash ------------------------------------------------------------------


@pytest.mark.rule("CRASH-9", "CRASH-10", "CRASH-11", "CRASH-12")
@pytest.mark.parametrize(
    "name",
    [
        "crash-after-retire-before-unlink",
        "crash-during-reused-lifetime",
        "crash-during-repository-delete",
        "mixed-50-seed2",
    ],
)
def test_single_io_faults_fail_cleanly(name: str) -> None:
    """Unlink, rename, create_dir, write (ENOSPC/EIO), partial append and fsync failures at
    every step of the commit and reopen steps."""
    runs, failures = fault_sweep(BUNDLED[name]())
    assert runs > 20
    assert [str(f) for f in failures] == []


# -- generated workloads ---------------------------------------------------------------------


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    seed = draw(st.integers(0, 10_000))
    count = draw(st.integers(1, 5))
    steps = [Step("create")]
    for tx in make_workload(seed, count, big_every=0):
        steps.append(Step("commit", tx))
        if draw(st.booleans()):
            steps.append(Step("reopen"))
    return Workload(f"hypothesis-{seed}-{count}", tuple(steps))


@pytest.mark.rule("CRASH-13")
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_generated_workloads_recover_from_every_crash(workload: Workload) -> None:
    report = explore_workload(workload, mode="unsynced", faults=False, recovery=False)
    assert [str(f) for f in report.failures] == []


# -- planted bugs ----------------------------------------------------------------------------

CRASH_JSONL = [m for m in all_mutants("jsonl") if m.caught_by == "crash"]


@pytest.mark.rule("CRASH-14")
def test_at_least_five_new_crash_only_jsonl_bugs_are_planted() -> None:
    names = {m.name for m in CRASH_JSONL}
    assert {
        "jsonl-ack-before-fsync",
        "jsonl-sidecar-header-in-place",
        "jsonl-torn-tail-not-repaired",
        "jsonl-retire-unlink-never-retried",
        "jsonl-failed-append-not-cut-back",
    } <= names
    assert all(m.check is not None for m in CRASH_JSONL)


# Each crash-only planted bug is run by its crash check in tests/test_mutants.py.


# -- files and the CLI -----------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


@pytest.mark.rule("CRASH-13")
def test_workload_json_round_trip(tmp_path: Path) -> None:
    workload = generated(4, 5, reopen_every=2)
    path = tmp_path / "w.json"
    path.write_bytes(orjson.dumps({"workloads": [workload.to_json()]}))
    (loaded,) = load_workloads(str(path))
    assert loaded == workload
    assert workload_from_json({"steps": [{"op": "commit", "writes": [{"retire": "a"}]}]}).steps[
        0
    ] == Step("create")


@pytest.mark.rule("CRASH-13")
def test_cli_crash_json_on_a_workload_file(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_bytes(
        orjson.dumps(
            {
                "name": "from-file",
                "steps": [
                    {"op": "create"},
                    {"op": "commit", "writes": [{"set": ["op-1", "ns", "k", {"a": 1}]}]},
                    {
                        "op": "commit",
                        "writes": [{"retire": "op-1"}, {"entry": ["e", None, "m", {}]}],
                    },
                ],
            }
        )
    )
    done = run_cli("crash", "--workload", str(path), "--json", "--failures-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = orjson.loads(done.stdout)
    assert data["workloads"][0]["name"] == "from-file"
    assert data["states"] == data["workloads"][0]["states"] > 100
    assert data["failures"] == 0 and data["states_per_second"] > 0


@pytest.mark.rule("CRASH-14")
def test_cli_mistakes_exit_2(tmp_path: Path) -> None:
    assert run_cli("crash", "--workload", "no-such-workload").returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    done = run_cli("crash", "--replay", str(bad))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.rule("CRASH-14")
def test_reproducer_replays_to_the_same_failure(tmp_path: Path) -> None:
    """A failing crash state of a planted bug is saved, replayed by both ``scopecheck crash
    --replay`` and ``scopecheck replay`` (exit 1 while failing), and passes on the fixed
    backend (exit 0)."""
    from scopecheck.backends.crash_explorers import JsonlCrashExplorer
    from scopecheck.planted.jsonl_crash import NEW

    _, repo = NEW["jsonl-ack-before-fsync"]
    _, records = JsonlCrashExplorer(repo, backend="jsonl-ack-before-fsync").explore(20, 1)
    assert records, "the planted bug was not found"
    record = records[0]
    path = tmp_path / "crash.json"
    path.write_bytes(orjson.dumps(record))
    done = run_cli("crash", "--replay", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "before recovery" in done.stdout and "after recovery" in done.stdout
    assert run_cli("replay", str(path)).returncode == 1
    fixed = tmp_path / "fixed.json"
    fixed.write_bytes(orjson.dumps({**record, "backend": "jsonl"}))
    assert run_cli("replay", str(fixed)).returncode == 0


@pytest.mark.rule("CRASH-14")
def test_sqlite_crash_reproducer_replays_through_scopecheck_replay(tmp_path: Path) -> None:
    """SQLite crash failures found by a Backend's crash explorer (what ``scopecheck fuzz``
    runs) are kind ``crash`` reproducers that ``scopecheck replay`` re-runs (exit 1).  The
    exploration runs until its budget is spent, failures or not; 5 s is ten times what its
    first failures take on an idle machine."""
    from scopecheck.backends.resolve import resolve_backend

    backend = resolve_backend("sqlite-synchronous-off")
    states, records = backend.crash.explore(5, 0)
    assert states > 0 and records and records[0]["kind"] == "crash"
    path = tmp_path / "sqlite-crash.json"
    path.write_bytes(orjson.dumps(records[0]))
    done = run_cli("replay", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
