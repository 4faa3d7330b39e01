"""``scopecheck bench``: benchmarks report figures (medians of several runs in one process);
they never assert on time.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from hypothesis import settings as Settings

from scopecheck.bench.common import environment, machine_rate


def bench_machine(runs: int) -> dict[str, Any]:
    """Memory machine steps/s next to the trivial dict machine, interleaved in one process."""
    from scopecheck.backends.registry import BUNDLED
    from scopecheck.bench.trivial import TrivialMachine
    from scopecheck.machines.storage import make_machine
    from scopecheck.run.profiles import get_profile

    settings = Settings(get_profile("mutants"), max_examples=150)
    backends = {name: make_machine(b) for name, b in BUNDLED.items()}
    rates: dict[str, list[float]] = {"trivial": [], **{name: [] for name in backends}}
    for _ in range(runs):
        rates["trivial"].append(machine_rate(TrivialMachine, settings))
        for name, machine in backends.items():
            rates[name].append(machine_rate(machine, settings))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        "benchmark": "machine",
        "environment": environment(),
        "runs": runs,
        "steps_per_second": {name: round(v, 1) for name, v in medians.items()},
        "all_runs": {name: [round(v, 1) for v in values] for name, values in rates.items()},
        "ratio_to_trivial": {
            name: round(medians[name] / medians["trivial"], 3) for name in backends
        },
    }


def bench_jsonl_figures(runs: int, large: bool = False) -> dict[str, Any]:
    """JSONL open/replay vs plain orjson parsing (1 MB, 10 MB, and 100 MB with ``large``),
    commits/s with fsync, machine steps/s."""
    from scopecheck.bench.jsonl import bench_jsonl

    return {"benchmark": "jsonl", **bench_jsonl(large=large, repeat=runs)}


def bench_crash_figures(runs: int) -> dict[str, Any]:
    """JSONL crash states checked per second (50 transactions) and states per workload."""
    from scopecheck.bench.crash import bench_crash

    return bench_crash(runs)


def bench_legacy_figures(runs: int) -> dict[str, Any]:
    """Legacy import time and peak memory per real transcript; upgrade crash points."""
    from scopecheck.bench.legacy import bench_legacy

    return {"benchmark": "legacy", "environment": environment(), **bench_legacy(runs)}


def bench_fork_figures(runs: int) -> dict[str, Any]:
    """Peak traced memory of tree and branch forks at 10k and 100k entries (FORK-16).

    Memory is deterministic enough that ``runs`` is ignored (one run)."""
    from scopecheck.bench.fork import bench_fork

    return {"benchmark": "fork", "environment": environment(), **bench_fork()}


def bench_syscall_figures(runs: int) -> dict[str, Any]:
    """Crash exploration of backend processes from their system calls: strace's overhead on
    the workload, crash images checked per second, seconds per fault run."""
    from scopecheck.bench.syscall import bench_syscall

    return {"benchmark": "syscall", "environment": environment(), **bench_syscall(runs)}


def bench_process_figures(runs: int) -> dict[str, Any]:
    """The storage machine through the process protocol next to in-process (steps/s, process
    starts/s, wall time ÷ budget), for the bundled examples."""
    from scopecheck.bench.process import bench_process

    return bench_process(runs)


def bench_trace_reader_figures(runs: int) -> dict[str, Any]:
    """The strace reader before and after it read in linear time: a 10 MiB trace and a line of
    100,000 escapes cut in two (scopecheck/bench/trace_reader.py)."""
    from scopecheck.bench.trace_reader import bench_trace_reader

    return bench_trace_reader(runs)


def bench_fleet_figures(runs: int) -> dict[str, Any]:
    """HypoFuzz over the planted-bug example with 1 and 2 workers, a shared Redis or a directory
    database each: distinct examples/s and time to first failure (scopecheck/bench/fleet.py)."""
    from scopecheck.bench.fleet import bench_fleet

    return bench_fleet(runs)


def bench_stores_figures(runs: int) -> dict[str, Any]:
    """``validate --examples 5`` on every store of the pinned suite: wall time, crash states/s,
    fault runs/s, time to the first failure (scopecheck/bench/stores.py)."""
    from scopecheck.bench.stores import bench_stores

    return bench_stores(runs)


BENCHMARKS: dict[str, Callable[[int], dict[str, Any]]] = {
    "machine": bench_machine,
    "jsonl": bench_jsonl_figures,
    "crash": bench_crash_figures,
    "legacy": bench_legacy_figures,
    "fork": bench_fork_figures,
    "syscall": bench_syscall_figures,
    "process": bench_process_figures,
    "fleet": bench_fleet_figures,
    "trace-reader": bench_trace_reader_figures,
    "stores": bench_stores_figures,
}


def render(which: str, result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    env = result.get("environment", {})
    console.print(f"[dim]{' · '.join(f'{k} {v}' for k, v in env.items())}[/]")
    if which == "size":
        _render_size(console, result)
    elif which == "fork":
        _render_fork(console, result)
    elif which == "jsonl":
        _render_jsonl(console, result)
    elif which == "syscall" and "skipped" not in result:
        _render_syscall(console, result)
    elif which == "process":
        from scopecheck.bench.process import render as render_process

        render_process(console, result)
    elif which == "fleet":
        from scopecheck.bench.fleet import render as render_fleet

        render_fleet(console, result)
    elif which == "stores":
        from scopecheck.bench.stores import render as render_stores

        render_stores(console, result)
    elif which == "trace-reader":
        from scopecheck.bench.trace_reader import render as render_trace_reader

        render_trace_reader(console, result)
    elif which in ("machine", "lifecycle"):
        table = Table(title=f"{which} machine steps/s (median of {result['runs']})")
        for column in ("machine", "steps/s", "ratio to trivial", "runs"):
            table.add_column(column)
        for name, rate in result["steps_per_second"].items():
            ratio = result["ratio_to_trivial"].get(name)
            table.add_row(
                name,
                f"{rate:,.0f}",
                "-" if ratio is None else f"{ratio:.0%}",
                ", ".join(f"{v:,.0f}" for v in result["all_runs"][name]),
            )
        console.print(table)
        power = result.get("power_loss")
        if power:
            count = power["transactions"]
            crash = Table(title=f"power loss during the short lifecycle ({count} transactions)")
            for column in ("sweep", "states", "states/s", "failures"):
                crash.add_column(column)
            for name, row in power.items():
                if isinstance(row, dict):
                    crash.add_row(
                        name,
                        f"{row['states']:,}",
                        f"{row['states_per_second']:,.0f}",
                        str(row["failures"]),
                    )
            console.print(crash)
    else:
        from rich.pretty import pprint

        pprint(result)


def _render_syscall(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    rows = {k: v for k, v in result.items() if isinstance(v, dict) and "states_per_s" in v}
    runs = next(iter(rows.values()))["runs"] if rows else 0
    table = Table(title=f"crash exploration from system calls (median of {runs})")
    for column in (
        "backend", "plain s", "traced s", "overhead", "images", "checked/s", "overall/s",
        "fault run s", "profiles off/s", "on/s", "on images", "profiles cost",
    ):  # fmt: skip
        table.add_column(column)
    for name, row in rows.items():
        table.add_row(
            name.split(" ")[0],
            f"{row['workload_plain_s']:.2f}",
            f"{row['workload_traced_s']:.2f}",
            f"{row['strace_overhead']:.1f}x",
            f"{row['crash_images']:,}",
            f"{row['check_states_per_s']:,.0f}",
            f"{row['states_per_s']:,.0f}",
            "-" if row["fault_run_s"] is None else f"{row['fault_run_s']:.2f}",
            f"{row['profiles_off_states_per_s']:,.0f}",
            f"{row['profiles_on_states_per_s']:,.0f}",
            f"{row['profiles_on_images']:,}",
            f"{row['profiles_cost']:.1%}",
        )
    console.print(table)


def _render_jsonl(console: Any, result: dict[str, Any]) -> None:
    """Open next to plain orjson line parsing per size (target: ratio at least 0.5),
    commits/s with fsync, and the machine's steps/s next to the trivial machine."""
    from rich.table import Table

    from scopecheck.bench.jsonl import MB

    table = Table(
        title="JSONL open + close next to plain orjson line parsing (medians)",
        caption="synthetic: scopecheck's worst case (0.6 KB lines, a usage row per entry); "
        "real: a coding-agent transcript upgraded to format 4",
    )
    table.add_column("Session", no_wrap=True)
    for column in ("MB", "parse MB/s", "open MB/s", "ratio", "CPU ratio"):
        table.add_column(column, justify="right")
    rows = [(f"synthetic {label}", row) for label, row in result["open"].items()]
    rows += [(f"real {name}", row) for name, row in result.get("open_transcripts", {}).items()]
    for label, row in rows:
        table.add_row(
            label,
            f"{row['bytes'] / MB:.1f}",
            f"{row['parse_mb_s']:,.0f}",
            f"{row['open_mb_s']:,.0f}",
            f"{row['ratio']:.3f}",
            "-" if row["cpu_ratio"] is None else f"{row['cpu_ratio']:.3f}",
        )
    console.print(table)
    commits = result["commits"]
    console.print(
        f"commits/s with fsync ({commits['count']} each): main log "
        f"{commits['main_commits_per_s']:,.0f}, sidecar {commits['sidecar_commits_per_s']:,.0f}"
    )
    fuzz = result.get("fuzz")
    if fuzz:
        steps = Table(title="machine steps/s")
        for column in ("machine", "steps", "steps/s", "ratio to trivial"):
            steps.add_column(column)
        for name, row in fuzz.items():
            ratio = row.get("vs_trivial")
            steps.add_row(
                name,
                f"{row['steps']:,}",
                f"{row['steps_per_s']:,.0f}",
                "-" if ratio is None else f"{ratio:.3f}",
            )
        console.print(steps)


