"""``scopecheck bench lifecycle``: lifecycle-machine steps/s per bundled backend, next to the
trivial dict machine (Hypothesis's own cost per step), interleaved in one process; and the
power-loss sweeps of the short lifecycle program (OP-19..21): states checked and states/s on
SQLite (both layouts) and JSONL."""

from __future__ import annotations

import statistics
from typing import Any

from hypothesis import settings as Settings


def bench_lifecycle(runs: int) -> dict[str, Any]:
    from scopecheck.backends.registry import BUNDLED
    from scopecheck.bench.common import machine_rate
    from scopecheck.bench.trivial import TrivialMachine
    from scopecheck.machines.lifecycle import make_lifecycle_machine
    from scopecheck.run.profiles import get_profile

    settings = Settings(get_profile("mutants"), max_examples=60)
    machines = {name: make_lifecycle_machine(b) for name, b in BUNDLED.items()}
    rates: dict[str, list[float]] = {"trivial": [], **{name: [] for name in machines}}
    for _ in range(runs):
        rates["trivial"].append(machine_rate(TrivialMachine, settings))
        for name, machine in machines.items():
            rates[name].append(machine_rate(machine, settings))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        **_rates(runs, medians, rates, machines),
        "power_loss": power_loss_figures(),
    }


def power_loss_figures() -> dict[str, Any]:
    """One run of each lifecycle power-loss sweep on the short program (every I/O call, two
    random images per fault point besides durable-only and all-written; JSONL without the
    crash-during-recovery states and I/O faults)."""
    import time

    from scopecheck.crashsim.lifecycle import explore_jsonl_lifecycle, lifecycle_program
    from scopecheck.crashsim.sqlite_sweep import lifecycle_crash_sweep

    figures: dict[str, Any] = {"transactions": len(lifecycle_program("short").txs)}
    for layout in ("per-file", "shared"):
        report = lifecycle_crash_sweep("short", layout=layout, variants=2, seed=7)
        figures[f"sqlite-{layout}"] = {
            "io_calls": report.io_calls,
            "fault_points": report.fault_points,
            "states": report.states,
            "failures": len(report.failures),
            "states_per_second": round(report.states_per_second, 1),
        }
    started = time.perf_counter()
    jsonl = explore_jsonl_lifecycle("short", recovery=False, faults=False, seed=5)
    seconds = time.perf_counter() - started
    figures["jsonl"] = {
        "ops": jsonl.ops,
        "states": jsonl.states,
        "failures": len(jsonl.failures),
        "states_per_second": round(jsonl.states / seconds, 1),
    }
    return figures


def _rates(
    runs: int, medians: dict[str, float], rates: dict[str, list[float]], machines: dict[str, Any]
) -> dict[str, Any]:
    from scopecheck.bench.common import environment

    return {
        "benchmark": "lifecycle",
        "environment": environment(),
        "runs": runs,
        "steps_per_second": {name: round(v, 1) for name, v in medians.items()},
        "all_runs": {name: [round(v, 1) for v in values] for name, values in rates.items()},
        "ratio_to_trivial": {
            name: round(medians[name] / medians["trivial"], 3) for name in machines
        },
    }
