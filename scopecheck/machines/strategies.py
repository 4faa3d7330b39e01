"""Hypothesis strategies for the contract's values, shared by every machine and test.

Pools are small on purpose: a handful of scope IDs, namespaces, keys and entry ids makes
collisions common — write → retire → reuse cycles, equal addresses in different scopes,
duplicate ids and unknown parents all appear within a few steps.  Values come from a fixed pool
of awkward JSON (``-0.0``, ``2**53 - 1``, ``2.0``, ``1.23e-6`` (spelled ``0.00000123``), ``true``
next to ``1``, non-ASCII text, nesting): each draw is one choice, which keeps the machines fast.
Payload encoding itself is tested with full recursive JSON strategies in ``tests/test_payload.py``.

Cost: Hypothesis's own drawing is most of a machine step, and it grows with the number of
choices *and* of nested strategy layers (each ``data.draw`` opens a span; ``one_of``, ``map``,
``composite``, ``fixed_dictionaries`` and lazily built strategies each add one).  The machines'
hot strategies are therefore flat: a ``sampled_from`` of prebuilt values, simplest first (one
choice, shrinking to index 0), with an alternative that should come up as often as another
listed several times over, rather than a ``one_of`` of small strategies.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.payload import MAX_SAFE_INTEGER
from scopecheck.models.scope import SESSION, Scope, ephemeral_scope
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


class _Element:
    """``index -> pool[index]`` for :func:`pick`.  Its repr is not an expression, so a printed
    program shows the drawn element's own (constructor) repr rather than a call of this:
    Hypothesis prints a mapped value as the call that made it only when that call is valid
    Python and shorter."""

    __slots__ = ("pool",)

    def __init__(self, pool: tuple[Any, ...]) -> None:
        self.pool = pool

    def __call__(self, index: int) -> Any:
        return self.pool[index]

    def __repr__(self) -> str:
        return f"<one of {len(self.pool)}>"


def pick(pool: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """One element of a fixed pool: a single integer choice that shrinks to index 0.

    Sampled by index: ``sampled_from(range(n)).map(...)`` costs one strategy layer per draw,
    like ``sampled_from(pool)``, where ``integers(0, n - 1).map(...)`` costs three.
    ``sampled_from(pool)`` itself would render the whole pool in its repr, which Hypothesis
    builds once per example whenever a swarm-disabled rule is drawn (it names the rules, and
    so their strategies, in an event): hundreds of kilobytes for the write pools.
    """
    return st.sampled_from(range(len(pool))).map(_Element(pool))


#: Hypothesis draws an index below this uniformly; above it, ever more rarely (its integer
#: distribution is uniform within ±256, then heavy-tailed toward small values).
UNIFORM_INDICES = 257


def interleave(*groups: tuple[Any, ...]) -> tuple[Any, ...]:
    """One pool from several groups, taking from each in turn (cycling the shorter ones): what
    ``one_of(pick(a), pick(b))`` draws, as a single choice.  Each group is drawn about as often
    as another however long the pool -- a concatenation would starve the last group, since
    indices past :data:`UNIFORM_INDICES` come up more rarely -- and each group keeps its order,
    so shrinking still lands on the first group's first element, then on early ones."""
    longest = max(len(group) for group in groups)
    return tuple(group[i % len(group)] for i in range(longest) for group in groups)


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


#: Every list address over the pools, scope by scope (session scope first).
LIST_ADDRESSES: tuple[ListAddress[Any, Any], ...] = _lists_in(ALL_SCOPES)


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

ENTRY_WRITES: tuple[AnyWrite, ...] = tuple(
    insert_entry(ident, parent, kind, payload)
    for parent in (None, *ENTRY_IDS)
    for ident in ENTRY_IDS
    for kind in ("message", "custom")
    for payload in ENTRY_PAYLOADS
)
USAGE_WRITES: tuple[AnyWrite, ...] = tuple(
    insert_usage(ident, row, entry, adjustment)
    for entry in (None, *ENTRY_IDS[:2])
    for ident in USAGE_IDS
    for row in USAGE_POOL
    for adjustment in (False, True)
)
entry_writes = pick(ENTRY_WRITES)
usage_writes = pick(USAGE_WRITES)

