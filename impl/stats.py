"""Running statistics shared by the backends: message count and usage totals (STATS-1)."""

from __future__ import annotations

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
