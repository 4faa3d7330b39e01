"""dbm.dumb in its durable setting fails more than eight distinct ways: the search that keeps
eight goes on for rules not yet found, and finds the acknowledged steps ``sync()`` loses when
a process dies between truncating the index and writing it (CRASH-FS-2) -- a crash point the
fixed work of ``--examples`` does not check, which that run says (CRASH-COV-6).  Long: a
minute and a half of crash exploration."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scopecheck.process.syscall_crash import SyscallSource

ROOT = Path(__file__).resolve().parents[2]
SPEC = "scopecheck.examples.stores.dbm_dumb_store:make_durable_backend"


@pytest.mark.long
@pytest.mark.rule("CRASH-COV-6", "CRASH-FS-2")
def test_past_the_cap_the_search_finds_a_rule_not_yet_found() -> None:
    source = SyscallSource(SPEC, (sys.executable, "-m", "scopecheck", "serve", SPEC), str(ROOT))
    found = source.explore(90, seed=1)
    rules = {f.rule for f in found.failures}
    assert "CRASH-FS-2" in rules, [str(f) for f in found.failures]
    assert any("cap of 8 distinct failures was reached" in t for t in found.findings.limits)
