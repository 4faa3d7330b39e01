"""Every planted JSONL bug is caught (BRIEF "Prove each check can fail").

Machine-caught mutants run through the stateful machine with the derandomised ``mutants``
profile (generation only, first failure wins, to keep this file fast).  The two crash-only
mutants are caught here by crash emulations: a fault hook raises :class:`SimulatedCrash` (a
``BaseException``, so nothing swallows it) at the chosen operation, the handle is abandoned and
a fresh repository opens the directory — the real backend passes, the mutant does not.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import Phase, settings

from scopecheck.crashsim.tracing_fs import TracingFileSystem
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import CorruptError
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import append_list, retire_scope, set_value
from scopecheck.planted import CATALOGUE, all_mutants, run_mutant
from scopecheck.planted.jsonl import REPOSITORIES
from scopecheck.run.profiles import get_profile

A = ephemeral_scope("op-A")
JSONL_MUTANTS = all_mutants("jsonl")


class SimulatedCrash(BaseException):
    """The process dies here."""


def test_catalogue_has_the_six_jsonl_mutants() -> None:
    """The six JSONL mistakes the seeds warn about are registered, each described in a line."""
    assert {
        "jsonl-cleanup-deletes-reused",
        "jsonl-high-water-ignores-retired",
        "jsonl-replay-ignores-boundary",
        "jsonl-sidecar-listed",
        "jsonl-torn-tail-kept",
        "jsonl-unlink-before-retire-durable",
    } <= {m.name for m in JSONL_MUTANTS}  # plus the crash-only ones of mutants/jsonl_crash.py
    assert all(m.description and "\n" not in m.description for m in JSONL_MUTANTS)


@pytest.mark.rule("JSONL-8", "JSONL-13", "JSONL-16")
@pytest.mark.parametrize("name", sorted(m.name for m in JSONL_MUTANTS if m.caught_by == "machine"))
def test_machine_catches_jsonl_mutant(name: str) -> None:
    """The stateful machine finds a falsifying program for this planted bug."""
    fast = settings(get_profile("mutants"), phases=[Phase.generate], report_multiple_bugs=False)
    result = run_mutant(CATALOGUE[name], settings=fast)
    assert result.caught, f"{name} survived the machine"


def _crash_at(op: str, path_suffix: str, *, after: int = 0) -> Any:
    seen = {"n": 0}

    def fault(name: str, path: str) -> None:
        if name == op and path.endswith(path_suffix):
            seen["n"] += 1
            if seen["n"] > after:
                raise SimulatedCrash(f"crash before {op} {path}")

    return fault


def _crash_before_retire_append(root: str, repo_class: type[JsonlRepository]) -> None:
    """Scoped data, then a retirement whose main append never happens (crash)."""
    repo = repo_class(
        root, TracingFileSystem(OsFileSystem(), _crash_at("append", ".jsonl")), cwd="/t"
    )
    storage = repo.create("s")
    storage.commit([append_list(value_list("f", "x", A), "frame")])
    with pytest.raises(SimulatedCrash):
        storage.commit([retire_scope(A)])


@pytest.mark.rule("JSONL-9")
def test_crash_before_the_retire_record_is_durable_keeps_scope_live(tmp_path: Any) -> None:
    """Real backend: the uncommitted retirement leaves the frame live after the crash."""
    root = str(tmp_path)
    _crash_before_retire_append(root, JsonlRepository)
    reopened = JsonlRepository(root, cwd="/t").open("s")
    assert [e.value for e in reopened.read_list(value_list("f", "x", A))] == ["frame"]


@pytest.mark.rule("JSONL-9")
def test_crash_emulation_catches_unlink_before_retire_durable(tmp_path: Any) -> None:
    """Mutant: the sidecar was unlinked before the retirement committed, so data is lost."""
    assert CATALOGUE["jsonl-unlink-before-retire-durable"].caught_by == "crash"
    root = str(tmp_path)
    _crash_before_retire_append(root, REPOSITORIES["jsonl-unlink-before-retire-durable"])
    reopened = JsonlRepository(root, cwd="/t").open("s")
    assert reopened.read_list(value_list("f", "x", A)) == ()  # the bug, observed


def _torn_main(root: str) -> None:
    storage = JsonlRepository(root, cwd="/t").create("s")
    storage.commit([set_value(value("v", "k"), 1)])
    with open(os.path.join(root, "s.jsonl"), "ab") as handle:
        handle.write(b'{"kind":"value","op":"set","seq":2,"namespace":"v","key":"k","value":2}')


@pytest.mark.rule("JSONL-18")
def test_crash_emulation_catches_torn_tail_kept(tmp_path: Any) -> None:
    """A torn final line that happens to be complete JSON: the real backend drops it and a
    later commit reopens cleanly; the mutant keeps it and the next append glues onto it."""
    assert CATALOGUE["jsonl-torn-tail-kept"].caught_by == "crash"
    real_root, mutant_root = str(tmp_path / "real"), str(tmp_path / "mutant")
    for root, repo_class in (
        (real_root, JsonlRepository),
        (mutant_root, REPOSITORIES["jsonl-torn-tail-kept"]),
    ):
        _torn_main(root)
        storage = repo_class(root, cwd="/t").open("s")
        storage.commit([set_value(value("v", "k"), 3)])
        storage.close()
    assert JsonlRepository(real_root, cwd="/t").open("s").get_value(value("v", "k")).value == 3  # type: ignore[union-attr]
    with pytest.raises(CorruptError):
        JsonlRepository(mutant_root, cwd="/t").open("s")
