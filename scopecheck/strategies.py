"""Hypothesis strategies for the contract's values, shared by every machine and test.

Pools are small on purpose: a handful of scope IDs, namespaces, keys and entry ids makes
collisions common — write → retire → reuse cycles, equal addresses in different scopes,
duplicate ids and unknown parents all appear within a few steps.  Values come from a fixed pool
of awkward JSON (``-0.0``, ``2**53 - 1``, ``2.0``, ``1.23e-6`` (spelled ``0.00000123``), ``true``
next to ``1``, non-ASCII text, nesting): each draw is one choice, which keeps the machines fast.
Payload encoding itself is tested with full recursive JSON strategies in ``tests/test_payload.py``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.payload import MAX_SAFE_INTEGER
from scopecheck.models.scope import SESSION, EphemeralScope, Scope, ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

SCOPE_IDS = ("op1", "op2", "../ü")
NAMESPACES = ("app", "pi.pending.tool_output")
KEYS = ("k", "")
ENTRY_IDS = ("e1", "e2", "e3", "e4", "e5")
USAGE_IDS = ("u1", "u2", "e1")
TAGS = ("base", "x")

JSON_POOL: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2**53 - 1,
    1.5,
    -0.0,
    2.0,
    1e-7,
    1.23e-6,
    1e21,
    "",
    "ü\u2028",
    [],
    [1, "a", None],
    {},
    {"a": {"b": [True, 1]}},
)


#: Identifier pairs related on purpose, simplest first so shrinking lands on ``("op", "op1")``:
#: a prefix and its extension, a percent-encoding look-alike (``a/b`` beside ``a%2Fb``, ``%``
#: beside ``%25``), dot segments, Unicode normalisation and case twins, and ids whose encoding
#: is long -- exactly at the 180-character limit beside a prefix of it.  Two ids of a pair name
#: two scopes (or Sessions, namespaces, keys) that a correct backend never lets alias; a backend
#: that matches by prefix, encodes lossily or normalises shows it at once (ADDR-1, SCOPE-4).
AT_LIMIT = "\u00fc" * 30  # encodeURIComponent gives 180 characters: the largest valid id
RELATED_IDS: tuple[tuple[str, str], ...] = (
    ("op", "op1"),
    ("op1", "op"),
    ("a/b", "a%2Fb"),
    ("%", "%25"),
    (".", ".."),
    ("e\u0301", "\u00e9"),
    ("A", "a"),
    ("a b", "a+b"),
    (AT_LIMIT, AT_LIMIT[:-1]),
    ("\U0001f642" * 15, "\U0001f642" * 14 + "x"),
)
#: Ids one step past the limit, refused everywhere (SCOPE-2): 31 x "ü" encodes to 186.
PAST_LIMIT = ("\u00fc" * 31, "\U0001f642" * 15 + "x")
related_ids = st.sampled_from(RELATED_IDS)


#: Keys whose orders disagree: code point against UTF-16 (U+FFFF sorts before U+10000 by code
#: point, after it by UTF-16 code unit), case, decimal text (``k10`` before ``k2``), prefixes,
#: composed and decomposed forms.  The many-keys rule writes a drawn subset in a drawn order.
ORDER_KEYS: tuple[str, ...] = (
    "a",
    "b",
    "",
    "B",
    "aa",
    "a b",
    "a/b",
    "k1",
    "k10",
    "k2",
    "\u00e9",
    "e\u0301",
    "~",
    "\uffff",
    "\U00010000",
    "\U0001f642",
)
order_keys = st.lists(st.sampled_from(ORDER_KEYS), min_size=2, max_size=8, unique=True)


def pick(pool: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """One element of a large fixed pool: a single integer choice that shrinks to index 0.

    ``sampled_from`` would do the same but renders the whole pool in its repr, which
    Hypothesis computes for large pools at a noticeable cost per run.
    """
    return st.integers(0, len(pool) - 1).map(pool.__getitem__)


EPHEMERAL = tuple(ephemeral_scope(i) for i in SCOPE_IDS)

#: Values that are not storable JSON (WRITE-3), each in a different way.
BAD_PAYLOADS: tuple[Any, ...] = (
    float("nan"),
    float("inf"),
    {1: "non-str key"},
    {"set": {1, 2}},
    b"bytes",
    2**64,
    2**53,
    1e17,
    "\ud800",
    [float("-inf")],
)


def build_bad_write(bad: Any, kind: int) -> AnyWrite:
    """Build a value (0), list (1) or entry (2) write around ``bad``; constructors refuse it."""
    if kind == 0:
        return set_value(value("app", "k"), bad)
    if kind == 1:
        return append_list(value_list("app", "k", EPHEMERAL[0]), bad, "base")
    return insert_entry("e1", None, "message", {"text": bad})


scope_ids = st.sampled_from(SCOPE_IDS)
ephemeral_scopes = st.sampled_from(EPHEMERAL)
ALL_SCOPES: tuple[Scope, ...] = (SESSION, *EPHEMERAL)
any_scopes: st.SearchStrategy[Scope] = st.sampled_from(ALL_SCOPES)

json_values = st.sampled_from(JSON_POOL)
json_scalars = json_values


def storable_float(number: float) -> bool:
    """Whether the boundary stores this finite float: not an integral one that JavaScript writes
    as an integer outside ±(2**53 - 1) (WRITE-8).  For ``st.floats(...).filter``."""
    return not (number.is_integer() and MAX_SAFE_INTEGER < abs(number) < 1e21)


#: Any storable JSON value, drawn from the whole space (the pools above stay small for the
#: machines): what a backend's own payload tests can use.
storable_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False).filter(storable_float)
    | st.text().filter(lambda text: not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
tags = st.sampled_from((None, None, *TAGS))


def _values_in(scopes: tuple[Scope, ...]) -> tuple[ValueAddress[Any, Any], ...]:
    return tuple(value(n, k, s) for s in scopes for n in NAMESPACES for k in KEYS)


def _lists_in(scopes: tuple[Scope, ...]) -> tuple[ListAddress[Any, Any], ...]:
    return tuple(value_list(n, k, s) for s in scopes for n in NAMESPACES for k in KEYS)


def value_addresses(scopes: tuple[Scope, ...] = ALL_SCOPES) -> st.SearchStrategy[Any]:
    return st.sampled_from(_values_in(scopes))


def list_addresses(scopes: tuple[Scope, ...] = ALL_SCOPES) -> st.SearchStrategy[Any]:
    return st.sampled_from(_lists_in(scopes))


_SCOPED: dict[Scope, st.SearchStrategy[AnyWrite]] = {}


def write_pool(scope: Scope) -> tuple[AnyWrite, ...]:
    """Every value/list write in ``scope`` over the pools, simplest first (shrinks to them).

    Drawing a whole write from this pool is a single choice, which keeps the machine's cost per
    step close to Hypothesis's own; printed programs show the writes' constructor reprs.
    """
    values_at = _values_in((scope,))
    lists_at = _lists_in((scope,))
    pool: list[AnyWrite] = []
    for item in JSON_POOL:
        pool.extend(set_value(a, item) for a in values_at)
        pool.extend(append_list(a, item, tag) for a in lists_at for tag in (None, *TAGS))
    pool.extend(delete_value(a) for a in values_at)
    pool.extend(delete_list(a) for a in lists_at)
    return tuple(pool)


def scoped_writes(scope: Scope) -> st.SearchStrategy[AnyWrite]:
    """Value and list writes in exactly ``scope`` (cached: building strategies is costly)."""
    cached = _SCOPED.get(scope)
    if cached is None:
        cached = _SCOPED[scope] = pick(write_pool(scope))
    return cached


USAGE_POOL = (
    usage_value(input=10, output=5),
    usage_value(input=1, output=2, cache_read=3, total_tokens=6, cost_total=0.1),
    usage_value(output=7, cost_input=0.3, cost_total=0.7),
)
ENTRY_PAYLOADS: tuple[dict[str, Any], ...] = (
    {},
    {"text": "hi"},
    {"message": {"role": "user", "content": "ü"}},
)

entry_writes = pick(
    tuple(
        insert_entry(ident, parent, kind, payload)
        for parent in (None, *ENTRY_IDS)
        for ident in ENTRY_IDS
        for kind in ("message", "custom")
        for payload in ENTRY_PAYLOADS
    )
)
usage_writes = pick(
    tuple(
        insert_usage(ident, row, entry, adjustment)
        for entry in (None, *ENTRY_IDS[:2])
        for ident in USAGE_IDS
        for row in USAGE_POOL
        for adjustment in (False, True)
    )
)

session_writes: st.SearchStrategy[AnyWrite] = st.one_of(
    scoped_writes(SESSION), entry_writes, usage_writes
)


@st.composite
def ephemeral_transactions(draw: st.DrawFn) -> list[AnyWrite]:
    """One to three value/list writes, all in one ephemeral scope."""
    scope: EphemeralScope = draw(ephemeral_scopes)
    return draw(st.lists(scoped_writes(scope), min_size=1, max_size=3))


_any_list_address = list_addresses()
_junk = st.sampled_from(("set k=1", None, 42, {"kind": "value"}))
_kinds = st.sampled_from(("mixed", "two_ids", "not_a_write", "retire_plus_ephemeral"))


_APPENDS: dict[Any, st.SearchStrategy[list[AnyWrite]]] = {}


def _appends_to(address: Any) -> st.SearchStrategy[list[AnyWrite]]:
    """One to five prebuilt appends to ``address``: one choice per element, no encoding."""
    cached = _APPENDS.get(address)
    if cached is None:
        pool = tuple(append_list(address, item, tag) for item in JSON_POOL for tag in (None, *TAGS))
        cached = _APPENDS[address] = st.lists(pick(pool), min_size=1, max_size=5)
    return cached


@st.composite
def list_batches(draw: st.DrawFn) -> list[AnyWrite]:
    """Several appends to one list in any scope (with tags), so pages and stops are exercised."""
    return draw(_appends_to(draw(_any_list_address)))


@st.composite
def mixed_transactions(draw: st.DrawFn) -> list[Any]:
    """A transaction that breaks TX-1..TX-3 in one of four ways (placed anywhere)."""
    kind = draw(_kinds)
    first: EphemeralScope = draw(ephemeral_scopes)
    eph = draw(scoped_writes(first))
    if kind == "mixed":
        other: Any = draw(session_writes)
    elif kind == "two_ids":
        second = EPHEMERAL[(EPHEMERAL.index(first) + 1) % len(EPHEMERAL)]
        other = draw(scoped_writes(second))
    elif kind == "not_a_write":
        other = draw(_junk)
    else:
        other = retire_scope(draw(ephemeral_scopes))
    items = [eph, other]
    if draw(st.booleans()):
        items.reverse()
    return items
