"""Deterministic transaction workloads and their expected states, for crash and I/O sweeps.

A workload is a list of valid, non-empty transactions drawn from a seeded ``random.Random``:
session transactions (entries, usage rows, session values and lists, retirements) and
ephemeral transactions (value/list writes in one scope), with scope IDs reused after retirement
and some payloads large enough to span several database pages.

Expected states come from replaying committed transactions on the reference model
(``models/reference.py``), never on a backend.  Timestamps depend only on the index of a
transaction in the workload (:class:`StepClock`), so a replay that skips a failed transaction
still agrees with the backend on every other one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import UsageError
from scopecheck.models.protocols import Storage
from scopecheck.models.records import Snapshot
from scopecheck.models.scope import EphemeralScope, ephemeral_scope
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

Transaction = tuple[AnyWrite, ...]
BASE_TIME = 1_700_000_000_000


@attrs.define
class StepClock:
    """A clock whose reading is set per transaction index: ``BASE_TIME + 1000 * index``."""

    now: int = BASE_TIME

    def at(self, index: int) -> StepClock:
        self.now = BASE_TIME + 1000 * index
        return self

    def __call__(self) -> int:
        return self.now


def make_workload(seed: int, transactions: int = 12, big_every: int = 4) -> list[Transaction]:
    """``transactions`` valid non-empty transactions; every ``big_every``-th carries a payload
    spanning several 4 KiB pages so torn writes hit multi-page commits."""
    rng = random.Random(seed)
    scopes = [ephemeral_scope(name) for name in ("op-1", "op/2", "op 3")]
    entries: list[str] = []
    counter = 0
    result: list[Transaction] = []
    for index in range(transactions):
        big = big_every > 0 and index % big_every == big_every - 1
        writes: list[AnyWrite] = []
        if rng.random() < 0.4:
            scope = rng.choice(scopes)
            for _ in range(rng.randint(1, 4)):
                writes.append(_scoped_write(rng, scope, big))
        else:
            for _ in range(rng.randint(1, 5)):
                counter += 1
                roll = rng.random()
                if roll < 0.25:
                    ident = f"e{counter}"
                    parent = rng.choice(entries) if entries and rng.random() < 0.8 else None
                    kind = rng.choice(("message", "message", "custom"))
                    payload = {"text": _text(rng, big), "n": counter}
                    writes.append(insert_entry(ident, parent, kind, payload))
                    entries.append(ident)
                elif roll < 0.4:
                    usage = usage_value(
                        input=rng.randint(0, 5000),
                        output=rng.randint(0, 500),
                        cost_input=rng.random() / 7,
                        cost_total=rng.random() / 3,
                    )
                    ref = rng.choice(entries) if entries and rng.random() < 0.5 else None
                    writes.append(insert_usage(f"u{counter}", usage, entry_id=ref))
                elif roll < 0.55:
                    writes.append(retire_scope(rng.choice(scopes)))
                else:
                    writes.append(_session_write(rng, big))
        result.append(tuple(writes))
    return result


def _text(rng: random.Random, big: bool) -> str:
    size = rng.randint(5000, 9000) if big else rng.randint(0, 40)
    return "".join(rng.choice("abcdefghij é€") for _ in range(size))


def _scoped_write(rng: random.Random, scope: EphemeralScope, big: bool) -> AnyWrite:
    key = rng.choice(("k1", "k2"))
    roll = rng.random()
    if roll < 0.4:
        return set_value(value("pi.op.state", key, scope), {"v": _text(rng, big)})
    if roll < 0.5:
        return delete_value(value("pi.op.state", key, scope))
    if roll < 0.9:
        tag = rng.choice((None, None, "done"))
        return append_list(value_list("pi.frames", key, scope), _text(rng, big), tag)
    return delete_list(value_list("pi.frames", key, scope))


def _session_write(rng: random.Random, big: bool) -> AnyWrite:
    key = rng.choice(("a", "b", "c"))
    roll = rng.random()
    if roll < 0.5:
        return set_value(value("app", key), [rng.randint(0, 9), _text(rng, big), True, None, 1.5])
    if roll < 0.6:
        return delete_value(value("app", key))
    if roll < 0.9:
        return append_list(value_list("log", key), rng.random(), rng.choice((None, "mark")))
    return delete_list(value_list("log", key))


def run(storage: Storage, workload: Sequence[Transaction], clock: StepClock) -> None:
    """Commit every transaction of ``workload`` in order with the per-index clock."""
    for index, writes in enumerate(workload):
        clock.at(index)
        storage.commit(writes)


def _reference_session() -> Any:
    from scopecheck.models.reference import ReferenceRepository

    return ReferenceRepository().create("expected")


def expected_snapshot(workload: Sequence[Transaction], indices: Iterable[int]) -> Snapshot:
    """The state after committing exactly ``workload[i] for i in indices``, in that order;
    a transaction the replay rejects (its parent entry was skipped) changes nothing.

    Computed by the reference model (``scopecheck.models.reference``, a fold over the committed log
    that shares no code with the backends) with the per-index timestamps of :class:`StepClock`.
    """
    session = _reference_session()
    for index in indices:
        try:
            session.commit(workload[index], StepClock().at(index).now)
        except UsageError as exc:  # depends on a skipped transaction: rejected, no change
            if exc.code not in ("unknown_reference", "duplicate_id"):
                raise
    snapshot: Snapshot = session.snapshot()
    return snapshot


def prefix_snapshots(workload: Sequence[Transaction]) -> list[Snapshot]:
    """``result[n]`` is the state after the first ``n`` transactions (n = 0..len)."""
    session = _reference_session()
    states = [session.snapshot()]
    for index, writes in enumerate(workload):
        session.commit(writes, StepClock().at(index).now)
        states.append(session.snapshot())
    return states
