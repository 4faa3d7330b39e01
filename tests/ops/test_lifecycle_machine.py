"""The lifecycle machine on every bundled backend (OP-1..OP-11).

One TestCase per backend, so pytest-xdist can spread them.  Random lifecycles over two lanes:
start, frames, checkpoints, memos, safe-replay resets, settle/supersede, tool outcomes,
cancellation, unknown-outcome recovery, terminal on every path, late queued progress, close and
fault with recovery checks after each.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from scopecheck.backends.registry import BUNDLED, EXTRA
from scopecheck.machines.lifecycle import make_lifecycle_machine

OP_RULES = (
    "OP-1", "OP-2", "OP-3", "OP-4", "OP-5", "OP-6", "OP-7", "OP-9", "OP-10", "OP-11",
)  # fmt: skip


#: Besides the bundled backends: JSONL whose sidecar unlinks fail every second time, so retired
#: sidecars outlive their retirement and only the retirement record bounds them (000 §2.3).
BACKENDS = {**BUNDLED, **{k: v for k, v in EXTRA.items() if k == "jsonl-unlink-fails"}}


def _case(name: str) -> type:
    machine = make_lifecycle_machine(BACKENDS[name])
    case = machine.TestCase
    profile = settings()
    if name != "memory":
        case.settings = settings(profile, max_examples=max(10, profile.max_examples // 3))
    return pytest.mark.rule(*OP_RULES)(case)  # type: ignore[no-any-return]


for _name in BACKENDS:
    _words = "".join(ch if ch.isalnum() else " " for ch in _name).split()
    globals()["Test" + "".join(w.capitalize() for w in _words) + "Lifecycle"] = _case(_name)