#: Session-scoped value/list writes, entries and usage rows, each kind about a third of the
#: time, in one choice.
session_writes: st.SearchStrategy[AnyWrite] = pick(
    interleave(write_pool(SESSION), ENTRY_WRITES, USAGE_WRITES)
)

#: A value/list write in any ephemeral scope, each scope a third of the time: one draw picks
#: the scope and the write together.
ephemeral_writes: st.SearchStrategy[Any] = pick(
    interleave(*(write_pool(scope) for scope in EPHEMERAL))
)
_MORE_SCOPED: dict[Scope, st.SearchStrategy[list[AnyWrite]]] = {}


_TRANSACTIONS: dict[Scope, st.SearchStrategy[list[AnyWrite]]] = {}


def scoped_transactions(scope: Scope) -> st.SearchStrategy[list[AnyWrite]]:
    """One to three value/list writes in exactly ``scope`` (cached: a rule drawing them with
    ``st.data()`` would otherwise build, validate and label a new strategy every step)."""
    cached = _TRANSACTIONS.get(scope)
    if cached is None:
        cached = _TRANSACTIONS[scope] = st.lists(scoped_writes(scope), min_size=1, max_size=3)
    return cached


def more_scoped_writes(scope: Scope, most: int) -> st.SearchStrategy[list[AnyWrite]]:
    """Up to ``most`` further value/list writes in ``scope`` (cached per scope and size)."""
    key: Any = (scope, most)
    cached = _MORE_SCOPED.get(key)
    if cached is None:
        cached = _MORE_SCOPED[key] = st.lists(scoped_writes(scope), max_size=most)
    return cached


@st.composite
def ephemeral_transactions(draw: st.DrawFn) -> list[AnyWrite]:
    """One to three value/list writes, all in one ephemeral scope: the first names the scope."""
    first = draw(ephemeral_writes)
    return [first, *draw(more_scoped_writes(first.address.scope, 2))]


_junk = st.sampled_from(("set k=1", None, 42, {"kind": "value"}))
_kinds = st.sampled_from(("mixed", "two_ids", "not_a_write", "retire_plus_ephemeral"))


def _appends(address: Any) -> tuple[AnyWrite, ...]:
    return tuple(append_list(address, item, tag) for item in JSON_POOL for tag in (None, *TAGS))


#: An append to any list in any scope, each list as often as another: one draw picks the list
#: and the element.
_first_appends = pick(interleave(*(_appends(address) for address in LIST_ADDRESSES)))
_MORE_APPENDS: dict[Any, st.SearchStrategy[list[AnyWrite]]] = {}


def _more_appends_to(address: Any) -> st.SearchStrategy[list[AnyWrite]]:
    """Up to four more prebuilt appends to ``address``: one choice per element, no encoding."""
    cached = _MORE_APPENDS.get(address)
    if cached is None:
        cached = _MORE_APPENDS[address] = st.lists(pick(_appends(address)), max_size=4)
    return cached


@st.composite
def list_batches(draw: st.DrawFn) -> list[AnyWrite]:
    """One to five appends to one list in any scope (with tags), so pages and stops are
    exercised; the first append names the list."""
    first = draw(_first_appends)
    return [first, *draw(_more_appends_to(first.address))]


_two_ids_partner = {scope: EPHEMERAL[(i + 1) % len(EPHEMERAL)] for i, scope in enumerate(EPHEMERAL)}


@st.composite
def mixed_transactions(draw: st.DrawFn) -> list[Any]:
    """A transaction that breaks TX-1..TX-3 in one of four ways (placed anywhere)."""
    kind = draw(_kinds)
    eph = draw(ephemeral_writes)
    if kind == "mixed":
        other: Any = draw(session_writes)
    elif kind == "two_ids":
        other = draw(scoped_writes(_two_ids_partner[eph.address.scope]))
    elif kind == "not_a_write":
        other = draw(_junk)
    else:
        other = retire_scope(draw(ephemeral_scopes))
    items = [eph, other]
    if draw(st.booleans()):
        items.reverse()
    return items
