"""The JSONL benchmark runs and reports its figures (no timing assertions); the batched usage
sum used by replay agrees with the one-row-at-a-time sum bit for bit, and its checks accept
exactly the usage values the constructor admits."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopecheck.bench.jsonl import bench_jsonl
from scopecheck.impl.stats import add_usage, add_usages, usage_problem
from scopecheck.models.errors import UsageError
from scopecheck.models.records import UsageTotals
from scopecheck.models.writes import insert_usage


def test_bench_jsonl_reports_open_ratio_and_commit_rate() -> None:
    """A tiny run returns every figure the issue asks for."""
    report = bench_jsonl(repeat=1, commits=5, sizes=(50_000,), fuzz_examples=0, transcripts=False)
    figures = report["open"]["50000B"]
    assert set(figures) >= {"parse_mb_s", "open_mb_s", "ratio", "bytes"}
    assert figures["bytes"] >= 50_000 and figures["ratio"] > 0
    assert report["commits"]["main_commits_per_s"] > 0
    assert report["commits"]["sidecar_commits_per_s"] > 0


def test_bench_jsonl_table_shows_each_size_with_its_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``scopecheck bench jsonl`` renders one row per size, with the ratio the target names."""
    from scopecheck.bench import render

    report = bench_jsonl(repeat=1, commits=2, sizes=(40_000, 60_000), fuzz_examples=0)
    render("jsonl", report)
    out = capsys.readouterr().out
    assert "synthetic 40000B" in out and "synthetic 60000B" in out and "ratio" in out
    assert set(report["open_transcripts"]) == {"before-compaction", "large-session"}
    for name in report["open_transcripts"]:
        assert f"real {name}" in out
    for figures in report["open"].values():
        assert f"{figures['ratio']:.3f}" in out
    assert "commits/s with fsync" in out


numbers = st.integers(-1000, 1000) | st.floats(-1e6, 1e6, allow_nan=False)
TOKEN_FIELDS = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
COST_FIELDS = ("input", "output", "cacheRead", "cacheWrite", "total")
#: JSON values a writer produces: integers a JavaScript reader holds exactly (WRITE-8).
safe = st.integers(-(2**53 - 1), 2**53 - 1)
odd = st.none() | st.booleans() | st.text(max_size=2) | st.lists(safe, max_size=1)


def shuffled(pairs: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Key order is the writer's (the user's dict order), so sums must not depend on it."""
    return pairs.flatmap(lambda d: st.permutations(list(d.items())).map(dict))


usage_rows = shuffled(
    st.fixed_dictionaries(
        {
            **{name: st.integers(0, 10**6) for name in TOKEN_FIELDS},
            "cost": shuffled(
                st.fixed_dictionaries(
                    {name: numbers for name in COST_FIELDS}, optional={"note": odd}
                )
            ),
        },
        optional={"note": odd},  # keys the constructor does not know are kept and ignored
    )
)


@settings(max_examples=200)
@given(rows=st.lists(usage_rows, max_size=8))
def test_add_usages_equals_folding_add_usage(rows: list[dict[str, Any]]) -> None:
    """Replay's batched, checked sum is exactly the commit path's fold (STATS-1)."""
    folded = UsageTotals()
    for row in rows:
        folded = add_usage(folded, row)
    assert add_usages(UsageTotals(), rows) == folded


@pytest.mark.rule("JSONL-6")
@settings(max_examples=300)
@given(
    row=usage_rows,
    field=st.sampled_from([*TOKEN_FIELDS, "cost", *(f"cost.{n}" for n in COST_FIELDS)]),
    value=odd | numbers | st.dictionaries(st.sampled_from(COST_FIELDS), numbers, max_size=2),
)
def test_open_checks_a_usage_value_exactly_as_the_constructor_does(
    row: dict[str, Any], field: str, value: Any
) -> None:
    """A usage value read from a file is accepted (``usage_problem`` is ``None``) exactly when
    ``insert_usage`` would accept it, with one field set to anything."""
    row = dict(row)
    if field.startswith("cost.") and isinstance(row.get("cost"), dict):
        row["cost"] = dict(row["cost"], **{field[5:]: value})
    else:
        row[field.removeprefix("cost.")] = value
    try:
        insert_usage("u", row)
        admitted = True
    except UsageError:
        admitted = False
    assert (usage_problem(row) is None) == admitted, row


def test_measure_fuzz_reports_steps_per_second() -> None:
    """The fuzz figures name each machine's steps/s and the ratio to the trivial machine."""
    from scopecheck.bench.jsonl import measure_fuzz

    figures = measure_fuzz(examples=2, backends=("jsonl-fakefs",))
    assert figures["trivial"]["steps"] > 0 and figures["jsonl-fakefs"]["vs_trivial"] > 0


