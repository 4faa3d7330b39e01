"""Commit-time checks shared by every bundled backend (never by the reference model).

Order of checks, so every backend reports the same code for a transaction with several faults
(TX-5): (1) every item is a write; (2) the one-scope rule; (3) ids and references, in write order.
Nothing here touches state; a backend calls these before it mutates anything (TX-4).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import attrs

from scopecheck.models.errors import usage
from scopecheck.models.records import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, ListElement, Order
from scopecheck.models.scope import EphemeralScope
from scopecheck.models.writes import (
    WRITE_TYPES,
    AnyWrite,
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    SetValue,
)

_SCOPED_TYPES = (SetValue, DeleteValue, AppendList, DeleteList)


@attrs.frozen
class CheckedTransaction:
    """A transaction that passed the stateless checks; ``scope_id`` routes it (JSONL sidecars)."""

    writes: tuple[AnyWrite, ...]
    scope_id: str | None


def check_shape(writes: object) -> CheckedTransaction:
    """Checks (1) and (2): writes only, one static scope, at most one ephemeral ID (TX-1..TX-3)."""
    if isinstance(writes, (str, bytes)) or not isinstance(writes, Sequence):
        raise usage("invalid_transaction", "commit() takes a list of writes")
    items: list[AnyWrite] = []
    for index, item in enumerate(writes):
        if not isinstance(item, WRITE_TYPES):
            raise usage(
                "invalid_transaction",
                f"item {index} is not a write (got {type(item).__name__})",
                index=index,
            )
        items.append(item)
    scope_id: str | None = None
    session_index: int | None = None
    for index, item in enumerate(items):
        scope = item.address.scope if isinstance(item, _SCOPED_TYPES) else None
        if isinstance(scope, EphemeralScope):
            if scope_id is None:
                scope_id = scope.id
            elif scope.id != scope_id:
                raise usage(
                    "invalid_transaction",
                    f"write {index} is in scope {scope.id!r} but the transaction is in scope "
                    f"{scope_id!r}; one transaction may touch one ephemeral scope (TX-3)",
                    index=index,
                )
        elif session_index is None:
            session_index = index
        if scope_id is not None and session_index is not None:
            raise usage(
                "invalid_transaction",
                "a transaction may not mix session-scoped writes (values, entries, usage, "
                f"retirements) with ephemeral writes in scope {scope_id!r}; commit them "
                "separately (TX-2)",
                index=max(index, session_index),
            )
    return CheckedTransaction(tuple(items), scope_id)


def check_references(
    writes: Sequence[AnyWrite],
    id_exists: Callable[[str], bool],
    entry_exists: Callable[[str], bool],
) -> None:
    """Check (3): one shared entry/usage id space; parents and usage entries already exist or
    come earlier in the same transaction (WRITE-5, WRITE-6)."""
    new_ids: set[str] = set()
    new_entries: set[str] = set()
    for index, item in enumerate(writes):
        if isinstance(item, (InsertEntry, InsertUsage)):
            if item.id in new_ids or id_exists(item.id):
                raise usage(
                    "duplicate_id", f"id {item.id!r} is already used (WRITE-5)", index=index
                )
            if isinstance(item, InsertEntry):
                parent = item.parent_id
                if parent is not None and parent not in new_entries and not entry_exists(parent):
                    raise usage(
                        "unknown_reference",
                        f"entry {item.id!r} names parent {parent!r}, which is not an earlier "
                        "entry (WRITE-6)",
                        index=index,
                    )
                new_entries.add(item.id)
            elif item.entry_id is not None:
                ref = item.entry_id
                if ref not in new_entries and not entry_exists(ref):
                    raise usage(
                        "unknown_reference",
                        f"usage {item.id!r} names entry {ref!r}, which does not exist (WRITE-6)",
                        index=index,
                    )
            new_ids.add(item.id)


@attrs.frozen
class ListQuery:
    """Normalised list read options (LIST-2..LIST-5)."""

    cursor: int | None
    order: Order
    limit: int
    stop_at_tag: str | None


def check_list_query(
    cursor: object, order: object, limit: object, stop_at_tag: object
) -> ListQuery:
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
        raise usage("invalid_query", f"cursor must be a seq (int) or None (got {cursor!r})")
    if isinstance(cursor, int) and cursor < 0:
        raise usage("invalid_query", f"cursor must not be negative (got {cursor})")
    if order not in ("asc", "desc"):
        raise usage("invalid_query", f"order must be 'asc' or 'desc' (got {order!r})")
    if limit is None:
        page = DEFAULT_LIST_LIMIT
    elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise usage("invalid_query", f"limit must be a positive int (got {limit!r}) (LIST-3)")
    else:
        page = min(limit, MAX_LIST_LIMIT)
    if stop_at_tag is not None and (not isinstance(stop_at_tag, str) or not stop_at_tag):
        raise usage("invalid_query", "stop_at_tag must be a non-empty str (LIST-5)")
    return ListQuery(cursor, order, page, stop_at_tag)


def check_name(what: str, name: object) -> str:
    """Validate a namespace, key or prefix given to a read (ADDR-2)."""
    if not isinstance(name, str) or "\x00" in name:
        raise usage("invalid_address", f"{what} must be a str without NUL", value=repr(name))
    return name


def stops_at_marker(
    elements: Sequence[ListElement], stop_at_tag: str | None, page: list[ListElement]
) -> bool:
    """LIST-5: no marker before the page's last element, and the page is cut short only right
    after a marker.  Without a ``stop_at_tag`` nothing is a marker (an untagged element's
    ``None`` tag must not count as one), so the page is never cut."""
    if stop_at_tag is None:
        return len(page) == len(elements)
    if any(e.tag == stop_at_tag for e in page[:-1]):
        return False
    return len(page) == len(elements) or (bool(page) and page[-1].tag == stop_at_tag)


def stop_page(elements: Sequence[ListElement], stop_at_tag: str | None) -> list[ListElement]:
    """Cut an already-limited page after the first element tagged ``stop_at_tag`` (LIST-5).

    The contract (CHECK-2): the result is a prefix of the page; it ends at the first marker,
    marker included, and it is cut nowhere else.

    pre: len(elements) <= 4 and all(e.value_json == b"" for e in elements)
    post: __return__ == list(elements[: len(__return__)])
    post: stops_at_marker(elements, stop_at_tag, __return__)
    """
    if stop_at_tag is None:
        return list(elements)
    for index, element in enumerate(elements):
        if element.tag == stop_at_tag:
            return list(elements[: index + 1])
    return list(elements)


def _beyond(seq: int, cursor: int | None, order: str) -> bool:
    """LIST-2 in its own words: the cursor is exclusive, above it ascending, below descending."""
    if cursor is None:
        return True
    return seq > cursor if order == "asc" else seq < cursor


def _in_order(page: Sequence[ListElement], order: str) -> bool:
    """LIST-4: seqs strictly rise (``asc``) or strictly fall (``desc``) along the page."""
    pairs = itertools.pairwise(page)
    if order == "asc":
        return all(a.seq < b.seq for a, b in pairs)
    return all(a.seq > b.seq for a, b in pairs)


def _left_out(
    elements: Sequence[ListElement], cursor: int | None, order: str, page: list[ListElement]
) -> list[ListElement]:
    """The elements beyond the cursor that the page does not hold (seqs are unique)."""
    return [
        e for e in elements if _beyond(e.seq, cursor, order) and all(p.seq != e.seq for p in page)
    ]


def _skips_none(
    elements: Sequence[ListElement], cursor: int | None, order: str, page: list[ListElement]
) -> bool:
    """Everything beyond the cursor that the page leaves out comes after all of the page."""
    return all(
        e.seq > p.seq if order == "asc" else e.seq < p.seq
        for e in _left_out(elements, cursor, order, page)
        for p in page
    )


def _fits(page: list[ListElement], cursor: int | None, order: str, limit: int) -> bool:
    """At most ``limit`` elements (LIST-3), all beyond the cursor (LIST-2), in order (LIST-4)."""
    return (
        len(page) <= limit
        and all(_beyond(e.seq, cursor, order) for e in page)
        and _in_order(page, order)
    )


def _cut_right(
    elements: Sequence[ListElement],
    cursor: int | None,
    order: str,
    limit: int,
    stop_at_tag: str | None,
    page: list[ListElement],
) -> bool:
    """LIST-5: only the last element may carry the marker, and a page that is not full leaves
    nothing out unless it ends with the marker."""
    if stop_at_tag is not None and any(e.tag == stop_at_tag for e in page[:-1]):
        return False
    if len(page) == limit or not _left_out(elements, cursor, order, page):
        return True
    return bool(page) and page[-1].tag == stop_at_tag


def select_page(
    elements: Sequence[ListElement],
    cursor: int | None,
    order: str,
    limit: int,
    stop_at_tag: str | None,
) -> list[ListElement]:
    """One page of a list whose ``elements`` are in seq order, for checked query options.

    The contract says what a page is without saying how to cut it (CHECK-2, LIST-2..LIST-5): at
    most ``limit`` elements, all beyond the cursor, in the asked order; whatever beyond the cursor
    it leaves out comes after it (nothing skipped); and it leaves something out only when it is
    full or ends with the first ``stop_at_tag`` marker, which it includes.  (``order`` is typed
    ``str``, checked by a precondition: CrossHair 0.0.113 cannot build ``Literal`` arguments.)

    pre: len(elements) <= 4 and all(e.value_json == b"" for e in elements)
    pre: order in ("asc", "desc")
    pre: all(a.seq < b.seq for a, b in zip(elements, elements[1:]))
    pre: limit >= 1
    post: _fits(__return__, cursor, order, limit)
    post: _skips_none(elements, cursor, order, __return__)
    post: _cut_right(elements, cursor, order, limit, stop_at_tag, __return__)
    """
    if order == "asc":
        picked = [e for e in elements if cursor is None or e.seq > cursor]
    else:
        picked = [e for e in reversed(elements) if cursor is None or e.seq < cursor]
    return stop_page(picked[:limit], stop_at_tag)


def check_session_id(session_id: object) -> str:
    """A session id is a non-empty well-formed str without NUL (REPO-5)."""
    if not isinstance(session_id, str) or not session_id or "\x00" in session_id:
        raise usage(
            "invalid_session_id",
            f"session id must be a non-empty str without NUL (got {session_id!r})",
        )
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise usage("invalid_session_id", "session id is not well-formed Unicode") from None
    return session_id
