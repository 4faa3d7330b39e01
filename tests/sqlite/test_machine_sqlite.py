"""The stateful machine (reference model vs. backend) on SQLite, both layouts.

The machine's own rules close and reopen Sessions and restart the whole repository over the
same files, so every run also checks durability across close/reopen (SQLITE-14).

Long: the default run runs these very machine classes (``make_machine`` of the same backends,
under the same profile) as ``scopecheck/conformance/test_machine.py``'s ``sqlite`` and
``sqlite-shared`` cases; here they carry the SQLite rules and run again with
``SCOPECHECK_LONG=1``.
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

TestSqliteMachine = pytest.mark.long(pytest.mark.rule(*RULES)(SqliteMachine.TestCase))
TestSqliteSharedMachine = pytest.mark.long(pytest.mark.rule(*RULES)(SqliteSharedMachine.TestCase))
