"""Hypothesis strategies for the contract's values, shared by every machine and test.

Pools are small on purpose: a handful of scope IDs, namespaces, keys and entry ids makes
collisions common — write → retire → reuse cycles, equal addresses in different scopes,
duplicate ids and unknown parents all appear within a few steps.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from models.addresses import ListAddress, ValueAddress, value, value_list
from models.scope import SESSION, EphemeralScope, Scope, ephemeral_scope
from models.writes import (
    AnyWrite,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    set_value,
)

SCOPE_IDS = ("op1", "op2", "../ü")
NAMESPACES = ("app", "pi.pending.tool_output")
KEYS = ("k", "")
ENTRY_IDS = ("e1", "e2", "e3", "e4", "e5")
USAGE_IDS = ("u1", "u2", "e1")
TAGS = ("base", "x")

scope_ids = st.sampled_from(SCOPE_IDS)
ephemeral_scopes = scope_ids.map(ephemeral_scope)
any_scopes: st.SearchStrategy[Scope] = st.one_of(st.just(SESSION), ephemeral_scopes)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=6),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=5,
)


def value_addresses(scopes: st.SearchStrategy[Scope] = any_scopes) -> st.SearchStrategy[Any]:
    return st.builds(value, st.sampled_from(NAMESPACES), st.sampled_from(KEYS), scopes)


def list_addresses(scopes: st.SearchStrategy[Scope] = any_scopes) -> st.SearchStrategy[Any]:
    return st.builds(value_list, st.sampled_from(NAMESPACES), st.sampled_from(KEYS), scopes)


def scoped_writes(scope: Scope) -> st.SearchStrategy[AnyWrite]:
    """Value and list writes in exactly ``scope``."""
    fixed = st.just(scope)
    values_at: st.SearchStrategy[ValueAddress[Any, Any]] = value_addresses(fixed)
    lists_at: st.SearchStrategy[ListAddress[Any, Any]] = list_addresses(fixed)
    return st.one_of(
        st.builds(set_value, values_at, json_values),
        st.builds(delete_value, values_at),
        st.builds(append_list, lists_at, json_values, st.none() | st.sampled_from(TAGS)),
        st.builds(append_list, lists_at, json_values, st.sampled_from(TAGS)),
        st.builds(delete_list, lists_at),
    )


usages = st.fixed_dictionaries(
    {"input": st.integers(0, 1000), "output": st.integers(0, 1000)},
    optional={
        "cacheRead": st.integers(0, 100),
        "totalTokens": st.integers(0, 2000),
        "cost": st.fixed_dictionaries(
            {"total": st.floats(0, 5, allow_nan=False)},
            optional={"input": st.floats(0, 1, allow_nan=False)},
        ),
    },
)

entry_writes = st.builds(
    insert_entry,
    st.sampled_from(ENTRY_IDS),
    st.none() | st.sampled_from(ENTRY_IDS),
    st.sampled_from(("message", "message", "custom", "model_change")),
    st.fixed_dictionaries({}, optional={"text": st.text(max_size=5)}),
)
usage_writes = st.builds(
    insert_usage,
    st.sampled_from(USAGE_IDS),
    usages,
    st.none() | st.sampled_from(ENTRY_IDS),
    st.booleans(),
)

session_writes: st.SearchStrategy[AnyWrite] = st.one_of(
    scoped_writes(SESSION), entry_writes, usage_writes
)


@st.composite
def ephemeral_transactions(draw: st.DrawFn) -> list[AnyWrite]:
    """One to four value/list writes, all in one ephemeral scope."""
    scope: EphemeralScope = draw(ephemeral_scopes)
    return draw(st.lists(scoped_writes(scope), min_size=1, max_size=4))


@st.composite
def list_batches(draw: st.DrawFn) -> list[AnyWrite]:
    """Several appends to one list in any scope (with tags), so pages and stops are exercised."""
    address = draw(list_addresses())
    elements = draw(
        st.lists(st.tuples(json_scalars, st.none() | st.sampled_from(TAGS)), min_size=1, max_size=6)
    )
    return [append_list(address, element, tag) for element, tag in elements]


@st.composite
def mixed_transactions(draw: st.DrawFn) -> list[Any]:
    """A transaction that breaks TX-1..TX-3 in one of four ways (placed anywhere)."""
    kind = draw(st.sampled_from(("mixed", "two_ids", "not_a_write", "retire_plus_ephemeral")))
    first: EphemeralScope = draw(ephemeral_scopes)
    eph = draw(scoped_writes(first))
    if kind == "mixed":
        other: Any = draw(session_writes)
    elif kind == "two_ids":
        second = draw(ephemeral_scopes.filter(lambda s: s != first))
        other = draw(scoped_writes(second))
    elif kind == "not_a_write":
        other = draw(st.sampled_from(("set k=1", None, 42, {"kind": "value"})))
    else:
        from models.writes import retire_scope

        other = retire_scope(draw(ephemeral_scopes))
    items = [eph, other]
    if draw(st.booleans()):
        items.reverse()
    return items
