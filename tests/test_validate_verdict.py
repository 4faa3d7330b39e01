"""The verdict of ``scopecheck validate`` says precisely what ran: one value rendered three
ways, top-level figures that cannot disagree with the phases, stdout that is JSON alone, a
budget that is wall time, repeatable work, required phases, and one line for a bad backend
(INSTALL-10..16)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from scopecheck.run.validate import (
    PHASES,
    VERSION,
    Failure,
    PhaseReport,
    Verdict,
    here,
    summary_lines,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]
GOOD = f"{ROOT}/examples/good_backend.py:make_backend"
BROKEN = f"{ROOT}/examples/broken_backend.py:make_backend"
TWO_BUGS = f"{ROOT}/tests/data/two_bugs_backend.py:make_backend"
SCHEMA = ROOT / "scopecheck" / "schemas" / "verdict.schema.json"


def cli(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=cwd, env=env,
    )  # fmt: skip


def _conforms(value: Any, schema: dict[str, Any], defs: dict[str, Any], at: str = "$") -> None:
    """The subset of JSON Schema the verdict's schema uses (type, const, enum, required,
    properties, additionalProperties, items, $ref): enough to hold the output to it without
    a validator library."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
             "integer": int, "number": (int, float)}  # fmt: skip
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(value, kinds[t]) and not (t in ("integer", "number")
                 and isinstance(value, bool)) for t in types)  # fmt: skip
        assert ok, f"{at}: {value!r} is not {types}"
    if "const" in schema:
        assert value == schema["const"], at
    if "enum" in schema:
        assert value in schema["enum"], f"{at}: {value!r} not in {schema['enum']}"
    if isinstance(value, dict):
        assert set(schema.get("required", ())) <= set(value), f"{at}: missing keys"
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                _conforms(item, properties[key], defs, f"{at}.{key}")
            else:
                assert extra is not False, f"{at}: unexpected key {key!r}"
                if isinstance(extra, dict):
                    _conforms(item, extra, defs, f"{at}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _conforms(item, schema["items"], defs, f"{at}[{index}]")


def agrees(data: dict[str, Any]) -> None:
    """The verdict's JSON holds to its schema and every top-level figure is its phases'."""
    schema = json.loads(SCHEMA.read_text())
    _conforms(data, schema, schema["$defs"])
    phases = data["phases"]
    crash = phases["crash exploration"]
    assert data["version"] == VERSION
    assert list(phases) == list(PHASES)
    assert data["machine_steps"] == phases["machine"].get("steps", 0)
    assert data["conformance_tests"] == phases["conformance"].get("cases", 0)
    assert data["crash_states"] == crash.get("crash_states", 0)
    assert data["crash_fault_runs"] == crash.get("crash_fault_runs", 0)
    assert data["kill_runs"] == crash.get("kill_runs", 0)
    expected = f"skipped ({crash['detail']})" if crash["status"] == "skipped" else crash["status"]
    assert data["crash_exploration"] == expected
    statuses = {phase["status"] for phase in phases.values()}
    assert data["complete"] == ("incomplete" not in statuses)
    assert data["passed"] == (not data["failures"] and data["complete"] and not data["unmet"])
    failed = {f["phase"] for f in data["failures"]}
    assert all(phases[name]["status"] == "failed" for name in failed), (failed, statuses)
    outcome = "failed" if data["failures"] or data["unmet"] else (
        "passed" if data["complete"] else "incomplete")  # fmt: skip
    assert data["outcome"] == outcome


def _verdict(crash: PhaseReport, *, failures: tuple[Failure, ...] = (), **kw: Any) -> Verdict:
    phases = {
        "machine": PhaseReport("ran", "10 steps, 1 examples", {"steps": 10, "examples": 1}),
        "forks": PhaseReport("skipped", "the repository has no fork()"),
        "crash exploration": crash,
        "conformance": PhaseReport("ran", "58 cases", {"cases": 58, "failed": 0, "skipped": 0}),
        "restarts": PhaseReport("ran", "3 restarts", {"restarts": 3, "handle_reopens": 0}),
    }
    return Verdict("b", phases, failures, **kw)


@pytest.mark.rule("INSTALL-10", "INSTALL-13")
@pytest.mark.parametrize(
    "case",
    ["passing", "failing", "skipped", "incomplete", "required-skipped"],
)
def test_top_level_figures_are_computed_from_the_phases(case: str) -> None:
    """Passing, failing, skipped and incomplete verdicts: the JSON's top-level figures are
    the phases', and the summary's lines say the same."""
    ran = PhaseReport(
        "ran", "7 crash states", {"crash_states": 7, "crash_fault_runs": 3, "kill_runs": 2}
    )
    failure = Failure("crash exploration", "CRASH-FS-6", "lost a commit", "scopecheck replay f")
    verdict = {
        "passing": _verdict(ran),
        "failing": _verdict(attrs_evolve(ran, status="failed"), failures=(failure,)),
        "skipped": _verdict(PhaseReport("skipped", "strace is not installed")),
        "incomplete": _verdict(attrs_evolve(ran, status="incomplete")),
        "required-skipped": _verdict(
            PhaseReport("skipped", "strace is not installed"), required=("crash exploration",)
        ),
    }[case]
    data = orjson.loads(orjson.dumps(verdict.as_json()))
    agrees(data)
    assert data["outcome"] == {"passing": "passed", "skipped": "passed",
                               "incomplete": "incomplete"}.get(case, "failed")  # fmt: skip
    lines = summary_lines(verdict)
    assert lines[0].split()[0] == data["outcome"].upper()
    crash_line = next(line for line in lines if line.startswith("  crash exploration:"))
    assert data["phases"]["crash exploration"]["detail"] in crash_line
    if case == "required-skipped":
        assert data["unmet"] == ["crash"]
        assert any(line.startswith("REQUIRED crash exploration was skipped") for line in lines)


def attrs_evolve(report: PhaseReport, **changes: Any) -> PhaseReport:
    import attrs

    return attrs.evolve(report, **changes)


@pytest.mark.rule("INSTALL-10", "INSTALL-11")
def test_json_is_the_verdict_alone_when_the_machine_finds_a_failure(tmp_path: Path) -> None:
    """A real ``--json`` run on the broken example: stdout parses as one JSON object that
    agrees with itself, whatever Hypothesis reported while it shrank."""
    args = ("--budget", "10", "--examples", "150", "--json", "--failures-dir", str(tmp_path))
    result = cli("validate", BROKEN, *args)
    assert result.returncode == 1, result.stderr[-2000:]
    data = orjson.loads(result.stdout)  # nothing but the object
    agrees(data)
    assert data["phases"]["machine"]["status"] == "failed" and data["outcome"] == "failed"
    assert any(f["phase"] == "machine" and f["program"] for f in data["failures"])


@pytest.mark.rule("INSTALL-11")
def test_shrinking_stops_at_the_deadline_and_the_failure_says_it_is_unshrunk(
    tmp_path: Path,
) -> None:
    """With the deadline already past, Hypothesis stops shrinking at once: the failure is
    saved as found, marked unshrunk, and the summary says so."""
    from scopecheck.backends.adapters import load_backend
    from scopecheck.run.fuzz import fuzz_backend
    from scopecheck.run.validate import failures_of, machine_settings

    report = fuzz_backend(
        load_backend(BROKEN), budget=60, seed=0, settings=machine_settings(),
        failures_dir=tmp_path, profile="ci", examples=200, shrink_deadline=time.perf_counter(),
    )  # fmt: skip
    assert report.reproducers
    for saved in report.reproducers:
        record = orjson.loads(Path(saved).read_bytes())
        assert record["shrunk"] is False and record["reproduce"] is not None
    failure = failures_of(report.saved, "machine")[0]
    verdict = _verdict(PhaseReport("skipped", "no fs"), failures=(failure,))
    assert "  steps (not shrunk: the budget was spent):" in summary_lines(verdict)


@pytest.mark.long
@pytest.mark.rule("INSTALL-12")
def test_the_same_seed_and_examples_do_the_same_work(tmp_path: Path) -> None:
    """The dict example, twice with the same seed and examples.  Long: the default run checks
    the same on the file example (tests/test_validate_fixed_work.py), whose runs add crash
    exploration to the machine, restarts and examples compared here."""
    first = validate(GOOD, budget=30, failures_dir=tmp_path, seed=3, examples=12)
    second = validate(GOOD, budget=30, failures_dir=tmp_path, seed=3, examples=12)
    assert first.passed and second.passed, (first.failures, second.failures)
    assert first.phases["machine"].counts["examples"] == 12
    assert first.machine_steps == second.machine_steps > 0
    assert first.phases["restarts"].counts == second.phases["restarts"].counts


@pytest.mark.rule("INSTALL-13")
def test_require_turns_a_skipped_phase_into_a_failure(tmp_path: Path) -> None:
    """The dict example has no fork(): ``--require forks`` fails the run with one line
    saying so; an unknown phase name is a command-line mistake."""
    args = ("validate", GOOD, "--budget", "3", "--examples", "2", "--failures-dir", str(tmp_path))
    result = cli(*args, "--require", "forks")
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("REQUIRED")]
    assert line.startswith("REQUIRED forks was skipped (the repository has no fork())")
    assert result.stdout.startswith("FAILED good_backend, 1 required phases did not run")
    wrong = cli(*args, "--require", "forks,crashes")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "unknown phase 'crashes'" in wrong.stderr


