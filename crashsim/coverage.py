"""Which crash points a budget covers first, and what the verdict may claim it covered.

A workload's trace can hold tens of thousands of mutating operations before its first
acknowledgement (a library's start-up), and a budget that walks them in trace order never
reaches a state after anything was acknowledged -- yet it would report thousands of crash
states checked.  So the crash points are ordered (CRASH-COV-1):

1. **after every acknowledgement** -- the first crash point after it (where a missing fsync
   shows: the step is acknowledged, its data is not durable);
2. **around every acknowledgement, sync, rename, unlink, link and rmdir** -- the last crash
   point before an acknowledgement, before and after each of the others (where ALICE and
   CrashMonkey found nearly every real crash-consistency bug);
3. **the rest, spread over the whole trace**: in bit-reversed order, so that any prefix of them
   is spread evenly rather than bunched at the start.

The points come in *passes*, each sorted by position, so an explorer builds the images of one
pass in a single sweep over the operations.  :class:`CrashCoverage` counts what was checked:
crash points and states, and the acknowledged steps with a checked crash point after their
acknowledgement.  A phase that did not cover every acknowledged step is ``incomplete``
(CRASH-COV-2), never ``passed``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import attrs

from scopecheck.crashsim.persistence import FileOp

#: Operations whose neighbourhood is checked before the spread of the rest.
ORDERING_KINDS = frozenset({"sync", "syncall", "rename", "unlink", "rmdir", "link"})
#: The sizes of the spread passes after the priority passes (then the rest in one pass).
SPREAD_PASSES = (8, 24, 64, 192, 512)


def crash_points(ops: Sequence[FileOp]) -> list[int]:
    """Every crash point of ``ops``: before each mutating operation, and at the end."""
    return [k for k, op in enumerate(ops) if op.mutating] + [len(ops)]


def acknowledgement_points(points: Sequence[int], acked_at: Iterable[int | None]) -> list[int]:
    """For each acknowledged step, the first crash point at or after its acknowledgement: the
    crash state in which that step must have survived."""
    found = []
    for at in acked_at:
        if at is None:
            continue
        index = bisect.bisect_left(points, at)
        found.append(points[min(index, len(points) - 1)])
    return found


def bit_reversed(count: int) -> list[int]:
    """``range(count)`` in bit-reversed order (0, half, a quarter, three quarters, ...)."""
    if count <= 1:
        return list(range(count))
    bits = (count - 1).bit_length()
    order = []
    for i in range(1 << bits):
        reversed_i = int(f"{i:0{bits}b}"[::-1], 2)
        if reversed_i < count:
            order.append(reversed_i)
    return order


def ordered_passes(ops: Sequence[FileOp], acked_at: Sequence[int | None]) -> list[list[int]]:
    """The crash points of ``ops`` in passes, most telling first (see the module docstring):
    the first crash point after each acknowledgement (and the end of the trace), then the
    last before each acknowledgement (the call that should have made the step durable), then
    the neighbours of every sync, rename, unlink, link and rmdir, then the rest spread out.
    Together the passes hold every crash point exactly once."""
    points = crash_points(ops)
    after = set(acknowledgement_points(points, acked_at)) | {points[-1]}
    before: set[int] = set()
    for at in acked_at:
        if at is not None:
            index = bisect.bisect_left(points, at)
            if index > 0:
                before.add(points[index - 1])
    before -= after
    around: set[int] = set()
    for k, op in enumerate(ops):
        if op.kind in ORDERING_KINDS:
            index = bisect.bisect_left(points, k)
            around.add(points[index])  # before it
            if index + 1 < len(points):
                around.add(points[index + 1])  # after it
    around -= after | before
    rest = [k for k in points if k not in after and k not in before and k not in around]
    spread = [rest[i] for i in bit_reversed(len(rest))]
    passes = [sorted(after), sorted(before), sorted(around)]
    start = 0
    for size in SPREAD_PASSES:
        if start >= len(spread):
            break
        passes.append(sorted(spread[start : start + size]))
        start += size
    if start < len(spread):
        passes.append(sorted(spread[start:]))
    return [p for p in passes if p]


@attrs.frozen
class CrashCoverage:
    """What a crash phase checked, summed over its workloads."""

    points_checked: int = 0
    points_total: int = 0
    states_checked: int = 0
    acked_covered: int = 0
    acked_total: int = 0
    recovery_states: int = 0
    #: Acknowledged steps whose crash point another shard checks (FLEET-4): not this
    #: run's to cover, and no sign that it checked nothing.
    acked_elsewhere: int = 0
    #: The fault (and kill) runs the first round makes right after its priority passes, and
    #: how many of them it owed: fewer than owed when the wall budget ran out (CRASH-COV-4).
    early_runs_made: int = 0
    early_runs_owed: int = 0
    #: Crash points checked of which an image could not be judged (CRASH-SYS-17): built from
    #: a file the trace cannot see, or past a call the trace or the model lost.  An
    #: acknowledged step whose crash point is one of them is not covered.
    points_unjudged: int = 0

    @property
    def complete(self) -> bool:
        """Every acknowledged step had a crash state after it checked (CRASH-COV-2), and the
        first round made the fault runs it owed (CRASH-COV-4)."""
        return self._acked_complete and self.early_runs_made >= self.early_runs_owed

    @property
    def _acked_complete(self) -> bool:
        ran = self.acked_total + self.acked_elsewhere > 0
        return ran and self.acked_covered >= self.acked_total

    def shortfall(self) -> list[str]:
        """What an incomplete phase did not cover, one phrase each."""
        short = []
        if not self._acked_complete:
            left = self.acked_total - self.acked_covered
            short.append(
                f"{left} acknowledged steps had no crash state checked after them"
                + (" (or none that could be judged)" if self.points_unjudged else "")
            )
        if self.early_runs_made < self.early_runs_owed:
            short.append(
                f"{self.early_runs_made} of the first round's {self.early_runs_owed} early "
                "I/O-fault and kill runs were made"
            )
        return short

    def __add__(self, other: CrashCoverage) -> CrashCoverage:
        return CrashCoverage(
            *(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True))
        )

    def describe(self) -> str:
        text = (
            f"covered {self.acked_covered:,} of {self.acked_total:,} acknowledged steps, "
            f"{self.points_checked:,} of {self.points_total:,} crash points"
        )
        if self.points_unjudged:
            text += f", {self.points_unjudged:,} crash points not judgeable"
        if self.recovery_states:
            text += f", {self.recovery_states:,} states crashed during recovery"
        return text

    def to_json(self) -> dict[str, int | bool]:
        return {**attrs.asdict(self), "complete": self.complete}