def test_lazy_records_never_hand_out_raw_dicts() -> None:
    """Every read path of the lazy resident maps returns built records (JSONL-7)."""
    from scopecheck.impl.jsonl.lazy import LazyRecords, build_value
    from scopecheck.models.records import ValueRecord

    lazy: LazyRecords[str, ValueRecord] = LazyRecords(build_value)
    for name in "abcde":
        lazy.put_raw(name, {"seq": ord(name), "value": [name]})
    lazy.pop_raw("e")
    assert lazy["a"] == ValueRecord(97, b'["a"]')
    assert lazy.get("b") == ValueRecord(98, b'["b"]') and lazy.get("zz") is None
    assert lazy.pop("c") == ValueRecord(99, b'["c"]') and "c" not in lazy
    assert list(lazy.items()) == [
        ("a", ValueRecord(97, b'["a"]')),
        ("b", ValueRecord(98, b'["b"]')),
        ("d", ValueRecord(100, b'["d"]')),
    ]
    assert all(isinstance(v, ValueRecord) for v in lazy.values())
    # a missing key gives the caller's default, as dict's get and pop do
    assert lazy.get("zz", "default") == "default" and lazy.pop("zz", "default") == "default"


def test_lazy_records_build_values_stored_after_replay_counted_them() -> None:
    """A value stored raw after ``count_raw`` (replay's note) is still built when read."""
    from scopecheck.impl.jsonl.lazy import LazyRecords, build_value
    from scopecheck.models.records import ValueRecord

    lazy: LazyRecords[str, ValueRecord] = LazyRecords(build_value)
    lazy["a"] = {"seq": 1, "value": "a"}  # type: ignore[assignment]  # replay's plain store
    lazy.count_raw()
    lazy.put_raw("b", {"seq": 2, "value": "b"})
    assert dict(lazy.items()) == {"a": ValueRecord(1, b'"a"'), "b": ValueRecord(2, b'"b"')}


def test_lazy_records_pop_builds_a_record_held_as_its_line() -> None:
    """``pop`` (a delete committed after open) finds a value held as the main-log line it
    shares with other records, as ``get`` does."""
    import orjson

    from scopecheck.impl.jsonl.lazy import LazyRecords, build_value, find_value
    from scopecheck.models.records import ValueRecord

    line = orjson.dumps(
        [
            {"kind": "value", "op": "set", "seq": v, "namespace": "n", "key": k, "value": v}
            for k, v in (("a", 1), ("b", 2))
        ]
    )
    lazy: LazyRecords[tuple[str | None, str, str], ValueRecord] = LazyRecords(
        build_value, find_value
    )
    lazy[(None, "n", "a")] = lazy[(None, "n", "b")] = line  # type: ignore[assignment]
    lazy.count_raw()
    assert lazy.pop((None, "n", "a")) == ValueRecord(1, b"1")
    assert lazy.pop((None, "n", "b")) == ValueRecord(2, b"2") and not lazy


def test_open_stages_accounts_for_the_whole_open() -> None:
    """The stage breakdown names every stage and its rows add up to the measured open."""
    from scopecheck.bench.jsonl_stages import STAGES, open_stages

    figures = open_stages(50_000, repeat=1)
    assert [row["stage"] for row in figures["stages"]] == [label for _, label in STAGES]
    total = sum(row["ms"] for row in figures["stages"])
    assert abs(total - figures["open_ms"]) < 0.1 and figures["ratio"] > 0
