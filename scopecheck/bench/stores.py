"""``scopecheck bench stores``: what ``validate --examples 5`` costs on each store of the
pinned suite (docs/findings.md) -- the time a CI job spends on it.

For each store and setting, the median over ``runs`` of: the whole run's wall time, crash
exploration's seconds, crash states per second of the time not spent in fault and kill runs,
fault and kill runs per second of theirs, and the seconds from the start of the run to its
first failure (the soonest a failing CI job could know).  Every run's outcome and failing rules
are listed too, so a figure is never read without the verdict it came with.  The targets are
every ``make_*`` factory of ``scopecheck.examples.stores`` whose store is installed (the
``stores`` extra), or the one given: a factory ``PATH_OR_MODULE:NAME`` or ``exec:CMD`` -- the
Go and Node stores of examples/go/stores and examples/node/stores, built as their tests build
them, or a user's own backend.  Figures, never assertions; run on an idle machine."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import statistics
import tempfile
from pathlib import Path
from typing import Any

from scopecheck.bench.common import environment

#: The fixed work of a pinned verdict (tests/stores): seed 1, 5 examples.
SEED = 1
EXAMPLES = 5
PACKAGE = "scopecheck.examples.stores"


def suite() -> tuple[list[str], list[str]]:
    """The factories of the pinned Python suite, and the stores that are not installed here
    (each as ``module: why``)."""
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None
    folder = Path(next(iter(spec.submodule_search_locations)))
    found, missing = [], []
    for path in sorted(folder.glob("*_store.py")):
        module = f"{PACKAGE}.{path.stem}"
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{path.stem}: {exc}")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        found += [f"{module}:{name}" for name in names if name.startswith("make_")]
    return found, missing


def measure(target: str) -> dict[str, Any]:
    """One ``validate --examples 5 --seed 1`` of ``target`` and its figures."""
    from scopecheck.run.validate import validate

    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-stores-") as failures:
        verdict = validate(target, budget=5, failures_dir=Path(failures), seed=SEED,
                           examples=EXAMPLES)  # fmt: skip
    crash = verdict.phases.get("crash exploration")
    counts = dict(crash.counts) if crash is not None else {}
    crash_s = crash.seconds if crash is not None else 0.0
    run_s = counts.get("fault_run_ms", 0) / 1000
    runs = counts.get("crash_fault_runs", 0) + counts.get("kill_runs", 0)
    states = counts.get("crash_states", 0)
    firsts = [p.counts["first_failure_ms"] for p in verdict.phases.values()
              if "first_failure_ms" in p.counts]  # fmt: skip
    profiles: dict[str, set[str]] = {}
    for failure in verdict.failures:
        if failure.rule:  # no profiles: under every one (not a power loss)
            profiles.setdefault(failure.rule, set()).update(failure.profiles or ("every",))
    return {
        "outcome": verdict.outcome,
        "rules": sorted({f.rule for f in verdict.failures if f.rule}),
        "profiles": {rule: sorted(names) for rule, names in sorted(profiles.items())},
        "wall_s": round(verdict.seconds, 2),
        "crash_s": round(crash_s, 2),
        "crash_states": states,
        "states_per_s": round(states / (crash_s - run_s), 1) if crash_s > run_s else None,
        "fault_runs": runs,
        "fault_runs_per_s": round(runs / run_s, 3) if run_s > 0 else None,
        "first_failure_s": round(min(firsts) / 1000, 2) if firsts else None,
    }


def _median(values: list[Any]) -> Any:
    numbers = [v for v in values if v is not None]
    return round(statistics.median(numbers), 2) if numbers else None


def bench_stores(runs: int, target: str | None = None) -> dict[str, Any]:
    """Each target measured ``runs`` times, one after the other (stores interleaved per
    round, so a slow minute of the machine touches every store alike)."""
    targets, missing = ([target], []) if target else suite()
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
    for _ in range(runs):
        for name in targets:
            measured[name].append(measure(name))
    figures = ("wall_s", "crash_s", "crash_states", "states_per_s", "fault_runs",
               "fault_runs_per_s", "first_failure_s")  # fmt: skip
    stores = {
        name: {
            **{figure: _median([run[figure] for run in each]) for figure in figures},
            "outcomes": [f"{run['outcome']} {' '.join(run['rules'])}".strip() for run in each],
            "all_wall_s": [run["wall_s"] for run in each],
            "profiles": each[-1]["profiles"],
        }
        for name, each in measured.items()
    }
    return {
        "benchmark": "stores",
        "environment": environment(),
        "runs": runs,
        "examples": EXAMPLES,
        "seed": SEED,
        "stores": stores,
        "not_installed": missing,
    }


def render(console: Any, result: dict[str, Any]) -> None:
    """One row per store and setting (medians), with the verdicts of its runs."""
    from rich.table import Table

    def shown(value: Any, digits: int = 1) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    table = Table(title=f"validate --examples {result['examples']} --seed {result['seed']} per "
                  f"store (median of {result['runs']})")  # fmt: skip
    for column in ("store", "wall s", "crash s", "states", "states/s", "runs", "runs/s",
                   "first failure s", "verdicts"):  # fmt: skip
        table.add_column(column)
    for name, row in result["stores"].items():
        table.add_row(
            name.removeprefix(f"{PACKAGE}."), shown(row["wall_s"]), shown(row["crash_s"]),
            shown(row["crash_states"], 0), shown(row["states_per_s"], 0),
            shown(row["fault_runs"], 0), shown(row["fault_runs_per_s"], 2),
            shown(row["first_failure_s"]), "; ".join(dict.fromkeys(row["outcomes"])),
        )  # fmt: skip
    console.print(table)
    for why in result["not_installed"]:
        console.print(f"[dim]not installed (pip install 'scopecheck[stores]'): {why}[/]")
