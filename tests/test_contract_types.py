"""Type and constructor tests of 000 §9.1 (the run-time half; tests/test_typing.py has mypy's)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.impl.memory import MemoryRepository
from scopecheck.models import errors
from scopecheck.models.addresses import ValueAddress, value, value_list
from scopecheck.models.scope import (
    MAX_ENCODED_SCOPE_ID,
    SESSION,
    EphemeralScope,
    SessionScope,
    encode_uri_component,
    ephemeral_scope,
)
from scopecheck.models.writes import (
    append_list,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)


@pytest.mark.rule("TYPE-1")
def test_session_addresses_default_to_session_scope() -> None:
    """``value(ns, key)`` and ``value_list(ns, key)`` are session-scoped with no scope ID."""
    assert value("ns", "k").scope == SESSION
    assert value_list("ns", "k").scope_id is None
    assert isinstance(value("ns").scope, SessionScope)


@pytest.mark.rule("TYPE-1")
def test_ephemeral_overloads_retain_ephemeral_scope() -> None:
    """An address built with an ephemeral scope carries that scope and its ID."""
    op = ephemeral_scope("op")
    assert value("ns", "k", op).scope == op
    assert value_list("ns", "k", op).scope_id == "op"


@pytest.mark.rule("SCOPE-3")
def test_scope_object_identity_is_irrelevant_equal_ids_access_the_same_state() -> None:
    """Two ``ephemeral_scope`` calls with one ID are equal, hash alike and reach one slot."""
    first, second = ephemeral_scope("op"), ephemeral_scope("op")
    assert first is not second and first == second and hash(first) == hash(second)
    storage = MemoryRepository(lambda: 0).create("s")
    storage.commit([set_value(value("ns", "k", first), 1)])
    assert storage.get_value(value("ns", "k", second)).value == 1  # type: ignore[union-attr]
    with pytest.raises(AttributeError):
        first.id = "other"  # type: ignore[misc]


@pytest.mark.rule("SCOPE-2")
@pytest.mark.parametrize(
    "bad", ["", "\ud800", "a\udfffb", "x" * (MAX_ENCODED_SCOPE_ID + 1), "é" * 31, 7, None]
)
def test_empty_overlong_and_malformed_ids_reject(bad: object) -> None:
    """Empty, lone-surrogate, non-str and over-180-encoded IDs raise ``invalid_scope``."""
    with pytest.raises(errors.UsageError) as caught:
        ephemeral_scope(bad)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_scope"
    # details["value"] shows the offending ID, printable (repr), cut to its first 40 characters.
    shown = caught.value.details.get("value")
    if isinstance(bad, str) and len(bad) > 40:
        assert shown == repr(bad[:40] + "…")
    else:
        assert shown == repr(bad)


@pytest.mark.rule("SCOPE-2")
def test_id_at_exactly_180_encoded_characters_is_accepted() -> None:
    """The limit is inclusive: 180 encoded characters pass, 181 fail."""
    assert ephemeral_scope("x" * 180).encoded_id == "x" * 180
    assert len(ephemeral_scope("é" * 30).encoded_id) == 180


@pytest.mark.rule("SCOPE-4")
@pytest.mark.parametrize(
    ("raw", "encoded"),
    [
        ("a/b", "a%2Fb"),
        ("..", ".."),
        (".", "."),
        ("a\\b", "a%5Cb"),
        ("%2F", "%252F"),
        ("ü", "%C3%BC"),
        ("😀", "%F0%9F%98%80"),
        ("-_.!~*'()", "-_.!~*'()"),
        ("a b?&=#+", "a%20b%3F%26%3D%23%2B"),
    ],
)
def test_separators_and_unicode_encode_without_path_escape(raw: str, encoded: str) -> None:
    """IDs encode exactly as JavaScript's encodeURIComponent; no separator survives."""
    scope = ephemeral_scope(raw)
    assert scope.encoded_id == encoded
    assert "/" not in scope.encoded_id and "\\" not in scope.encoded_id


@pytest.mark.rule("SCOPE-4")
@given(st.text(min_size=1, max_size=40))
def test_encoding_never_yields_a_separator_and_is_injective(text: str) -> None:
    """For any well-formed ID the encoding has no separator and decodes back to the ID."""
    from urllib.parse import unquote

    try:
        encoded = encode_uri_component(text)
    except UnicodeEncodeError:
        return
    assert "/" not in encoded and "\\" not in encoded and "\x00" not in encoded
    assert encoded.isascii()
    assert unquote(encoded) == text


@pytest.mark.rule("ADDR-1")
def test_session_and_ephemeral_addresses_with_equal_namespace_key_do_not_alias() -> None:
    """Equal namespace/key in different scopes are different addresses."""
    op = ephemeral_scope("op")
    assert value("ns", "k") != value("ns", "k", op)
    assert value("ns", "k", op) != value("ns", "k", ephemeral_scope("op2"))
    assert value("ns", "k", op) == value("ns", "k", ephemeral_scope("op"))


@pytest.mark.rule("ADDR-2")
@pytest.mark.parametrize("name", ["a\x00b", "\ud800", 3])
def test_nul_and_malformed_names_reject(name: object) -> None:
    """Namespaces and keys with NUL or lone surrogates raise ``invalid_address``."""
    for build in (lambda: value(name, "k"), lambda: value("ns", name), lambda: value_list(name)):  # type: ignore[arg-type]
        with pytest.raises(errors.UsageError) as caught:
            build()
        assert caught.value.code == "invalid_address"


