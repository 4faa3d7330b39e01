"""What every benchmark of ``scopecheck bench`` shares: the environment it reports and the
rate of a machine run. The benchmark modules import it, never the package's ``__init__``
(which imports them)."""

from __future__ import annotations

import platform
import sys
import time
from typing import Any

from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test


def environment() -> dict[str, Any]:
    import hypothesis

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hypothesis": hypothesis.__version__,
        "cpus": __import__("os").cpu_count(),
    }


def machine_rate(machine: Any, settings: Settings) -> float:
    """Steps per second of one run of ``machine`` (steps counted by its invariant)."""
    machine.steps_run = machine.examples_run = 0
    start = time.perf_counter()
    run_state_machine_as_test(machine, settings=settings)  # type: ignore[no-untyped-call]
    return float(machine.steps_run / (time.perf_counter() - start))