def _render_fork(console: Any, result: dict[str, Any]) -> None:
    """One row per backend and scope: auxiliary (peak − retained) and SQLite memory at each
    size, the growth ratios and whether the ≤ 1.5× target holds (scopecheck/bench/fork.py)."""
    from rich.table import Table

    backends = [name for name in ("memory", "jsonl", "sqlite", "sqlite-shared") if name in result]
    if not backends:
        return
    sizes = sorted(int(k) for k in result[backends[0]] if k.isdigit())
    small, large = str(sizes[0]), str(sizes[-1])
    table = Table(
        title=(
            f"fork memory in KB, {sizes[0]:,} → {sizes[-1]:,} entries: kept = traced memory "
            "the fork left allocated (Memory: its destination); aux = peak traced − kept; "
            "sql = SQLite's allocator high-water (its page caches); target aux × ≤ 1.5"
        )
    )
    lo, hi = (f"{int(size) // 1000}k" for size in (small, large))
    table.add_column("backend", no_wrap=True)
    table.add_column("scope", no_wrap=True)
    for column in ("kept", f"aux {lo}", f"aux {hi}", "×", f"sql {lo}", f"sql {hi}", "×", "≤1.5"):
        table.add_column(column, justify="right", no_wrap=True)

    def kb(value: int) -> str:
        return f"{value / 1024:,.0f}"

    for name in backends:
        per = result[name]
        for scope in ("tree", "branch"):
            a, b = per[small][scope], per[large][scope]
            aux = per["auxiliary_ratio_largest_to_smallest"][scope]
            sql = per.get("sqlite_ratio_largest_to_smallest", {}).get(scope)
            sqlite_small, sqlite_large = (
                a.get("sqlite_peak_bytes", 0),
                b.get("sqlite_peak_bytes", 0),
            )
            table.add_row(
                name,
                scope,
                kb(b["retained_bytes"]),
                kb(a["auxiliary_bytes"]),
                kb(b["auxiliary_bytes"]),
                f"{aux:.2f}",
                kb(sqlite_small),
                kb(sqlite_large),
                "-" if sql is None or not sqlite_large else f"{sql:.2f}",
                "met" if aux <= 1.5 else "[red]missed[/]",
            )
    console.print(table)
    jsonl = result.get("jsonl", {}).get(large, {})
    if "speed_vs_plain_copy" in jsonl:
        console.print(
            f"JSONL tree fork of {sizes[-1]:,} entries: {jsonl['tree_fork_seconds']} s, "
            f"plain orjson line copy {jsonl['plain_orjson_copy_seconds']} s → "
            f"{jsonl['speed_vs_plain_copy']:.2f}× as fast (target ≥ 0.5)"
        )