@pytest.mark.rule("SCOPE-5", "RETIRE-1")
def test_only_ephemeral_scopes_can_be_retired() -> None:
    """``retire_scope`` refuses the session scope and non-scopes with ``invalid_scope``."""
    for bad in (SESSION, "op", None):
        with pytest.raises(errors.UsageError) as caught:
            retire_scope(bad)  # type: ignore[arg-type]
        assert caught.value.code == "invalid_scope"
    assert retire_scope(ephemeral_scope("op")).scope == SESSION


@pytest.mark.rule("LIST-6")
@pytest.mark.parametrize("tag", ["", 5, "\ud800"])
def test_empty_or_non_string_tags_reject(tag: object) -> None:
    """A tag must be a non-empty str."""
    with pytest.raises(errors.UsageError) as caught:
        append_list(value_list("l"), 1, tag)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_payload"


@pytest.mark.rule("TYPE-2")
def test_addresses_are_frozen_values() -> None:
    """Addresses and scopes cannot be mutated after construction."""
    address = value("ns", "k")
    with pytest.raises(AttributeError):
        address.key = "other"  # type: ignore[misc]
    assert isinstance(address, ValueAddress)
    assert isinstance(ephemeral_scope("x"), EphemeralScope)


_ID_BUILDERS = {
    "entry id": lambda bad: insert_entry(bad, None, "message"),
    "entry parent id": lambda bad: insert_entry("e", bad, "message"),
    "entry type": lambda bad: insert_entry("e", None, bad),
    "usage id": lambda bad: insert_usage(bad, usage_value()),
    "usage entry id": lambda bad: insert_usage("u", usage_value(), entry_id=bad),
}


@pytest.mark.rule("WRITE-3")
@pytest.mark.parametrize("field", sorted(_ID_BUILDERS))
@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", 3])
def test_entry_and_usage_ids_must_be_nonempty_wellformed_str(field: str, bad: object) -> None:
    """Entry ids, parents, types and usage ids are non-empty, NUL-free, well-formed str: else
    ``invalid_payload``, and the message names the field so the caller knows what to fix."""
    with pytest.raises(errors.UsageError) as caught:
        _ID_BUILDERS[field](bad)
    assert caught.value.code == "invalid_payload"
    assert caught.value.message.startswith(field + " ")
    assert _ID_BUILDERS[field]("ok-\u00e9") is not None


@pytest.mark.rule("ADDR-2")
def test_address_errors_name_the_part_and_carry_the_value() -> None:
    """The message says whether the namespace or the key is bad; ``details`` has the value."""
    for build, part, bad in (
        (lambda: value("a\x00b", "k"), "namespace", "a\x00b"),
        (lambda: value("ns", "a\x00b"), "key", "a\x00b"),
        (lambda: value_list(3), "namespace", repr(3)),  # type: ignore[arg-type]
        (lambda: value_list("ns", "\ud800"), "key", repr("\ud800")),
    ):
        with pytest.raises(errors.UsageError) as caught:
            build()
        assert caught.value.code == "invalid_address"
        assert caught.value.message.startswith(part + " ")
        assert caught.value.details["value"] == bad


@pytest.mark.rule("WRITE-3")
@pytest.mark.parametrize(
    ("usage", "shown"),
    [
        ({**usage_value(), "input": "3"}, "'3'"),
        ({**usage_value(), "output": True}, "True"),
        ({**usage_value(), "cost": []}, None),
        ({"input": 1}, None),
    ],
)
def test_bad_usage_rows_say_which_field(usage: dict[str, object], shown: str | None) -> None:
    """Token counts must be ints (bool is not) and cost a dict of numbers; the error names the
    field and shows the bad value."""
    with pytest.raises(errors.UsageError) as caught:
        insert_usage("u", usage)
    assert caught.value.code == "invalid_payload"
    assert caught.value.message.startswith("usage.")
    assert caught.value.details.get("value") == shown


@pytest.mark.rule("LIST-9", "ADDR-2")
def test_reads_refuse_the_wrong_kind_of_argument() -> None:
    """A value address is no list (``invalid_query``); a scan needs a str namespace and prefix
    without NUL (``invalid_address``)."""
    storage = MemoryRepository().create("s")
    for call, code in (
        (lambda: storage.read_list(value("ns", "k")), "invalid_query"),  # type: ignore[arg-type]
        (lambda: storage.scan_values(3), "invalid_address"),  # type: ignore[arg-type]
        (lambda: storage.scan_values("ns", "a\x00"), "invalid_address"),
    ):
        with pytest.raises(errors.UsageError) as caught:
            call()
        assert caught.value.code == code


@pytest.mark.rule("WRITE-3", "ADDR-1")
def test_writes_and_addresses_check_what_the_constructors_cannot() -> None:
    """A non-dict entry payload, raw non-bytes JSON in a write built directly, and a scope
    that is no scope are refused with their codes."""
    from scopecheck.models.writes import InsertEntry

    for build, code in (
        (lambda: insert_entry("e", None, "t", [1]), "invalid_payload"),  # type: ignore[arg-type]
        (lambda: InsertEntry("e", None, "t", "{}"), "invalid_payload"),  # type: ignore[arg-type]
        (lambda: value("ns", "k", "op"), "invalid_scope"),  # type: ignore[call-overload]
    ):
        with pytest.raises(errors.UsageError) as caught:
            build()
        assert caught.value.code == code
