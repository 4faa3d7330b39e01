"""``scopecheck bench crash``: JSONL crash states checked per second, and how many states each
bundled workload has in prefix and unsynced modes (figures, never assertions)."""

from __future__ import annotations

import statistics
import time
from typing import Any


def bench_crash(runs: int) -> dict[str, Any]:
    from crashsim.jsonl_sweep import MODES, count_states, explore_workload, trace
    from crashsim.jsonl_workloads import BUNDLED, generated

    workload = generated(2, 50)
    rates: dict[str, list[float]] = {"prefix": [], "unsynced": []}
    checked: dict[str, int] = {}
    for _ in range(runs):
        for mode in MODES:
            started = time.perf_counter()
            report = explore_workload(workload, mode=mode, faults=False)
            seconds = time.perf_counter() - started
            rates[mode].append(report.states / seconds)
            checked[mode] = report.states
    per_workload = {}
    for name, make in BUNDLED.items():
        tr = trace(make())
        prefix = count_states(tr, "prefix")
        unsynced = count_states(tr, "unsynced")
        per_workload[name] = {
            "ops": len(tr.ops),
            "prefix": prefix,
            "unsynced": unsynced,
            "added_by_unsynced": unsynced - prefix,
        }
    totals = {
        key: sum(w[key] for w in per_workload.values())
        for key in ("prefix", "unsynced", "added_by_unsynced")
    }
    return {
        "benchmark": "crash",
        "runs": runs,
        "workload_50": {
            "name": workload.name,
            "ops": len(trace(workload).ops),
            "states_checked": checked,
            "states_per_second_median": {
                m: round(statistics.median(v), 1) for m, v in rates.items()
            },
            "states_per_second_runs": {m: [round(x, 1) for x in v] for m, v in rates.items()},
        },
        "enumerated_states": per_workload,
        "enumerated_totals": totals,
        "note": (
            "enumerated states exclude the crash-during-recovery states that checking adds; "
            "states_checked includes them"
        ),
    }