def _render_size(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    params = result["params"]
    table = Table(
        title=(
            f"seed workload: {params['ops']} ops × ({params['frames']} frames + {params['tools']} "
            f"tools × {params['checkpoints']} checkpoints of a {params['window_bytes'] // 1024} KB "
            f"window); the seed reports {result['seed_unscoped_mb']} MB unscoped"
        )
    )
    for column in (
        "backend",
        "scoped main",
        "sidecar peak",
        "sidecar final",
        "unscoped main",
        "ratio",
    ):
        table.add_column(column, justify="right")

    def mb(value: Any) -> str:
        return "-" if value is None else f"{value / 1e6:,.3f} MB"

    for name in ("jsonl", "sqlite", "memory"):
        row = result.get(name)
        if row is None:
            table.add_row(name, "not available", "", "", "", "")
            continue
        label = name + (" (format-4 estimate)" if row.get("estimate") else "")
        table.add_row(
            label,
            mb(row["scoped_main_bytes"]),
            mb(row["scoped_sidecar_peak_bytes"]),
            mb(row["scoped_sidecar_final_bytes"]),
            mb(row["unscoped_main_bytes"]),
            "-" if row["ratio"] is None else f"{row['ratio']:,.1f}×",
        )
    console.print(table)
    jsonl = result.get("jsonl") or {}
    breakdown = jsonl.get("scoped_main_breakdown")
    if breakdown:
        kinds = Table(
            title=(
                f"JSONL scoped main log per operation: {breakdown['bytes_per_op']:,.0f} B "
                f"(1,000× allows {jsonl['budget_bytes_per_op_for_1000x']:,} B); "
                f"{breakdown['settled_text_bytes_per_op']:,.0f} B of it settled text"
            )
        )
        for column in ("record kind", "bytes/op", "records/op"):
            kinds.add_column(column, justify="right")
        counts = breakdown["records_per_op_by_kind"]
        for kind, size in breakdown["bytes_per_op_by_kind"].items():
            count = counts.get(kind)
            kinds.add_row(kind, f"{size:,.0f}", "-" if count is None else f"{count:g}")
        console.print(kinds)


# -- the operation lifecycle: storage size and lifecycle-machine rate -------------


def bench_size(runs: int) -> dict[str, Any]:
    """Seed workload bytes, scoped vs. unscoped, per backend (scopecheck/bench/size.py)."""
    from scopecheck.bench.size import bench_size as run

    return run(runs)


def bench_lifecycle(runs: int) -> dict[str, Any]:
    """Lifecycle-machine steps/s per bundled backend (scopecheck/bench/lifecycle.py)."""
    from scopecheck.bench.lifecycle import bench_lifecycle as run

    return run(runs)


BENCHMARKS.update({"size": bench_size, "lifecycle": bench_lifecycle})
