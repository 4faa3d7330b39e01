"""``scopecheck merge REPORT.json...``: the ``--json`` verdicts of ``validate --shard K/N`` jobs
joined into one verdict, checked to hold every share of the fixed work exactly once.

Each shard made its share of the fixed work -- conformance cases, crash points, fault and kill
runs (FLEET-4) -- and listed what it made as units of a plan named by a digest.  Joining them
(FLEET-5):

* the reports must be shards of one run: the same backend, seed, ``--examples``, file-system
  profile, requirements and shard count, each index once; anything else is a ``UsageError``,
  since no verdict can be made of them;
* each phase joins the shards' reports of it: ``failed`` if one failed, else ``incomplete`` if
  one was, else ``skipped`` (with the first reason) if every shard skipped it, else ``ran``;
  its counts are summed, and so is crash coverage;
* the units of each kind must come from one plan (one digest), no unit may be made twice,
  and together they must be the whole plan: a shard missing, or shards that planned
  differently (a backend whose writes differ from run to run records other crash points in
  each job), leave the phase the units belong to ``incomplete`` with the reason -- never
  ``passed`` on ground no shard covered;
* failures and warnings are those of every shard (each with the reproducer its job saved:
  keep the jobs' ``--failures-dir`` as artifacts); the limits are each said once; ``seconds``
  is the longest shard's, the jobs having run side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.coverage import CrashCoverage
from scopecheck.crashsim.shards import UNIT_KINDS, Shard, Units
from scopecheck.models.errors import UsageError
from scopecheck.run.validate import (
    PHASES,
    UNIT_PHASES,
    VERSION,
    PhaseReport,
    Status,
    Verdict,
)

#: What every shard of one run must agree on, with the flag that sets it.
_SAME = {
    "backend": "the backend",
    "seed": "--seed",
    "examples": "--examples",
    "fs_profile": "--fs-profile",
    "required": "--require",
}


def read_reports(paths: Sequence[str | Path]) -> list[Verdict]:
    """The verdicts in ``paths``; a ``UsageError`` naming the file that is missing or holds
    no version-:data:`VERSION` verdict."""
    verdicts = []
    for path in paths:
        try:
            data = orjson.loads(Path(path).read_bytes())
        except FileNotFoundError:
            raise UsageError("not_found", f"{path}: no such report") from None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise UsageError("invalid_payload", f"{path}: not a JSON report: {exc}") from None
        try:
            verdicts.append(Verdict.from_json(data))
        except ValueError as exc:
            raise UsageError(
                "invalid_payload",
                f"{path}: {exc}; give the output of scopecheck validate --shard K/N --json "
                f"(version {VERSION})",
            ) from None
    return verdicts


def merge_verdicts(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict of the shards ``verdicts`` (see the module docstring)."""
    if not verdicts:
        raise UsageError("invalid_query", "give at least one report to merge")
    first = verdicts[0]
    count = _shard_count(verdicts)
    for verdict in verdicts[1:]:
        for field, flag in _SAME.items():
            if getattr(verdict, field) != getattr(first, field):
                raise UsageError(
                    "invalid_query",
                    f"the reports are not shards of one run: {flag} differs "
                    f"({getattr(first, field)!r} and {getattr(verdict, field)!r})",
                )
    shards = tuple(sorted((shard for v in verdicts for shard in v.shards),
                          key=lambda shard: shard.index))  # fmt: skip
    indices = [shard.index for shard in shards]
    twice = sorted({index for index in indices if indices.count(index) > 1})
    if twice:
        raise UsageError("invalid_query", f"shard {twice[0]}/{count} is given twice")
    missing = [index for index in range(1, count + 1) if index not in indices]
    phases = {name: join_phase([v.phases[name] for v in verdicts]) for name in PHASES}
    units: dict[str, Units] = {}
    gaps: dict[str, list[str]] = {}
    for kind in UNIT_KINDS:
        given = [(v.shards, v.units[kind]) for v in verdicts if kind in v.units]
        if not given:
            continue
        joined, gap = _join_units(kind, given, missing, count)
        units[kind] = joined
        phase = UNIT_PHASES[kind]
        if gap is not None:
            gaps.setdefault(phase, []).append(gap)
    for phase, said in gaps.items():
        report = phases[phase]
        status: Status = "failed" if report.status == "failed" else "incomplete"
        detail = f"{report.detail} -- INCOMPLETE: {'; '.join(said)}"
        phases[phase] = attrs.evolve(report, status=status, detail=detail)
    failures = _once([f for v in verdicts for f in v.failures])
    order = {name: index for index, name in enumerate(PHASES)}
    return Verdict(
        backend=first.backend,
        phases=phases,
        failures=tuple(sorted(failures, key=lambda f: order[f.phase])),
        warnings=tuple(_once([f for v in verdicts for f in v.warnings])),
        fs_profile=first.fs_profile,
        limits=tuple(dict.fromkeys(limit for v in verdicts for limit in v.limits)),
        crash_coverage=_join_coverage([v.crash_coverage for v in verdicts], complete=not missing),
        required=first.required,
        budget=max((v.budget for v in verdicts if v.budget is not None), default=None),
        examples=first.examples,
        seed=first.seed,
        seconds=max(v.seconds for v in verdicts),
        shards=shards,
        units=units,
        internal_errors=tuple(_once([e for v in verdicts for e in v.internal_errors])),
        stopped=next((v.stopped for v in verdicts if v.stopped is not None), None),
    )


