"""``scopecheck bench crash``: JSONL crash states checked per second, how many states each
bundled workload has in prefix and unsynced modes, the generic sweep's rate (our JSONL
backend and the file-backed example through ``scopecheck.crashsim.generic_sweep``, measured in the
same loop: crash states/s and single-I/O-fault runs/s), and the SQLite sweep's crash states/s
(``scopecheck.crashsim.sqlite_sweep.crash_sweep``, both layouts, recovery crashes included) —
figures, never assertions."""

from __future__ import annotations

import statistics
import time
from typing import Any

GENERIC_TRANSACTIONS = 20
SQLITE_TRANSACTIONS = 8


def _sqlite_sweep(runs: int) -> dict[str, Any]:
    """Crash states/s of the SQLite sweep on one workload per layout, median of ``runs``."""
    from scopecheck.crashsim.sqlite_sweep import crash_sweep
    from scopecheck.crashsim.workload import make_workload

    workload = make_workload(1, transactions=SQLITE_TRANSACTIONS, big_every=3)
    rates: dict[str, list[float]] = {"per-file": [], "shared": []}
    checked: dict[str, int] = {}
    recovery: dict[str, int] = {}
    for _ in range(runs):
        for layout in rates:
            report = crash_sweep(workload, layout=layout)  # type: ignore[arg-type]
            rates[layout].append(report.states_per_second)
            checked[layout] = report.states
            recovery[layout] = report.coverage.recovery_states
    return {
        "workload": f"make_workload(1, transactions={SQLITE_TRANSACTIONS}, big_every=3)",
        "states_checked": checked,
        "recovery_states": recovery,
        "states_per_second_median": {n: round(statistics.median(v), 1) for n, v in rates.items()},
        "states_per_second_runs": {n: [round(x, 1) for x in v] for n, v in rates.items()},
    }


def _generic_factories() -> dict[str, Any]:
    """Our JSONL backend and the bundled ``good_file_backend`` example."""
    from scopecheck.crashsim.generic_sweep import jsonl_factory
    from scopecheck.examples import good_file_backend

    return {"jsonl": jsonl_factory, "good_file_backend": good_file_backend.make_backend}


def bench_crash(runs: int) -> dict[str, Any]:
    from scopecheck.crashsim.jsonl_sweep import MODES, count_states, explore_workload, trace
    from scopecheck.crashsim.jsonl_workloads import BUNDLED, generated
    from scopecheck.crashsim.persistence import POSIX

    workload = generated(2, 50)
    rates: dict[str, list[float]] = {"prefix": [], "unsynced": []}
    checked: dict[str, int] = {}
    generic = _generic_factories()
    generic_rates: dict[str, list[float]] = {name: [] for name in generic}
    generic_checked: dict[str, int] = {}
    fault_rates: dict[str, list[float]] = {name: [] for name in generic}
    posix_rates: dict[str, list[float]] = {name: [] for name in generic}
    posix_checked: dict[str, int] = {}
    fault_counts: dict[str, int] = {}
    for _ in range(runs):
        for mode in MODES:
            started = time.perf_counter()
            report = explore_workload(workload, mode=mode, faults=False)
            seconds = time.perf_counter() - started
            rates[mode].append(report.states / seconds)
            checked[mode] = report.states
        for name, factory in generic.items():
            from scopecheck.crashsim.generic_sweep import sweep
            from scopecheck.crashsim.generic_sweep import workload as generic_workload

            wl = generic_workload(1, GENERIC_TRANSACTIONS)
            started = time.perf_counter()
            found = sweep(factory, wl, seed=1, faults=False)
            generic_rates[name].append(found.states / (time.perf_counter() - started))
            generic_checked[name] = found.states
            started = time.perf_counter()
            posix = sweep(factory, wl, seed=1, faults=False, profiles=(POSIX,))
            posix_rates[name].append(posix.states / (time.perf_counter() - started))
            posix_checked[name] = posix.states
            started = time.perf_counter()
            faulted = sweep(factory, wl, seed=1, crashes=False)
            fault_rates[name].append(faulted.fault_runs / (time.perf_counter() - started))
            fault_counts[name] = faulted.fault_runs
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
        "generic_sweep": {
            "workload": f"fs-{GENERIC_TRANSACTIONS}-seed1",
            "note": "unsynced mode; states_checked includes crash-during-recovery states",
            "states_checked": generic_checked,
            "states_per_second_median": {
                n: round(statistics.median(v), 1) for n, v in generic_rates.items()
            },
            "fault_runs": fault_counts,
            "fault_runs_per_second_median": {
                n: round(statistics.median(v), 1) for n, v in fault_rates.items()
            },
            "fault_note": "single I/O faults without a crash (CRASH-FS-9..11), the trace included",
            "profiles_off_states_checked": posix_checked,
            "profiles_off_states_per_second_median": {
                n: round(statistics.median(v), 1) for n, v in posix_rates.items()
            },
            "profiles_cost": {
                n: round(1 - statistics.median(generic_rates[n]) / statistics.median(v), 3)
                for n, v in posix_rates.items()
            },
            "profiles_note": "states_per_second_median: every file-system profile, each distinct "
            "image once (CRASH-SYS-14); profiles_off: posix alone",
        },
        "sqlite_sweep": _sqlite_sweep(runs),
        "enumerated_states": per_workload,
        "enumerated_totals": totals,
        "note": (
            "enumerated states exclude the crash-during-recovery states that checking adds; "
            "states_checked includes them"
        ),
    }
