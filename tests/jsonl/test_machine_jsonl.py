"""The stateful machine: the reference model against JSONL (real temp dir and pyfakefs).

Close/reopen and restart are machine rules, so every run replays the files through the nine
open stages many times (JSONL-7, JSONL-8, JSONL-16, JSONL-17).

``TestJsonlMachine`` is long: the default run runs the same machine class on the same backend
under the same profile as ``scopecheck/conformance/test_machine.py``'s ``jsonl`` case.  The
pyfakefs and unlink-fails worlds run only here.
"""

import pytest

from scopecheck.backends.registry import JSONL, JSONL_FAKEFS, JSONL_UNLINK_FAILS
from scopecheck.machines.storage import make_machine

_RULES = (
    "JSONL-3",
    "JSONL-7",
    "JSONL-8",
    "JSONL-9",
    "JSONL-16",
    "JSONL-17",
    "JSONL-22",
    "SCOPE-1",
    "TX-4",
    "SEQ-1",
    "SEQ-2",
    "RETIRE-1",
    "RETIRE-2",
    "LIFE-1",
    "REPO-2",
)

JsonlMachine = make_machine(JSONL)
JsonlFakefsMachine = make_machine(JSONL_FAKEFS)

TestJsonlMachine = pytest.mark.long(pytest.mark.rule(*_RULES)(JsonlMachine.TestCase))
TestJsonlFakefsMachine = pytest.mark.rule(*_RULES)(JsonlFakefsMachine.TestCase)
JsonlUnlinkFailsMachine = make_machine(JSONL_UNLINK_FAILS)
TestJsonlUnlinkFailsMachine = pytest.mark.rule(*_RULES)(JsonlUnlinkFailsMachine.TestCase)
