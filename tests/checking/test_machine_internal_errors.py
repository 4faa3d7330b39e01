"""A machine failure raised by scopecheck's own code is an internal error, never the backend's
failure (INSTALL-19), and an exception the backend raised stays the backend's.

Our code is broken from outside: the reference model's ``snapshot`` replaced by a builtin that
cannot be called so, so the machine's own comparison raises ``TypeError``.  Which code raised
an exception is told by the module of its innermost frame outside the standard library
(:func:`~scopecheck.run.internal.raised_by_us`), checked here on code compiled into modules of
each kind.
"""

from __future__ import annotations

import json
import textwrap
import time
import types
from pathlib import Path

import attrs
import orjson
import pytest

from scopecheck.backends.adapters import load
from scopecheck.models.reference import ReferenceSession
from scopecheck.run.fuzz import SavedFailure, fuzz_backend
from scopecheck.run.internal import EXIT_INTERNAL, raised_by_us
from scopecheck.run.validate import (
    failures_of,
    internal_errors_of,
    machine_settings,
    summary_lines,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
GOOD = f"{ROOT}/examples/good_backend.py:make_backend"

#: The dict example whose commit raises ``TypeError`` in its own code (the backend's bug).
RAISES_IN_COMMIT = """
from scopecheck.examples.good_backend import DictRepository, DictStorage

class Raising(DictStorage):
    def commit(self, writes):
        return len()

class Repository(DictRepository):
    storage_class = Raising

def make_backend(clock):
    return Repository(clock)
"""


def _raised_in(module: str, body: str, tmp_path: Path) -> BaseException:
    """What ``body`` (the body of ``def run()``) raises, run as code of module ``module``."""
    path = tmp_path / f"{module.replace('.', '_')}.py"
    source = "def run():\n" + textwrap.indent(body, "    ") + "\n"
    path.write_text(source, encoding="utf-8")
    namespace = types.ModuleType(module).__dict__
    namespace["json"] = json
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(Exception) as raised:
        namespace["run"]()
    return raised.value


@pytest.mark.rule("INSTALL-19")
def test_whose_code_raised_is_told_by_the_module_of_its_innermost_frame(tmp_path: Path) -> None:
    assert raised_by_us(_raised_in("scopecheck.machines.fake", "len()", tmp_path))
    # the standard library raises for whoever called it: here, our code
    assert raised_by_us(_raised_in("scopecheck.crashsim.fake", "json.loads('{')", tmp_path))
    # the backends scopecheck bundles, and a user's, are never ours
    for backend in ("scopecheck.impl.fake", "scopecheck.examples.fake", "scopecheck_user_1"):
        assert not raised_by_us(_raised_in(backend, "len()", tmp_path)), backend
    # a check's failure, and an error with a code (a backend's answer), are never ours
    assert not raised_by_us(_raised_in("scopecheck.machines.fake", "assert False", tmp_path))
    error = "from scopecheck import usage\nraise usage('closed', 'x')"
    assert not raised_by_us(_raised_in("scopecheck.machines.fake", error, tmp_path))


def _machine(spec: str, tmp_path: Path) -> list[dict[str, object]]:
    loaded = load(spec)
    report = fuzz_backend(
        attrs.evolve(loaded.backend, crash=None), budget=60, seed=0, settings=machine_settings(),
        failures_dir=tmp_path, profile="ci", examples=2, shrink_deadline=time.perf_counter(),
    )  # fmt: skip
    assert report.saved
    return [orjson.loads(Path(path).read_bytes()) for path in report.reproducers]


@pytest.mark.rule("INSTALL-19")
def test_an_exception_the_backend_raised_stays_its_failure(tmp_path: Path) -> None:
    backend = tmp_path / "raising.py"
    backend.write_text(RAISES_IN_COMMIT, encoding="utf-8")
    (record,) = _machine(f"{backend}:make_backend", tmp_path / "f")
    assert record["error"].startswith("TypeError: len()") and "origin" not in record


@pytest.mark.rule("INSTALL-19", "CHECK-9")
def test_our_own_error_in_the_machine_is_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's comparison raising is saved once, marked as ours with where it came from
    and its traceback; ``validate`` lists it as an internal error (exit 4), the machine phase
    incomplete, and never as a failure of the backend."""
    monkeypatch.setattr(ReferenceSession, "snapshot", len)
    (record,) = _machine(GOOD, tmp_path / "fuzz")
    assert record["origin"] == "scopecheck"
    assert str(record["where"]).startswith("scopecheck/machines/storage.py:")
    assert "Traceback" in str(record["traceback"])
    verdict = validate(GOOD, budget=30, failures_dir=tmp_path / "validate", examples=2)
    assert not verdict.failures
    (error,) = verdict.internal_errors
    assert error.phase == "machine" and error.error.startswith("TypeError: len()")
    assert error.rerun.startswith("scopecheck replay ") and error.traceback_file
    machine = verdict.phases["machine"]
    assert machine.status == "incomplete" and "scopecheck's own error" in machine.detail
    assert verdict.exit_code == EXIT_INTERNAL
    assert any(line.startswith("INTERNAL ERROR (machine)") for line in summary_lines(verdict))
    saved = [SavedFailure(orjson.loads(p.read_bytes()), str(p)) for p in error_files(tmp_path)]
    assert saved and failures_of(saved, "machine") == []
    assert len(internal_errors_of(saved, "machine")) == len(saved)


def error_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "validate").glob("*.json"))


@pytest.mark.rule("INSTALL-19")
def test_fuzz_says_our_own_error_is_ours_and_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scopecheck.cli import main

    monkeypatch.setattr(ReferenceSession, "snapshot", len)
    with pytest.raises(SystemExit) as ended:
        main(["fuzz", "--backend", GOOD, "--budget", "3", "--seed", "1",
              "--failures-dir", str(tmp_path / "f")])  # fmt: skip
    assert ended.value.code == EXIT_INTERNAL
    said = capsys.readouterr().err
    assert "INTERNAL ERROR on " in said and "not the backend's" in said
    assert "\nFailure on " not in said
