"""Running statistics shared by the backends: message count and usage totals (STATS-1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scopecheck.models.records import UsageTotals
from scopecheck.models.writes import USAGE_COST_FIELDS, USAGE_TOKEN_FIELDS

MESSAGE_TYPE = "message"


def add_usage(totals: UsageTotals, usage_value: dict[str, Any]) -> UsageTotals:
    """``totals`` plus one ledger row; rows are added in seq order so float sums agree."""
    cost = usage_value.get("cost") or {}
    return UsageTotals(
        input=totals.input + usage_value.get("input", 0),
        output=totals.output + usage_value.get("output", 0),
        cache_read=totals.cache_read + usage_value.get("cacheRead", 0),
        cache_write=totals.cache_write + usage_value.get("cacheWrite", 0),
        total_tokens=totals.total_tokens + usage_value.get("totalTokens", 0),
        cost_input=totals.cost_input + cost.get("input", 0),
        cost_output=totals.cost_output + cost.get("output", 0),
        cost_cache_read=totals.cost_cache_read + cost.get("cacheRead", 0),
        cost_cache_write=totals.cost_cache_write + cost.get("cacheWrite", 0),
        cost_total=totals.cost_total + cost.get("total", 0),
    )


class BadUsage(ValueError):
    """A usage value no writer could have produced: the constructor admits only int token
    counts (not bools) and a ``cost`` dict of numbers (``models/writes.py``), so on disk
    anything else is a corrupt record (JSONL-6)."""


def add_usages(totals: UsageTotals, rows: Iterable[dict[str, Any]]) -> UsageTotals:
    """``add_usage`` over many rows in order, with one result object (the JSONL replay path),
    checking each row as it goes: :class:`BadUsage` names the first bad field.

    The additions happen in exactly the order ``add_usage`` would make them, so float totals
    are bit-identical to adding the rows one by one.  The checks ride along because open must
    make them on every row anyway (JSONL-6) and this loop already reads every field.
    """
    start = (
        totals.input,
        totals.output,
        totals.cache_read,
        totals.cache_write,
        totals.total_tokens,
        totals.cost_input,
        totals.cost_output,
        totals.cost_cache_read,
        totals.cost_cache_write,
        totals.cost_total,
    )
    return UsageTotals(*_checked_sums(start, rows))


_ZERO = (0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)


_TOKEN_FIELDS = frozenset(USAGE_TOKEN_FIELDS)
_COST_FIELDS = frozenset(USAGE_COST_FIELDS)


def _checked_sums(start: tuple[Any, ...], rows: Iterable[dict[str, Any]]) -> tuple[Any, ...]:
    """The ten running sums over ``rows``.  Walks the keys a row has rather than asking for
    every field (rows hold a few of them; open runs this on every usage row), adding each
    field in row order as :func:`add_usage` would; other keys are ignored, as the
    constructor ignores them.  The token and cost chains look alike on purpose: one call per
    field to a shared helper would cost more than the whole chain."""
    i, o, cr, cw, tt, ci, co, ccr, ccw, ct = start
    for usage_value in rows:
        tokens = 0
        for name, count in usage_value.items():
            if name == "cost":
                if type(count) is not dict:
                    raise BadUsage(f"usage.cost must be a dict (got {count!r})")
                if len(count.keys() & _COST_FIELDS) != 5:
                    missing = sorted(_COST_FIELDS - count.keys())
                    raise BadUsage(f"usage.cost.{missing[0]} is missing (STATS-4)")
                for cost_name, amount in count.items():
                    if type(amount) is not float and type(amount) is not int:
                        if cost_name in _COST_FIELDS:
                            raise BadUsage(
                                f"usage.cost.{cost_name} must be a number (got {amount!r})"
                            )
                    elif cost_name == "total":
                        ct += amount
                    elif cost_name == "input":
                        ci += amount
                    elif cost_name == "output":
                        co += amount
                    elif cost_name == "cacheRead":
                        ccr += amount
                    elif cost_name == "cacheWrite":
                        ccw += amount
            elif type(count) is not int:
                if name in _TOKEN_FIELDS:
                    raise BadUsage(f"usage.{name} must be an int (got {count!r})")
                continue
            elif name in _TOKEN_FIELDS:
                tokens += 1
            if name == "input":
                i += count
            elif name == "output":
                o += count
            elif name == "totalTokens":
                tt += count
            elif name == "cacheRead":
                cr += count
            elif name == "cacheWrite":
                cw += count
        if tokens != 5 or "cost" not in usage_value:
            missing = sorted((_TOKEN_FIELDS | {"cost"}) - usage_value.keys())
            raise BadUsage(f"usage.{missing[0] if missing else 'cost'} is missing (STATS-4)")
    return i, o, cr, cw, tt, ci, co, ccr, ccw, ct


def usage_problem(usage_value: dict[str, Any]) -> str | None:
    """Why one usage value is bad, or ``None``: exactly :func:`add_usages`' checks."""
    try:
        _checked_sums(_ZERO, (usage_value,))
    except BadUsage as exc:
        return str(exc)
    return None
