"""Planted bugs in the order of scans and list pages (LIST-2..LIST-5, LIST-9): orders that
agree with the right one over one or two keys or a short list and only break over many, or at
a page edge.  Each is the real Memory backend handing out a Session that reorders one read
(:func:`~scopecheck.planted.seams.memory_over`)."""

from __future__ import annotations

from typing import Any

from scopecheck.backends.registry import Backend
from scopecheck.models.records import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, ListElement
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import WrappedSession, memory_over


class ScanInInsertionOrder(WrappedSession):
    """``scan_values`` returns the keys in the order they were written (by seq)."""

    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        rows = self._inner.scan_values(namespace, prefix, scope)
        return tuple(sorted(rows, key=lambda row: row[1].seq))


class ScanInUtf16Order(WrappedSession):
    """``scan_values`` sorts keys by UTF-16 code unit, as JavaScript's default sort does:
    U+FFFF then comes after U+10000."""

    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        rows = self._inner.scan_values(namespace, prefix, scope)
        return tuple(sorted(rows, key=lambda row: row[0].encode("utf-16-be")))


class DecimalListKeys(WrappedSession):
    """List elements kept under the decimal text of their seq, so a list reads in text order:
    seq 10 before seq 2."""

    def read_list(
        self,
        address: Any,
        *,
        cursor: Any = None,
        order: Any = "asc",
        limit: Any = None,
        stop_at_tag: Any = None,
    ) -> tuple[ListElement, ...]:
        self._inner.read_list(  # the real checks of the options, and their errors
            address, cursor=cursor, order=order, limit=limit, stop_at_tag=stop_at_tag
        )
        every = self._inner.read_list(address, limit=MAX_LIST_LIMIT)
        ordered = sorted(every, key=lambda e: str(e.seq), reverse=order == "desc")
        if cursor is not None:
            mark = str(cursor)
            ordered = [
                e for e in ordered if (str(e.seq) > mark if order == "asc" else str(e.seq) < mark)
            ]
        page: list[ListElement] = []
        for element in ordered:
            page.append(element)
            if element.tag is not None and element.tag == stop_at_tag:
                break
            if len(page) == (DEFAULT_LIST_LIMIT if limit is None else limit):
                break
        return tuple(page)


class DescendingPageFromTheStart(WrappedSession):
    """A first descending page is the first ``limit`` elements reversed, not the last."""

    def read_list(self, address: Any, **options: Any) -> tuple[ListElement, ...]:
        page: tuple[ListElement, ...] = self._inner.read_list(address, **options)
        if options.get("order") != "desc" or options.get("cursor") is not None:
            return page
        if options.get("stop_at_tag") is not None or not page:
            return page
        ascending = self._inner.read_list(address, order="asc", limit=len(page))
        return tuple(reversed(ascending))


def _register(name: str, wrap: type[WrappedSession], description: str) -> None:
    def make() -> Backend:
        return memory_over(name.removeprefix("memory-"), wrap, f"Memory, {name}")

    register(Mutant(name, "memory", description, make))


_register(
    "memory-scan-insertion-order",
    ScanInInsertionOrder,
    "scan_values returns keys in the order they were written (LIST-9)",
)
_register(
    "memory-scan-utf16-order",
    ScanInUtf16Order,
    "scan_values sorts keys by UTF-16 code unit: U+FFFF after U+10000 (LIST-9)",
)
_register(
    "memory-list-decimal-keys",
    DecimalListKeys,
    "list elements ordered by the decimal text of their seq: 10 before 2 (LIST-2, LIST-3)",
)
_register(
    "memory-desc-page-from-start",
    DescendingPageFromTheStart,
    "a first descending page holds the first elements reversed, not the last (LIST-3)",
)
