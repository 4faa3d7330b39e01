"""One Hypothesis test class per bundled backend's machine, for long coverage-guided runs::

    timeout -s INT 3600 hypothesis fuzz --no-dashboard -n 2 -- scopecheck/run/fuzz_targets.py

HypoFuzz runs ``@given``-style tests, so each machine is exposed as its ``TestCase``.  Findings
land in the shared example database and the next ``pytest`` or ``scopecheck fuzz`` replays them.
Not collected by the normal test run (no ``test_`` prefix in the file name).
"""

from __future__ import annotations

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.fork import make_fork_machine, make_lockstep_machine
from scopecheck.machines.lifecycle import make_lifecycle_machine
from scopecheck.machines.storage import make_machine
from scopecheck.run.profiles import load_profile

load_profile()

for _name, _backend in sorted(BUNDLED.items()):
    _machine = make_machine(_backend)
    globals()[f"Test{_machine.__name__}"] = _machine.TestCase
    # The operation-lifecycle machine on the same backend.
    _lifecycle = make_lifecycle_machine(_backend)
    globals()[f"Test{_lifecycle.__name__}"] = _lifecycle.TestCase
    # The fork machine on the same backend.
    _fork = make_fork_machine(_backend)
    globals()[f"Test{_fork.__name__}"] = _fork.TestCase

# Memory, JSONL and SQLite in lockstep: identical fork destinations (FORK-15).
TestLockstepForkMachine = make_lockstep_machine(
    (BUNDLED["memory"], BUNDLED["jsonl"], BUNDLED["sqlite"])
).TestCase
