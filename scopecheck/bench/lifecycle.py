"""``scopecheck bench lifecycle``: lifecycle-machine steps/s per bundled backend, next to the
trivial dict machine (Hypothesis's own cost per step), interleaved in one process."""

from __future__ import annotations

import statistics
from typing import Any

from hypothesis import settings as Settings


def bench_lifecycle(runs: int) -> dict[str, Any]:
    from scopecheck.backends import BUNDLED
    from scopecheck.bench import environment, machine_rate
    from scopecheck.bench.trivial import TrivialMachine
    from scopecheck.lifecycle_machine import make_lifecycle_machine
    from scopecheck.profiles import load_profile

    settings = Settings(load_profile("mutants"), max_examples=60)
    machines = {name: make_lifecycle_machine(b) for name, b in BUNDLED.items()}
    rates: dict[str, list[float]] = {"trivial": [], **{name: [] for name in machines}}
    for _ in range(runs):
        rates["trivial"].append(machine_rate(TrivialMachine, settings))
        for name, machine in machines.items():
            rates[name].append(machine_rate(machine, settings))
    medians = {name: statistics.median(values) for name, values in rates.items()}
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
