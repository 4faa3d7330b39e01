"""The stateful machine (reference model vs. backend) on SQLite, both layouts.

The machine's own rules close and reopen Sessions and restart the whole repository over the
same files, so every run also checks durability across close/reopen (SQLITE-14).
"""

from __future__ import annotations

import pytest

from scopecheck.backends.registry import SQLITE, SQLITE_SHARED
from scopecheck.machines.storage import make_machine

RULES = (
    "SQLITE-2",
    "SQLITE-3",
    "SQLITE-5",
    "SQLITE-6",
    "SQLITE-7",
    "SQLITE-11",
    "SQLITE-13",
    "SQLITE-14",
)

SqliteMachine = make_machine(SQLITE)
SqliteSharedMachine = make_machine(SQLITE_SHARED)

TestSqliteMachine = pytest.mark.rule(*RULES)(SqliteMachine.TestCase)
TestSqliteSharedMachine = pytest.mark.rule(*RULES)(SqliteSharedMachine.TestCase)
