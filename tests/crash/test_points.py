"""Crash points as values (CRASH-SYS-9, CRASH-SYS-12): every variant has one stable name that
a reproducer stores and parses back to the same variant, and every name of another shape is
refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.crashsim.points import (
    DataKept,
    EntriesKept,
    Only,
    Prefix,
    ProcessCrash,
    Strict,
    Torn,
    TornCall,
    Variant,
    parse_variant,
)

pytestmark = pytest.mark.rule("CRASH-SYS-9", "CRASH-SYS-12")

#: One variant of each kind, with its name and family.
NAMED: list[tuple[Variant, str, str]] = [
    (ProcessCrash(), "process", "process"),
    (TornCall("d/log", 3), "torn-call:d/log:3", "torn-call"),
    (TornCall("", 5), "torn-call::5", "torn-call"),
    (Strict(), "strict", "strict"),
    (DataKept(), "data-kept", "data-kept"),
    (EntriesKept(), "entries-kept", "entries-kept"),
    (Only("a"), "only:a", "only"),
    (Only("x:y"), "only:x:y", "only"),
    (Prefix(0), "prefix:0", "prefix"),
    (Prefix(12), "prefix:12", "prefix"),
    (Torn(1, "a", 0, 5000), "torn@1:a:0:5000", "torn"),
    (Torn(512, "dir/x:y", 2, 100), "torn@512:dir/x:y:2:100", "torn"),
]


@pytest.mark.parametrize(("variant", "name", "family"), NAMED, ids=[n for _, n, _ in NAMED])
def test_each_variant_has_its_stable_name_and_family(
    variant: Variant, name: str, family: str
) -> None:
    assert variant.name == str(variant) == name
    assert parse_variant(name) == variant
    assert variant.family == family
    assert variant.power_loss == (family not in ("process", "torn-call"))


PATHS = st.text(st.sampled_from("ab/:._-"), max_size=8)
NUMBERS = st.integers(0, 10**6)
VARIANTS: st.SearchStrategy[Variant] = st.one_of(
    st.just(ProcessCrash()),
    st.builds(TornCall, PATHS, NUMBERS),
    st.sampled_from([Strict(), DataKept(), EntriesKept()]),
    st.builds(Only, PATHS),
    st.builds(Prefix, NUMBERS),
    st.builds(Torn, st.sampled_from([1, 512, 4096]), PATHS, NUMBERS, NUMBERS),
)


@given(VARIANTS)
def test_every_name_parses_back_to_its_variant(variant: Variant) -> None:
    assert parse_variant(variant.name) == variant


@pytest.mark.parametrize(
    "name",
    [
        "", "Process", "process:", "strict:", "data_kept", "torn", "torn-call", "torn-call:a",
        "torn-call:a:", "torn-call:a:x", "torn-call:a:-1", "only", "prefix:", "prefix:x",
        "prefix:-1", "prefix:01", "prefix: 1", "prefix:+1", "torn@1:a:0", "torn@0:a:0:1",
        "torn@x:a:0:1", "torn@:a:0:1", "torn@1:a:-1:2", "torn@1:a:0:٣", "fault:eio",
        "no-crash", "kill:1:x",
    ],
)  # fmt: skip
def test_a_name_of_no_variant_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="no crash image is named"):
        parse_variant(name)
