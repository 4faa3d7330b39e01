"""Splitting a fixed amount of work across CI jobs: which share a job makes, and what it covered.

``scopecheck validate --examples N --shard K/N`` makes the K-th of N shares of the work whose
extent is fixed -- the conformance cases, the crash points of the fixed crash exploration, its
fault and kill runs -- and lists what it covered as :class:`Units`; ``scopecheck merge`` joins
the shards' lists and checks them against one another (FLEET-4, FLEET-5).  A unit belongs to
a shard by its position in a plan every shard computes alike (the cases in collection order,
the crash points in coverage order, the fault runs in plan order), so the shares are disjoint
and together whole; :attr:`Units.digest` names the plan, so shards that computed different
plans (a backend whose writes differ from run to run) are told apart rather than joined.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.persistence import FileOp

#: The kinds of fixed work a run lists, in report order.
UNIT_KINDS = ("conformance cases", "crash points", "fault runs")


@attrs.frozen
class Shard:
    """The ``index``-th (from 1) of ``count`` shares of the fixed work (FLEET-4)."""

    index: int
    count: int

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ValueError(f"shard {self.index}/{self.count}: K must be 1..N")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/4"`` → the second of four shares; a ``ValueError`` saying the form otherwise."""
        index, slash, count = text.partition("/")
        try:
            if not slash:
                raise ValueError
            shard = cls(int(index), int(count))
        except ValueError:
            raise ValueError(
                f"--shard {text!r}: give K/N, the K-th of N jobs, 1 <= K <= N (e.g. 2/4)"
            ) from None
        return shard

    def owns(self, position: int) -> bool:
        """Whether the unit at ``position`` of a plan is this shard's: every ``count``-th from
        ``index - 1``, so each share is spread over the whole plan."""
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def digest(parts: Iterable[object]) -> str:
    """A short name of a plan: the SHA-256 of its parts' JSON, first 16 hex digits."""
    return hashlib.sha256(orjson.dumps(list(parts))).hexdigest()[:16]


def workload_digest(ops: Sequence[FileOp]) -> str:
    """The name of a recorded workload's crash-point and fault plan: each operation's kind,
    paths, offset and sizes -- not the bytes written, which may hold times or random ids and
    move no crash point."""
    return digest(
        (op.kind, op.path, op.target, op.offset, len(op.data), op.size, sorted(op.flags))
        for op in ops
    )


@attrs.frozen
class Units:
    """What a run covered of one kind of fixed work: the ``ids`` of the units it made, out of
    the ``total`` units of the whole plan ``digest`` names (a shard makes only its share of
    them, :meth:`Shard.owns`)."""

    total: int
    ids: tuple[str, ...]
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "covered": len(self.ids), "digest": self.digest,
                "ids": list(self.ids)}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Units:
        """The units of a report; a ``ValueError`` for a malformed one."""
        try:
            ids = tuple(str(unit) for unit in data["ids"])
            return cls(int(data["total"]), ids, str(data["digest"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed units: {exc}") from None
