"""The stateful machine: the reference model against the Memory backend."""

import pytest

from scopecheck.backends import MEMORY
from scopecheck.machine import make_machine

MemoryMachine = make_machine(MEMORY)

TestMemoryMachine = pytest.mark.rule(
    "SCOPE-1",
    "TX-1",
    "TX-2",
    "TX-3",
    "TX-4",
    "SEQ-1",
    "SEQ-2",
    "RETIRE-1",
    "RETIRE-2",
    "LIST-1",
    "LIST-2",
    "LIST-3",
    "LIST-5",
    "STATS-1",
    "LIFE-1",
    "LIFE-2",
    "REPO-2",
)(MemoryMachine.TestCase)
