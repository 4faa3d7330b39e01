"""The stateful machine with Sessions that start as legacy files (LEGACY-11, LEGACY-9/10).

The ``jsonl-legacy`` world (``scopecheck/backends.py``, also ``scopecheck fuzz --backend
jsonl-legacy``): Session ``s1`` starts as the first lines of the real ``large-session``
transcript (with a reconstructed ``main`` lane) and ``s2`` as the first lines of
``before-compaction`` (through its first compaction; a data-only ``main``), each renamed to the
machine's Session id.  The backend imports them through ``JsonlRepository.open``; the model
starts from ``models.legacy.import_log`` over the same lines — a separately written importer
(``SessionPairMachine`` does this for any world with ``legacy_files``).  Every later step
(session and scoped writes, close/reopen before and after the upgrade, restart, repository
misuse) is then checked against the model as for any Session.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from scopecheck.backends import EXTRA, legacy_lines
from scopecheck.machine import make_machine
from tests.legacy.conftest import DATA

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
