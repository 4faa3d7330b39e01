"""The stateful machine with Sessions that start as legacy files (LEGACY-11, LEGACY-9/10).

The ``jsonl-legacy`` world (``scopecheck/backends/registry.py``, also ``scopecheck fuzz --backend
jsonl-legacy``): Session ``s1`` starts as the first lines of the real ``large-session``
transcript (with a reconstructed ``main`` lane) and ``s2`` as the first lines of
``before-compaction`` (through its first compaction; a data-only ``main``), each renamed to the
machine's Session id.  The backend imports them through ``JsonlRepository.open``; the model
starts from ``scopecheck.models.legacy.import_log`` over the same lines — a separately written
importer (``SessionPairMachine`` does this for any world with ``legacy_files``).  Every later step
(session and scoped writes, close/reopen before and after the upgrade, restart, repository
misuse) is then checked against the model as for any Session.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, settings

from scopecheck.backends.registry import EXTRA, legacy_lines
from scopecheck.machines.storage import make_machine
from tests.legacy.conftest import DATA
from tests.test_cli import scopecheck

JsonlLegacyMachine = make_machine(EXTRA["jsonl-legacy"])
JsonlLegacyMachine.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

TestJsonlLegacyMachine = pytest.mark.rule("LEGACY-11", "LEGACY-9", "LEGACY-10", "JSONL-19")(
    JsonlLegacyMachine.TestCase
)


@pytest.mark.rule("LEGACY-11")
def test_legacy_world_starts_from_the_shared_transcripts() -> None:
    """The world really starts from the real transcripts, not from empty Sessions."""
    lines = legacy_lines("s1")
    assert lines[1:] == (DATA / "large-session.jsonl").read_bytes().split(b"\n")[1:240]
    assert len(legacy_lines("s2")) == 380


@pytest.mark.rule("LEGACY-18", "LEGACY-11")
def test_scopecheck_fuzz_runs_the_jsonl_legacy_world(tmp_path: Path) -> None:
    """``scopecheck fuzz --backend jsonl-legacy`` starts the machine from the legacy files and
    reports steps, not an unknown backend."""
    result = scopecheck(
        "fuzz",
        "--backend",
        "jsonl-legacy",
        "--budget",
        "2",
        "--profile",
        "dev",
        "--seed",
        "1",
        "--failures-dir",
        str(tmp_path),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)["backends"]["jsonl-legacy"]
    assert report["failures"] == 0 and report["steps"] > 0