@pytest.mark.rule("INSTALL-14")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("tests/data/not_a_repository.py:make_backend",), "not_a_repository"),
        (("--exec", "no-such-backend-program --flag"), "command_not_found"),
        (("--exec", "./examples/no/backend"), "command_not_found"),
        (("--exec", "tests/data/not_a_repository.py"), "command_not_executable"),
    ],
)
def test_a_backend_that_cannot_be_checked_is_one_line_with_its_code(
    args: tuple[str, ...], code: str
) -> None:
    assert not os.access(ROOT / "tests/data/not_a_repository.py", os.X_OK)
    result = cli("validate", *args, "--budget", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"scopecheck: error: {code}: "), result.stderr
    assert result.stdout == ""


#: The machine examples each README sample runs with: the broken example fails in the first ten.
SAMPLE_EXAMPLES = 10


def _samples() -> list[tuple[str, list[str]]]:
    """The README's ``text`` samples of ``scopecheck validate`` on a Python example:
    ``(command, output lines)``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        lines = block.splitlines()
        command = lines[0].removeprefix("$ ")
        if lines[0].startswith("$ scopecheck validate examples/"):
            found.append((command, lines[1:]))
    return found


def _shape(line: str) -> str:
    """A line with its numbers and its timing made placeholders, and cut where a detail
    starts to depend on the run (coverage, limits)."""
    line = re.sub(r"\(\d+(\.\d+)?s\)", "(Ts)", line.split(";", 1)[0])
    return re.sub(r"\d[\d,]*", "N", line).rstrip()


@pytest.mark.rule("INSTALL-16", "INSTALL-5")
@pytest.mark.parametrize("sample", _samples(), ids=lambda s: s[0].split()[2])
def test_the_readme_validate_samples_have_the_shape_of_real_runs(
    sample: tuple[str, list[str]], tmp_path: Path
) -> None:
    """The sample's headline and phase lines, numbers aside, are the real run's, and the run
    leaves nothing in its temporary directory.  The sample's command runs with ``--examples``
    added: fixed work (each machine's examples, crash exploration's one workload) instead of
    filling the wall budget, so the run takes the same work on a loaded machine and its crash
    exploration is never cut short (incomplete); the phase lines have the shape they have
    under a budget."""
    command, expected = sample
    args = shlex.split(command)[1:]
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = cli(
        *args, "--examples", str(SAMPLE_EXAMPLES), "--failures-dir", str(tmp_path / "failures"),
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )  # fmt: skip
    assert sorted(os.listdir(tmpdir)) == [], result.stdout + result.stderr
    real = [_shape(line) for line in result.stdout.splitlines()]
    shown = [line for line in expected if line.startswith(("PASSED", "FAILED", "  "))]
    for line in shown:
        if line.strip() == "...":
            continue
        if line.startswith(("PASSED", "FAILED")):
            assert _shape(line).split(",")[0] == real[0].split(",")[0], (line, real[0])
        elif line.split(":", 1)[0].strip() in PHASES:
            name = line.split(":", 1)[0]
            actual = next(x for x in real if x.startswith(name + ":"))
            assert actual == _shape(line), (line, result.stdout)


def _records(paths: list[str]) -> list[dict[str, Any]]:
    return [orjson.loads(Path(path).read_bytes()) for path in paths]


@pytest.mark.rule("INSTALL-17", "INSTALL-7")
def test_each_distinct_machine_failure_is_a_reproducer_that_replays_exactly(
    tmp_path: Path,
) -> None:
    """Two independent bugs make two distinct failures: each is its own reproducer with its
    own error, program and choice sequence, listed as its own failure, and its replay runs that
    sequence alone -- one example on the first try, nothing generated, nothing shrunk -- and
    fails the same way."""
    from hypothesis import Phase

    from scopecheck.backends.adapters import load_backend
    from scopecheck.run.fuzz import fuzz_backend
    from scopecheck.run.replay import replay_machine
    from scopecheck.run.validate import failures_of, machine_settings

    report = fuzz_backend(
        load_backend(TWO_BUGS), budget=120, seed=0, settings=machine_settings(),
        failures_dir=tmp_path, profile="ci", spec=TWO_BUGS, examples=100,
    )  # fmt: skip
    records = _records(report.reproducers)
    errors = {record["error"].split(":", 1)[0] for record in records}
    assert {"LookupError", "MismatchError"} <= errors, [r["error"] for r in records]
    assert report.failures == len(records) == len(set(report.reproducers))
    assert len({tuple(record["reproduce"]) for record in records}) == len(records)
    failures = failures_of(report.saved, "machine")
    assert [f.reproducer for f in failures] == [
        f"scopecheck replay {path}" for path in report.reproducers
    ]
    for record in records:
        assert record["reproduce"] is not None and "state." in record["program"], record
        assert "distinct failures" not in record["error"]
        replayed = replay_machine(record)
        assert replayed.reproduced and replayed.exact, replayed.text
        assert replayed.phases == (Phase.explicit,)
        assert (replayed.tries, replayed.examples) == (1, 1), replayed
        assert record["error"].splitlines()[0] in replayed.text


@pytest.mark.rule("INSTALL-17")
def test_a_replay_that_does_not_fail_could_not_reproduce_and_is_never_fixed(
    tmp_path: Path,
) -> None:
    """The recorded choice sequence run against the good example: it cannot fail there, so
    ``scopecheck replay`` says it could not reproduce it in its tries (exit 3), never that the
    bug is fixed; each try ran the recorded example alone."""
    from scopecheck.backends.adapters import load_backend
    from scopecheck.run.fuzz import fuzz_backend
    from scopecheck.run.replay import REPLAY_TRIES, replay_machine
    from scopecheck.run.validate import machine_settings

    report = fuzz_backend(
        load_backend(BROKEN), budget=60, seed=0, settings=machine_settings(),
        failures_dir=tmp_path, profile="ci", spec=BROKEN, examples=100,
    )  # fmt: skip
    record = _records(report.reproducers)[0]
    moved = tmp_path / "against-good.json"
    moved.write_bytes(orjson.dumps({**record, "spec": GOOD}))
    replayed = replay_machine({**record, "spec": GOOD})
    assert not replayed.reproduced and replayed.exact
    assert replayed.tries == replayed.examples == REPLAY_TRIES
    result = cli("replay", str(moved))
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"could not reproduce in {REPLAY_TRIES} tries" in result.stdout
    assert "Not reproduced" in result.stdout and "Fixed" not in result.stdout


@pytest.mark.rule("INSTALL-18")
def test_a_message_names_a_file_under_the_root_relative_to_it(tmp_path: Path) -> None:
    """A planted bug that leaves a temp file (HYGIENE-1): every example's world has a fresh
    directory, yet two runs of the same failure save the same message, naming the root as
    ``<root>``."""
    from scopecheck.planted import all_mutants
    from scopecheck.run.fuzz import fuzz_backend
    from scopecheck.run.validate import machine_settings

    (mutant,) = [m for m in all_mutants() if m.name == "jsonl-publish-leaves-temp"]
    errors = []
    for run in ("first", "second"):
        report = fuzz_backend(
            mutant.make(), budget=60, seed=0, settings=machine_settings(),
            failures_dir=tmp_path / run, profile="ci", examples=50,
        )  # fmt: skip
        errors.append([record["error"] for record in _records(report.reproducers)])
    assert errors[0] == errors[1] and errors[0], errors
    assert any("HYGIENE-1" in error and "under <root> " in error for error in errors[0])
    assert not any("scopecheck-jsonl-" in error for error in errors[0]), errors


@pytest.mark.rule("INSTALL-18", "INSTALL-10")
def test_the_verdict_lists_each_limit_once() -> None:
    """A limit said by every round of crash exploration is one limit, in the JSON and the
    crash phase's figures alike."""
    said = "mmap: <root>/s.db-shm is mapped shared and writable"
    verdict = _verdict(PhaseReport("ran", "7 crash states"), limits=(said, "fault: x", said))
    assert verdict.limits == (said, "fault: x")
    assert verdict.as_json()["limits"] == [said, "fault: x"]


@pytest.mark.rule("INSTALL-23")
def test_a_rerun_line_names_files_under_the_working_directory_relative_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's ``rerun:`` line is copied where the user ran ``validate``: a reproducer
    under that folder is written relative to it, one elsewhere stays absolute, and a command
    that is not shell words is shown as it is."""
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / ".scopecheck" / "failures" / "my store-1.json"
    assert here(f"scopecheck replay {shlex.quote(str(saved))}") == (
        "scopecheck replay '.scopecheck/failures/my store-1.json'"
    )
    elsewhere = "scopecheck replay /elsewhere/x.json"
    assert here(elsewhere) == elsewhere
    assert here(f"pytest --rootdir={tmp_path} 'a::b'") == f"pytest --rootdir={tmp_path} 'a::b'"
    assert here("scopecheck replay 'unclosed") == "scopecheck replay 'unclosed"
