"""``scopecheck bench process``: the storage machine through the process protocol next to the
same factories in-process -- figures, never assertions.

Each run drives the storage machine (the ``ci`` profile, as ``validate`` does, no crash
exploration) over one backend for a fixed budget through :func:`~scopecheck.run.fuzz.fuzz_backend`
and reports its steps per second, how many backend processes it started per second, and its
wall time over the budget (the budget is checked between rounds of ten examples, so a backend
whose examples are slow overruns it; the wall time includes loading and probing the backend
and stopping every process at the end).  Without a target the bundled set runs: the Node.js
example and the Go example (built with ``go build`` when ``go`` is on ``PATH``) through
``--exec``, and ``good_backend``, ``good_file_backend`` and ``sqlite3_backend`` both in-process
and served by ``scopecheck serve`` in a child.  The runs of every backend interleave (run 1 of
each, then run 2, ...), all in one process; the median of ``runs`` is reported.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Seconds of machine budget per run of each backend.
BUDGET = 8.0


def _examples() -> Path:
    import scopecheck.examples

    return Path(scopecheck.examples.__file__).resolve().parent


def build_go(out: Path) -> str | None:
    """The Go example built into ``out`` (standard library only, no network); ``None`` without
    ``go`` or when the build fails."""
    go = shutil.which("go")
    source = _examples() / "go"
    if go is None or not (source / "backend.go").is_file():
        return None
    env = {**os.environ, "GOCACHE": str(out / "cache"), "GOFLAGS": "", "GOPROXY": "off",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}  # fmt: skip
    binary = out / "backend"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=source, env=env,
        capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    return str(binary) if built.returncode == 0 else None


#: The label suffix of a run whose restarts move to another warm child
#: (``$SCOPECHECK_PROCESS_RESTART=other``) instead of starting a new process.
OTHER = " restart=other"


def bundled_targets(scratch: Path) -> dict[str, str]:
    """The backends measured when none is named: label → backend spec.  The Node and Go
    examples through ``--exec``; the Python examples in-process, and those that keep files
    also served by ``scopecheck serve`` (the dict example keeps nothing a new process could
    read back).  Each process backend runs twice: restarts starting a new process (the
    default), and moving to another warm child (label ending in :data:`OTHER`)."""
    examples = _examples()
    serve = f"exec:{sys.executable} -m scopecheck serve"
    found: dict[str, str] = {}
    node = shutil.which("node")
    if node is not None:
        found["node --exec"] = f"exec:{node} {examples / 'node' / 'backend.js'}"
    go = build_go(scratch)
    if go is not None:
        found["go --exec"] = f"exec:{go}"
    for name in ("good_backend", "good_file_backend", "sqlite3_backend"):
        spec = f"{examples / name}.py:make_backend"
        found[f"{name} in-process"] = spec
        if name != "good_backend":
            found[f"{name} served"] = f"{serve} {spec}"
    for label, spec in list(found.items()):
        if spec.startswith("exec:"):
            found[label + OTHER] = spec
    return found


def _process_starts() -> int | None:
    """Backend processes started so far in this process (``None``: not counted)."""
    from scopecheck.process import client

    found = getattr(client, "STARTS", None)
    return None if found is None else int(found.count)


def run_once(
    spec: str, budget: float, seed: int, failures: Path, restart: str = "new"
) -> dict[str, Any]:
    """One machine run of ``budget`` seconds over ``spec``: steps, examples, seconds, starts;
    ``restart`` is the restart policy of a process backend."""
    import attrs

    from scopecheck.backends.adapters import RESTART_ENV, load
    from scopecheck.run.fuzz import fuzz_backend
    from scopecheck.run.profiles import get_profile

    starts_before = _process_starts()
    started = time.perf_counter()
    saved = os.environ.get(RESTART_ENV)
    os.environ[RESTART_ENV] = restart
    try:
        loaded = load(spec)
    finally:
        if saved is None:
            os.environ.pop(RESTART_ENV, None)
        else:
            os.environ[RESTART_ENV] = saved
    report = fuzz_backend(
        attrs.evolve(loaded.backend, crash=None),
        budget=budget,
        seed=seed,
        settings=get_profile("ci"),
        failures_dir=failures,
        profile="ci",
        spec=spec,
    )
    close = getattr(loaded.backend, "close", None)
    if callable(close):
        close()
    wall = time.perf_counter() - started
    starts_after = _process_starts()
    if starts_before is None or starts_after is None:  # one process per world and restart
        process = spec.startswith("exec:")
        starts = 1 + loaded.counts.worlds + loaded.counts.restarts if process else 0
    else:
        starts = starts_after - starts_before
    return {
        "steps": report.steps,
        "examples": report.examples,
        "machine_s": report.seconds,
        "wall_s": wall,
        "process_starts": starts,
        "failures": report.failures,
    }


def bench_process(runs: int, target: str | None = None, budget: float = BUDGET) -> dict[str, Any]:
    """Machine steps/s, process starts/s and wall time ÷ budget of ``target`` (a backend spec:
    ``exec:COMMAND`` or ``PATH_OR_MODULE:FACTORY``), or of the bundled set; medians of
    ``runs``."""
    from scopecheck.bench.common import environment
    from scopecheck.run.validate import scratch_directory

    with scratch_directory() as scratch:
        targets = (
            {target: target, target + OTHER: target}
            if target and target.startswith("exec:")
            else {target: target}
            if target
            else bundled_targets(Path(scratch))
        )
        failures = Path(tempfile.mkdtemp(prefix="failures-", dir=scratch))
        found: dict[str, list[dict[str, Any]]] = {label: [] for label in targets}
        for run in range(runs):
            for label, spec in targets.items():
                policy = "other" if label.endswith(OTHER) else "new"
                found[label].append(run_once(spec, budget, run, failures, policy))
    rows: dict[str, Any] = {}
    for label, done in found.items():
        rates = [r["steps"] / r["machine_s"] if r["machine_s"] else 0.0 for r in done]
        starts = [r["process_starts"] / r["wall_s"] for r in done]
        over = [r["wall_s"] / budget for r in done]
        rows[label] = {
            "spec": targets[label],
            "steps_per_s": round(statistics.median(rates), 1),
            "process_starts_per_s": round(statistics.median(starts), 2),
            "wall_over_budget": round(statistics.median(over), 2),
            "all_steps_per_s": [round(v, 1) for v in rates],
            "all_process_starts": [r["process_starts"] for r in done],
            "all_wall_s": [round(r["wall_s"], 2) for r in done],
            "failures": sum(r["failures"] for r in done),
        }
    ratios: dict[str, float] = {}
    for label, row in rows.items():
        if " served" in label:
            inside = rows.get(label.split(" served", 1)[0] + " in-process")
            if inside and inside["steps_per_s"]:
                ratios[label] = round(row["steps_per_s"] / inside["steps_per_s"], 3)
    return {
        "benchmark": "process",
        "environment": environment(),
        "runs": runs,
        "budget_s": budget,
        "backends": rows,
        "served_over_in_process": ratios,
    }


def render(console: Any, result: dict[str, Any]) -> None:
    """One row per backend: medians, then every run."""
    from rich.table import Table

    table = Table(
        title=f"storage machine through the process protocol, {result['budget_s']:g} s a run "
        f"(median of {result['runs']})"
    )
    for column in ("backend", "steps/s", "starts/s", "wall ÷ budget", "steps/s of each run"):
        table.add_column(column)
    for label, row in result["backends"].items():
        table.add_row(
            label,
            f"{row['steps_per_s']:,.0f}",
            f"{row['process_starts_per_s']:,.1f}",
            f"{row['wall_over_budget']:.2f}",
            ", ".join(f"{v:,.0f}" for v in row["all_steps_per_s"]),
        )
    console.print(table)
    for label, ratio in result["served_over_in_process"].items():
        console.print(f"{label} ÷ in-process: {ratio:.2f}")
