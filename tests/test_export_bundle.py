"""``scopecheck replay FILE --export DIR`` (INSTALL-24): a bundle of one crash failure that its
``reproduce.py`` reopens with the backend alone, in a venv holding nothing but Python.

The backends are real: the Node example with a bug planted in how it *reads* (``--strict-tail``:
a torn last line refused as corrupt), so the bundle's own image shows the fix -- exit 1, then
0 with the fixed command; and planted Python bugs (a write left unsynced, a recovery that
renames an unsynced rewrite over the log), whose images keep showing the loss.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh venv without pip or anything else: what a store's maintainer has."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    probe = subprocess.run([python, "-c", "import scopecheck"], capture_output=True)
    assert probe.returncode != 0, "the bare venv can import scopecheck"
    return python


@pytest.mark.rule("INSTALL-24", "CRASH-FS-1", "CRASH-SYS-9")
def test_a_node_backend_s_bundle_shows_the_loss_with_python_alone_and_not_after_the_fix(
    tmp_path: Path, bare_python: str
) -> None:
    if shutil.which("node") is None:
        pytest.skip("NO NODE: the Node example cannot run here")
    found = explore("node", [*NODE, "--strict-tail"], str(ROOT), budget=5, seed=0, faults=False)
    torn = [f for f in found.failures if f.variant.startswith("torn")]
    assert torn, [str(f) for f in found.failures]
    bundle, output, status = _export(torn[0].to_json(), tmp_path, "node-bundle")
    assert status == 1, output
    assert "the loss shows (CRASH-FS-1)" in output and "corrupt" in output, output
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

    script = str(bundle / "reproduce.py")
    still = subprocess.run([bare_python, script], capture_output=True, text=True, timeout=120)
    assert still.returncode == 1, still.stdout + still.stderr
    fixed = subprocess.run(
        [bare_python, script, "--command", " ".join(NODE)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "no longer shows" in fixed.stdout
    (bundle / "stderr.txt").unlink()
    assert _digest(bundle) == before, "reproduce.py changed the bundle"


@pytest.mark.rule("INSTALL-24", "CRASH-FS-6", "CRASH-FS-5")
@pytest.mark.parametrize(
    ("planted", "run"),
    [("fs-append-without-fsync", "crash"), ("fs-recovery-truncate-unsynced", "recovery")],
)
def test_a_planted_python_bug_s_bundle_shows_the_loss(
    planted: str, run: str, tmp_path: Path
) -> None:
    """A Python factory's bundle reopens through ``python -m scopecheck serve SPEC``; a crash
    during recovery bundles both stages."""
    factory = getattr(fs_crash, fs_crash.PLANTED[planted][0])
    found = explore_factory(factory, budget=30, seed=0, max_failures=1)
    failures = [f for f in found.failures if f.run == run]
    assert failures, [str(f) for f in found.failures]
    record = failures[0].to_json()
    record["target"] = {**record["target"], "spec": fs_crash.spec_of(planted)}
    bundle, output, status = _export(record, tmp_path, "bundle")
    assert status == 1, output
    assert f"the loss shows ({failures[0].rule})" in output, output
    assert (bundle / "image").is_dir()
    assert (bundle / "image-before-recovery").is_dir() == (run == "recovery")
    if run == "recovery":
        assert "crashed during its recovery" in (bundle / "README.md").read_text()
        assert "then the backend reopened that image" in (bundle / "trace.txt").read_text()
    again = subprocess.run(
        [sys.executable, str(bundle / "reproduce.py")], capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 1, again.stdout + again.stderr


@pytest.mark.rule("INSTALL-24")
def test_export_refuses_what_it_cannot_bundle_and_writes_nothing(tmp_path: Path) -> None:
    fault = {"kind": "crash", "version": 3, "source": "fs", "backend": "b", "rule": "CRASH-FS-9",
             "error": "e", "run": "fault", "failure_kind": "k", "seed": 0, "workload": None,
             "point": 1, "variant": "fault:eio", "target": {"spec": "x:y"}}  # fmt: skip
    machine = {"kind": "machine", "backend": "memory", "seed": 0}
    for name, record in (("fault", fault), ("machine", machine)):
        bundle, output, status = _export(record, tmp_path, name)
        assert status == 2 and "scopecheck: error:" in output and "Traceback" not in output
        assert not bundle.exists()
    existing = tmp_path / "there"
    existing.mkdir()
    (existing / "mine.txt").write_text("kept")
    saved = tmp_path / "fault.json"
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
