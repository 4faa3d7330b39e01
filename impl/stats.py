"""Running statistics shared by the backends: message count and usage totals (STATS-1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from models.records import UsageTotals

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


def add_usages(totals: UsageTotals, rows: Iterable[dict[str, Any]]) -> UsageTotals:
    """``add_usage`` over many rows in order, with one result object (the JSONL replay path).

    The additions happen in exactly the order ``add_usage`` would make them, so float totals
    are bit-identical to adding the rows one by one.
    """
    i, o, cr, cw, tt = (
        totals.input,
        totals.output,
        totals.cache_read,
        totals.cache_write,
        totals.total_tokens,
    )
    ci, co, ccr, ccw, ct = (
        totals.cost_input,
        totals.cost_output,
        totals.cost_cache_read,
        totals.cost_cache_write,
        totals.cost_total,
    )
    for usage_value in rows:
        get = usage_value.get
        i += get("input", 0)
        o += get("output", 0)
        cr += get("cacheRead", 0)
        cw += get("cacheWrite", 0)
        tt += get("totalTokens", 0)
        cost = get("cost") or {}
        if cost:
            ci += cost.get("input", 0)
            co += cost.get("output", 0)
            ccr += cost.get("cacheRead", 0)
            ccw += cost.get("cacheWrite", 0)
            ct += cost.get("total", 0)
        else:
            ci += 0
            co += 0
            ccr += 0
            ccw += 0
            ct += 0
    return UsageTotals(i, o, cr, cw, tt, ci, co, ccr, ccw, ct)