def _shard_count(verdicts: Sequence[Verdict]) -> int:
    counts = {shard.count for v in verdicts for shard in v.shards}
    unsharded = [v for v in verdicts if not v.shards]
    if unsharded:
        raise UsageError(
            "invalid_query",
            "a report of a whole run is no shard: merge the reports of validate --shard K/N",
        )
    if len(counts) > 1:
        raise UsageError(
            "invalid_query", f"the reports split the work differently (N = {sorted(counts)})"
        )
    return counts.pop()


def join_phase(reports: Sequence[PhaseReport]) -> PhaseReport:
    """One phase of the shards joined: failed if one failed, incomplete if one was, skipped
    when all were; work summed, the soonest first failure kept (FLEET-5)."""
    statuses = {report.status for report in reports}
    status: Status
    if "failed" in statuses:
        status = "failed"
    elif "incomplete" in statuses:
        status = "incomplete"
    elif statuses == {"skipped"}:
        return attrs.evolve(reports[0], seconds=max(r.seconds for r in reports))
    else:
        status = "ran"
    counts: dict[str, int] = {}
    for report in reports:
        for key, value in report.counts.items():
            if key == "first_failure_ms":  # the shards ran side by side: the soonest
                counts[key] = min(counts.get(key, value), value)
            else:
                counts[key] = counts.get(key, 0) + value
    parts = [f"{value:,} {key.replace('_', ' ')}" for key, value in counts.items()
             if not key.endswith("_ms")]  # timings are figures, not work done  # fmt: skip
    notes = [r.detail for r in reports if r.status in ("failed", "incomplete", "skipped")]
    shards = f"{len(reports)} shard{'s' if len(reports) > 1 else ''}"
    detail = f"{shards}: {', '.join(parts) or 'nothing counted'}"
    if notes:
        detail += "; " + "; ".join(dict.fromkeys(notes))
    return PhaseReport(status, detail, counts, max(r.seconds for r in reports))


def _join_units(
    kind: str, given: Sequence[tuple[tuple[Shard, ...], Units]], missing: Sequence[int],
    count: int,
) -> tuple[Units, str | None]:  # fmt: skip
    """The units of ``kind`` every shard made, and why they are not the whole plan once
    (``None``: they are)."""
    digests = sorted({units.digest for _, units in given})
    totals = sorted({units.total for _, units in given})
    made: dict[str, int] = {}
    for _, units in given:
        for unit in units.ids:
            made[unit] = made.get(unit, 0) + 1
    joined = Units(totals[-1], tuple(sorted(made, key=_unit_order)), digests[0])
    if len(digests) > 1 or len(totals) > 1:
        by = ", ".join(f"{shard} {units.digest}" for shards, units in given for shard in shards)
        return joined, (
            f"the shards planned different {kind} ({by}): the backend's work differs from run "
            "to run, so their shares cannot be joined; run that phase unsharded"
        )
    twice = [unit for unit, times in made.items() if times > 1]
    if twice:
        return joined, f"{len(twice)} {kind} were made by two shards"
    left = joined.total - len(made)
    if left:
        gave = {shard.index for shards, _ in given for shard in shards}
        silent = [index for index in range(1, count + 1) if index not in gave]
        named = missing or silent
        listed = ", ".join(f"{index}/{count}" for index in named)
        plural = "s" if len(named) > 1 else ""
        if missing:
            why = f"shard{plural} {listed} missing"
        elif silent:
            why = f"shard{plural} {listed} made none: see the phase's detail"
        else:
            why = "a shard stopped short of its share"
        return joined, f"{left:,} of {joined.total:,} {kind} made by no shard ({why})"
    return joined, None


def _unit_order(unit: str) -> tuple[int, float, str]:
    """Crash points and fault runs in number order, cases by name."""
    return (0, float(unit), "") if unit.isdigit() else (1, math.inf, unit)


def _join_coverage(
    coverages: Sequence[Mapping[str, Any] | None], *, complete: bool
) -> Mapping[str, Any] | None:
    """The shards' crash coverage summed; with every shard there, no acknowledged step is
    another's (FLEET-5)."""
    known = [c for c in coverages if c is not None]
    if not known:
        return None
    fields = attrs.fields_dict(CrashCoverage)
    total = CrashCoverage()
    for coverage in known:
        total += CrashCoverage(**{k: int(v) for k, v in coverage.items() if k in fields})
    if complete:
        total = attrs.evolve(total, acked_elsewhere=0)
    return total.to_json()


def _once(failures: Sequence[Any]) -> list[Any]:
    """Each failure once: two shards cannot find the same one, but a report given under two
    names would list it twice."""
    seen: set[bytes] = set()
    kept = []
    for failure in failures:
        key = orjson.dumps(failure.as_json())
        if key not in seen:
            seen.add(key)
            kept.append(failure)
    return kept
