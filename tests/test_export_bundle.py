"""``scopecheck replay FILE --export DIR`` (INSTALL-24): a bundle of one crash failure that its
``reproduce.py`` reopens with the backend alone, in a venv holding nothing but Python.

The backends are real: the Node and Go examples with a bug planted in how they *read*
(``--strict-tail``: a torn last line refused as corrupt), so the bundle's own image shows the
fix -- exit 1, then 0 with the fixed command; planted Python bugs (a write left unsynced, a
recovery that renames an unsynced rewrite over the log), whose images keep showing the loss;
and fault and kill runs, rerun for the image they leave.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from scopecheck.crashsim.generic_sweep import explore as explore_factory
from scopecheck.planted import fs_crash
from scopecheck.process.syscall_crash import explore

ROOT = Path(__file__).resolve().parents[1]
NODE = ["node", str(ROOT / "examples" / "node" / "backend.js")]


def _digest(folder: Path) -> str:
    found = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        found.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            found.update(path.read_bytes())
    return found.hexdigest()


def _export(record: dict[str, object], tmp_path: Path, name: str) -> tuple[Path, str, int]:
    saved = tmp_path / f"{name}.json"
    saved.write_bytes(orjson.dumps(record))
    bundle = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "scopecheck", "replay", str(saved), "--export", str(bundle)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    return bundle, done.stdout + done.stderr, done.returncode


def _reproduce(python: str, bundle: Path, *args: str) -> tuple[int, str]:
    """The bundle's ``reproduce.py`` run by ``python`` as its user runs it: status, output."""
    done = subprocess.run(
        [python, str(bundle / "reproduce.py"), *args], capture_output=True, text=True,
        timeout=120, cwd=bundle.parent,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.mark.rule("INSTALL-24", "CRASH-FS-1", "CRASH-SYS-9")
@pytest.mark.parametrize("runtime", ["node", "go"])
def test_a_process_backend_s_bundle_shows_the_loss_with_python_alone_and_not_after_the_fix(
    runtime: str, tmp_path: Path, bare_python: str, request: pytest.FixtureRequest
) -> None:
    """A budget of one second is enough: the first pass over the crash points after every
    acknowledgement runs to its end whatever the budget (CRASH-COV-2), and a commit's append
    torn there is the planted bug's first failure."""
    if runtime == "node" and shutil.which("node") is None:
        pytest.skip("NO NODE: the Node example cannot run here")
    command = NODE if runtime == "node" else [str(request.getfixturevalue("go_backend"))]
    found = explore(runtime, [*command, "--strict-tail"], str(ROOT), budget=1, seed=0,
                    faults=False)  # fmt: skip
    torn = [f for f in found.failures if f.variant.startswith("torn")]
    assert torn, [str(f) for f in found.failures]
    bundle, output, status = _export(torn[0].to_json(), tmp_path, f"{runtime}-bundle")
    assert status == 1, output
    assert "the failure shows (CRASH-FS-1)" in output and "corrupt" in output, output
    names = {path.name for path in bundle.iterdir()}
    assert names == {"image", "trace.txt", "expected.json", "actual.json", "reproduce.py",
                     "bundle.json", "README.md"}, names  # fmt: skip
    assert not (bundle / "image" / "s.log").read_bytes().endswith(b"\n")  # a torn last line
    trace = (bundle / "trace.txt").read_text()
    assert ">> the crash (torn" in trace and "acknowledged" in trace and "s.log:" in trace
    expected = orjson.loads((bundle / "expected.json").read_bytes())
    assert expected["rule"] == "CRASH-FS-1" and expected["allowed"], expected
    assert all(set(state) == {"entries", "usage", "values", "lists", "stats"}
               for state in expected["allowed"] if state is not None)  # fmt: skip
    actual = orjson.loads((bundle / "actual.json").read_bytes())
    assert "corrupt" in actual["error"], actual
    readme = (bundle / "README.md").read_text()
    assert "CRASH-FS-1" in readme and "python reproduce.py" in readme and "replay" in readme
    before = _digest(bundle)

    status, said = _reproduce(bare_python, bundle)
    assert status == 1, said
    status, said = _reproduce(bare_python, bundle, "--command", shlex.join(command))
    assert status == 0, said
    assert "no longer shows" in said
    (bundle / "stderr.txt").unlink()
    assert _digest(bundle) == before, "reproduce.py changed the bundle"


@pytest.mark.rule("INSTALL-24", "CRASH-FS-6", "CRASH-FS-5")
@pytest.mark.parametrize(
    ("planted", "run"),
    [("fs-append-without-fsync", "crash"), ("fs-recovery-truncate-unsynced", "recovery")],
)
def test_a_planted_python_bug_s_bundle_shows_the_loss(
    planted: str, run: str, tmp_path: Path, bare_python: str
) -> None:
    """A Python factory's bundle reopens through ``python -m scopecheck serve SPEC`` under the
    Python that made it, whatever Python runs its script; a crash during recovery bundles
    both stages."""
    factory = getattr(fs_crash, fs_crash.PLANTED[planted][0])
    found = explore_factory(factory, budget=30, seed=0, max_failures=1)
    failures = [f for f in found.failures if f.run == run]
    assert failures, [str(f) for f in found.failures]
    record = failures[0].to_json()
    record["target"] = {**record["target"], "spec": fs_crash.spec_of(planted)}
    bundle, output, status = _export(record, tmp_path, "bundle")
    assert status == 1, output
    assert f"the failure shows ({failures[0].rule})" in output, output
    assert (bundle / "image").is_dir()
    assert (bundle / "image-before-recovery").is_dir() == (run == "recovery")
    if run == "recovery":
        assert "crashed during its recovery" in (bundle / "README.md").read_text()
        assert "then the backend reopened that image" in (bundle / "trace.txt").read_text()
    status, said = _reproduce(bare_python, bundle)
    assert status == 1, said
    status, said = _reproduce(bare_python, bundle, "--python", bare_python)
    assert status == 2, said  # that Python has no scopecheck
    assert "could not judge" in said, said


@pytest.mark.rule("INSTALL-24")
def test_export_refuses_what_it_cannot_bundle_and_writes_nothing(tmp_path: Path) -> None:
    workload = {"kind": "crash", "version": 3, "source": "fs", "backend": "b",
                "rule": "CRASH-FS-7", "error": "e", "run": "workload", "failure_kind": "k",
                "seed": 0, "workload": None, "target": {"spec": "x:y"}}  # fmt: skip
    machine = {"kind": "machine", "backend": "memory", "seed": 0}
    for name, record in (("workload", workload), ("machine", machine)):
        bundle, output, status = _export(record, tmp_path, name)
        assert status == 2 and "scopecheck: error:" in output and "Traceback" not in output
        assert not bundle.exists()
    existing = tmp_path / "there"
    existing.mkdir()
    (existing / "mine.txt").write_text("kept")
    saved = tmp_path / "workload.json"
    done = subprocess.run(
        [sys.executable, "-m", "scopecheck", "replay", str(saved), "--export", str(existing)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "exists" in done.stderr and "Traceback" not in done.stderr
    assert [p.name for p in existing.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.rule("INSTALL-25", "INSTALL-24")
def test_the_plugin_names_the_reproducer_bundle_and_report_in_the_text_and_junit(
    tmp_path: Path,
) -> None:
    """A failing crash test says where its reproducer, its bundle and the run's report went,
    and gives each as a JUnit property, so a CI job can keep them as artifacts."""
    import xml.etree.ElementTree as ET

    artifacts = tmp_path / "artifacts"
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--scopecheck-backend={ROOT}/examples/broken_file_backend.py:make_backend",
         f"--scopecheck-artifacts={artifacts}", f"--junitxml={junit}",
         "--pyargs", "scopecheck.conformance.test_crash", "-k", "crash_state and 0"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    properties: dict[str, list[str]] = {}
    for prop in ET.parse(junit).iter("property"):
        properties.setdefault(prop.get("name", ""), []).append(prop.get("value", ""))
    reproducers = properties["scopecheck_reproducer"]
    bundles = properties["scopecheck_bundle"]
    (report,) = set(properties["scopecheck_report"])
    assert all(Path(path).is_file() for path in reproducers), reproducers
    assert all((Path(path) / "reproduce.py").is_file() for path in bundles), bundles
    assert Path(report).is_file() and Path(report).parent == artifacts
    for name in (*reproducers, *bundles, report):
        assert name in done.stdout, name
    assert f"report: {report}" in done.stdout
    status = subprocess.run(
        [sys.executable, f"{bundles[0]}/reproduce.py"], capture_output=True, timeout=120
    ).returncode
    assert status == 1


@pytest.mark.rule("INSTALL-24", "CRASH-FS-9", "CRASH-COV-5")
def test_a_fault_run_s_bundle_holds_the_disk_it_left_and_shows_the_failure(
    tmp_path: Path, bare_python: str
) -> None:
    """A fault run is rerun for its image: the Node example's failed append left in the log
    (``--no-cut-back``, a short write under the FUSE fault mount) makes the disk unopenable;
    the bundle's image is that disk, and Python alone shows it -- and keeps showing it with the
    fixed command, whose fix is in how it *writes*: this image stays as the bug left it."""
    if shutil.which("node") is None:
        pytest.skip("NO NODE: the Node example cannot run here")
    record = orjson.loads((ROOT / "tests" / "data" / "node-no-cut-back-fault.json").read_bytes())
    record["target"] = {**record["target"], "cwd": str(ROOT)}
    bundle, output, status = _export(record, tmp_path, "fault-bundle")
    if "cannot rerun it" in output:
        pytest.skip(f"the fault cannot be injected here: {output}")
    assert status == 1, output
    assert "the failure shows (CRASH-FS-9)" in output and "corrupt" in output, output
    trace = (bundle / "trace.txt").read_text()
    assert "fault run: fuse=write:ENOSPC" in trace and "stored 146 of its 292 bytes" in trace
    assert "the image is the disk as the run left it" in trace and "acknowledged" in trace
    log = (bundle / "image" / "s.log").read_bytes()
    assert len(log) == 146 + 177 and log.count(b"\n") == 1, log  # the torn line, then the next
    settings = orjson.loads((bundle / "bundle.json").read_bytes())
    assert settings["probe"] is False and "unjudged" not in settings
    expected = orjson.loads((bundle / "expected.json").read_bytes())
    assert expected["after"].startswith("the run with fuse=write:ENOSPC"), expected
    status, said = _reproduce(bare_python, bundle)
    assert status == 1, said
    fixed, said = _reproduce(bare_python, bundle, "--command", " ".join(NODE))
    assert fixed == 1 and "corrupt" in said, said
    # the fixed build's own run cuts the failed append back: nothing fails, nothing exported
    record["target"] = {**record["target"], "command": ["node", "examples/node/backend.js"]}
    gone, output, status = _export(record, tmp_path, "fixed-bundle")
    assert status == 3 and "nothing exported" in output and "Traceback" not in output, output
    assert not gone.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.rule("INSTALL-24", "CRASH-FS-9", "CRASH-FS-10", "CRASH-SYS-11")
def test_a_planted_fault_bug_s_bundle_shows_its_power_loss_or_says_it_cannot(
    tmp_path: Path,
) -> None:
    """A fault found through a factory's ``FileSystem`` calls: an fsync retried after EIO and
    acknowledged (the power-loss image loses the commit, CRASH-SYS-11) is shown by the bundle
    with what the power loss lost; a failed append left in the log, whose next reopen raises
    a bare ``JSONDecodeError`` inside the run (CRASH-FS-10), is a failure in what the run
    answered, so its bundle holds the disk and says its reproduce.py cannot judge it."""
    found: dict[str, dict[str, object]] = {}
    for planted in ("fs-fsync-retry-after-eio", "fs-failed-append-not-cut-back"):
        factory = getattr(fs_crash, fs_crash.PLANTED[planted][0])
        result = explore_factory(factory, budget=3, seed=0, max_failures=3)
        faults = [f for f in result.failures if f.run == "fault"]
        assert faults, [str(f) for f in result.failures]
        record = faults[0].to_json()
        record["target"] = {**record["target"], "spec": fs_crash.spec_of(planted)}
        found[planted] = record
    bundle, output, status = _export(found["fs-fsync-retry-after-eio"], tmp_path, "power")
    assert status == 1 and "the failure shows (CRASH-FS-9)" in output, output
    trace = (bundle / "trace.txt").read_text()
    assert "syncfail s.log" in trace and "the image is a power loss" in trace, trace
    assert "s.log: 0 of its 182 bytes kept, the rest lost" in trace, trace
    assert "a power loss" in (bundle / "README.md").read_text()

    bundle, output, status = _export(found["fs-failed-append-not-cut-back"], tmp_path, "run")
    assert status == 1, output  # the rerun failed again: confirmed, though no reopen shows it
    assert "could not judge" in output and "scopecheck replay" in output, output
    assert (bundle / "image" / "s.log").is_file()
    assert "what the run's own steps answered" in (bundle / "README.md").read_text()


@pytest.mark.rule("INSTALL-24", "CRASH-FS-1")
def test_a_kill_run_s_bundle_shows_its_power_loss_with_python_alone_and_not_after_the_fix(
    tmp_path: Path, bare_python: str
) -> None:
    """A kill run (SIGKILL at the third fsync, through strace) of the Node example that
    refuses a torn last line (``--strict-tail``), as its exploration found it: a power loss
    right after the kill tears the unsynced append, and the bundle's image is that power
    loss.  The bug is in reading, so the fixed command opens the same image (exit 0)."""
    if shutil.which("node") is None:
        pytest.skip("NO NODE: the Node example cannot run here")
    record = orjson.loads((ROOT / "tests" / "data" / "node-strict-tail-kill.json").read_bytes())
    record["target"] = {**record["target"], "cwd": str(ROOT)}
    bundle, output, status = _export(record, tmp_path, "kill-bundle")
    if "cannot rerun it" in output:
        pytest.skip(f"the kill cannot be injected here: {output}")
    assert status == 1, output
    assert "the failure shows (CRASH-FS-1)" in output and "torn line" in output, output
    trace = (bundle / "trace.txt").read_text()
    assert "kill run: fsync:signal=SIGKILL:when=3" in trace and "killed by SIGKILL" in trace
    assert "the image is a power loss" in trace and "s.log: " in trace, trace
    assert not (bundle / "image" / "s.log").read_bytes().endswith(b"\n")  # the torn append
    status, said = _reproduce(bare_python, bundle)
    assert status == 1, said
    fixed, said = _reproduce(bare_python, bundle, "--command", " ".join(NODE))
    assert fixed == 0 and "no longer shows" in said, said


@pytest.mark.rule("INSTALL-21", "INSTALL-24")
def test_an_export_stopped_by_sigterm_leaves_nothing_behind(tmp_path: Path) -> None:
    """SIGTERM while the export reruns a kill run: the command says it was stopped, and no
    folder of ours is left -- not the bundle, not its temporary twin, not a scratch folder
    in TMPDIR.  (The reruns' images go to the RAM disk, which other tests share while this
    one runs: that it is left clean too was seen by hand.)"""
    if shutil.which("node") is None:
        pytest.skip("NO NODE: the Node example cannot run here")
    record = orjson.loads((ROOT / "tests" / "data" / "node-strict-tail-kill.json").read_bytes())
    record["target"] = {**record["target"], "cwd": str(ROOT)}
    saved = tmp_path / "kill.json"
    saved.write_bytes(orjson.dumps(record))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-m", "scopecheck", "replay", str(saved), "--export",
         str(tmp_path / "bundle")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    time.sleep(0.3)
    child.send_signal(signal.SIGTERM)
    output, _ = child.communicate(timeout=60)
    if child.returncode != 1:  # not finished before the signal came
        assert child.returncode == 143 and "stopped by SIGTERM" in output, output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kill.json", "tmp"]
    assert list(scratch.iterdir()) == []
