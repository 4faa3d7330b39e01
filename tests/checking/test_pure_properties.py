"""Property tests of the model's pure parts, runnable on the CrossHair backend (CHECK-6).

They run like any test in the default profiles.  ``SCOPECHECK_PROFILE=crosshair`` runs them with
``backend="crosshair"`` (scopecheck/run/profiles.py): examples come from CrossHair's
solver instead of random draws.  Strategies stay small and flat (short text, a few list elements,
three tags) because the solver backend, like ``crosshair check``, finds branch bugs, not counting
bugs. The expected values are computed here from the rule text, never by calling the code under test
(the model is the oracle, and these tests check the oracle).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.machines.strategies import storable_float
from scopecheck.models.addresses import value, value_list
from scopecheck.models.fork_policy import LIST_DISPOSITIONS, Disposition, classify, classify_list
from scopecheck.models.payload import canonical_bytes, decode_json, encode_json
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.scope import (
    MAX_ENCODED_SCOPE_ID,
    decode_uri_component,
    encode_uri_component,
    ephemeral_scope,
    scope_id_problem,
)
from scopecheck.models.writes import AppendList, append_list, set_value

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53 - 1), 2**53 - 1)  # WRITE-8
    | st.floats(allow_nan=False, allow_infinity=False).filter(storable_float)
    | st.text(max_size=8)
)
json_values = (
    json_scalars
    | st.lists(json_scalars, max_size=3)
    | st.dictionaries(st.text(max_size=4), json_scalars, max_size=3)
)


def _well_formed(text: str) -> bool:
    return not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


# -- payload canonicalisation -----------------------------------------------------------------


def as_javascript(value: Any) -> Any:
    """``value`` as a JavaScript reader holds it: every number a double (``bool`` stays)."""
    if isinstance(value, (list, tuple)):
        return [as_javascript(item) for item in value]
    if isinstance(value, dict):
        return {key: as_javascript(item) for key, item in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@pytest.mark.rule("CHECK-6", "WRITE-3", "WRITE-8", "JSONL-25")
@given(json_values)
def test_payload_bytes_are_a_fixed_point_and_decode_to_an_equal_value(payload: Any) -> None:
    """Encoding is canonical: the bytes re-encode identically, on the write path and on the
    read path, and decode to the value a JavaScript reader gets from the payload (an integral
    float beyond 2**53 is written as JavaScript writes it, whose digits are not its exact
    value: ``5.216565347660105e16`` is ``52165653476601050``)."""
    data = encode_json(payload)
    assert encode_json(decode_json(data)) == data
    assert canonical_bytes(orjson.loads(data)) == data
    assert as_javascript(decode_json(data)) == as_javascript(payload)


# -- scope IDs --------------------------------------------------------------------------------


@pytest.mark.rule("CHECK-6", "SCOPE-2", "SCOPE-4")
@given(st.text(max_size=6))
def test_scope_ids_are_accepted_exactly_as_the_rule_says(text: str) -> None:
    """Valid iff non-empty, well-formed and at most 180 encoded characters; the encoding is
    JavaScript's encodeURIComponent (checked against urllib's quote) and decodes back."""
    valid = (
        text != ""
        and _well_formed(text)
        and len(quote(text.encode(), safe="!*'()")) <= MAX_ENCODED_SCOPE_ID
    )
    assert (scope_id_problem(text) is None) == valid
    if valid:
        encoded = ephemeral_scope(text).encoded_id
        assert encoded == quote(text.encode(), safe="!*'()")
        assert "/" not in encoded and "\\" not in encoded and encoded.isascii()
        assert decode_uri_component(encoded) == text


@pytest.mark.rule("CHECK-6", "SCOPE-4")
@given(st.text(max_size=4), st.text(max_size=4))
def test_scope_encoding_is_injective(a: str, b: str) -> None:
    """Two different well-formed IDs never share an encoded form (so never a sidecar)."""
    if a != b and _well_formed(a) and _well_formed(b):
        assert encode_uri_component(a) != encode_uri_component(b)


# -- list paging in the reference model -------------------------------------------------------

TAGS = st.sampled_from([None, "a", "b"])


@pytest.mark.rule("CHECK-6", "LIST-2", "LIST-3", "LIST-4", "LIST-5")
@given(
    st.lists(st.tuples(TAGS, st.booleans()), max_size=5),
    st.none() | st.integers(0, 12),
    st.sampled_from(["asc", "desc"]),
    st.none() | st.integers(1, 6),
    st.none() | st.sampled_from(["a", "b"]),
)
def test_reference_model_pages_lists_as_the_rules_say(
    appends: list[tuple[str | None, bool]],
    cursor: int | None,
    order: str,
    limit: int | None,
    stop_at_tag: str | None,
) -> None:
    """The page is the elements beyond the exclusive cursor, in order, at most ``limit`` (1000
    by default), cut right after the first ``stop_at_tag`` marker."""
    session = ReferenceRepository().create("s")
    writes: list[Any] = []
    for index, (tag, gap) in enumerate(appends):
        if gap:  # another record takes a seq, so the list's seqs are not contiguous (SEQ-4)
            writes.append(set_value(value("other"), index))
        writes.append(append_list(value_list("l"), index, tag))
    committed = session.commit(writes, 0) if writes else ()
    elements = [(c.seq, c.write.tag) for c in committed if isinstance(c.write, AppendList)]
    beyond = [
        e
        for e in elements
        if cursor is None or (e[0] > cursor if order == "asc" else e[0] < cursor)
    ]
    expected = sorted(beyond, reverse=order == "desc")[: 1000 if limit is None else limit]
    if stop_at_tag is not None:
        marks = [i for i, e in enumerate(expected) if e[1] == stop_at_tag]
        if marks:
            expected = expected[: marks[0] + 1]
    page = session.read_list(
        value_list("l"), cursor=cursor, order=order, limit=limit, stop_at_tag=stop_at_tag
    )
    assert [(e.seq, e.tag) for e in page] == expected


# -- the fork classifier ----------------------------------------------------------------------


@pytest.mark.rule("CHECK-6", "FORK-7", "FORK-8", "FORK-9")
@given(st.sampled_from(["", "pi", "pi.", "pi.op.", "pi.pending.", "pi.result", "x"]), st.text())
def test_fork_classifier_is_total_and_closed(prefix: str, rest: str) -> None:
    """Every namespace gets a disposition; application data exactly when not reserved;
    excluded exactly pi.result, pi.op.* and pi.pending.*; lists only three dispositions."""
    name = prefix + rest
    reserved = name == "pi" or name.startswith("pi.")
    excluded = name == "pi.result" or name.startswith(("pi.op.", "pi.pending."))
    scalar = classify(name)
    assert (scalar is Disposition.APPLICATION) == (not reserved)
    assert (scalar is Disposition.EXCLUDE) == excluded
    listed = classify_list(name)
    assert listed in LIST_DISPOSITIONS
    assert (listed is Disposition.APPLICATION) == (not reserved)
    assert (listed is Disposition.EXCLUDE) == excluded


@pytest.mark.rule("CHECK-6")
def test_the_crosshair_profile_draws_from_the_crosshair_backend() -> None:
    """The opt-in profile exists and really selects the solver backend (it is registered only
    when asked for, so this registers it without loading it)."""
    from hypothesis import settings

    from scopecheck.run.profiles import PROFILES, register_crosshair_profile

    assert "crosshair" in PROFILES
    register_crosshair_profile()
    assert settings.get_profile("scopecheck-crosshair").backend == "crosshair"


def test_the_stop_page_contract_can_fail() -> None:
    """The CrossHair postcondition of ``stop_page`` (LIST-5) must reject what a broken pager
    would return: a page running past a marker, a page cut short without one; and accept the
    right pages.  A contract that cannot fail checks nothing (CHECK-1)."""
    from scopecheck.impl.validation import stop_page, stops_at_marker
    from scopecheck.models.records import ListElement

    elements = [ListElement(1, b"1", "m"), ListElement(2, b"2", None), ListElement(3, b"3", None)]
    assert not stops_at_marker(elements, "m", elements)  # ran past the marker
    # Cut short although no marker was asked for: the untagged element's None tag once
    # passed for a marker here, so CrossHair could not catch such a pager.
    assert not stops_at_marker(elements, None, elements[:2])
    assert not stops_at_marker(elements, "x", elements[:1])  # cut short, not at a marker
    middle = [ListElement(1, b"1", None), ListElement(2, b"2", "m"), ListElement(3, b"3", None)]
    assert not stops_at_marker(middle, "m", middle)  # ran past a marker in the middle
    assert stops_at_marker(middle, "m", middle[:2])
    assert stops_at_marker(elements, "m", elements[:1])
    assert stops_at_marker(elements, None, elements)
    for tag in ("m", None, "absent"):
        assert stops_at_marker(elements, tag, stop_page(elements, tag))
