"""A stateful machine that crashes the JSONL backend mid-commit and recovers (CRASH-*).

One Session on pyfakefs through :class:`~scopecheck.crashsim.fs_recorder.RecordingFs`, with the
model (``scopecheck.models.reference``) as a list of acknowledged transactions.  Rules:

* ``commit`` — an ordinary commit; the handle must read the model state afterwards;
* ``crash_in_commit`` — arm a crash at a chosen mutating operation inside the next commit or its
  retirement cleanup (optionally after part of a write), commit, and if the crash hit, turn the
  disk into a crash image (``prefix``: what the process wrote; ``strict``/``entries-kept``:
  power loss of unsynced data, in the one persistence model, CRASH-8), reopen, and require the
  state before or after that commit (CRASH-2); the machine then continues from the recovered state;
* ``failed_unlink_retire`` — retire a scope while every sidecar unlink fails: the commit must
  succeed (CRASH-10) and the next open removes the file;
* ``restart`` — close and reopen.

Test tooling, not part of the package: ``tests/crash/test_crash_machine.py`` runs it, and runs it
over the planted JSONL crash bugs.
"""

from __future__ import annotations

import errno
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from scopecheck.crashsim.fs_recorder import Op, RecordingFs, SimulatedCrash
from scopecheck.crashsim.fs_source import file_ops
from scopecheck.crashsim.jsonl_sweep import ROOT, SCOPES, SESSION, dead_sidecars
from scopecheck.crashsim.persistence import Volume
from scopecheck.crashsim.points import EntriesKept, Strict
from scopecheck.crashsim.sandbox import Sandbox, StepClock
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import UsageError
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import AnyWrite, append_list, retire_scope, set_value

SCOPES_USED = ("op-1", "op/2")


@st.composite
def transactions(draw: st.DrawFn) -> tuple[AnyWrite, ...]:
    kind = draw(st.sampled_from(("scoped", "scoped", "session", "retire")))
    number = draw(st.integers(0, 9))
    if kind == "scoped":
        scope = ephemeral_scope(draw(st.sampled_from(SCOPES_USED)))
        writes: list[AnyWrite] = [set_value(value("pi.op.state", "k", scope), number)]
        if draw(st.booleans()):
            writes.append(append_list(value_list("frames", "f", scope), "x" * number, tag="t"))
        return tuple(writes)
    if kind == "session":
        return (
            set_value(value("app", f"k{number % 3}"), {"n": number}),
            append_list(value_list("log", "l"), number),
        )
    scope = ephemeral_scope(draw(st.sampled_from(SCOPES_USED)))
    return (retire_scope(scope), set_value(value("pi.result", scope.id), number))


class CrashMachine(RuleBasedStateMachine):
    """JSONL with crashes inside commits, checked against the model."""

    #: The repository under test (a planted bug's class in the mutant tests).
    repository_class: type[JsonlRepository] = JsonlRepository
    #: Crashes that hit (class-wide counter, for tests and reports).
    crashes = 0

    def __init__(self) -> None:
        super().__init__()
        self.box = Sandbox()
        self.clock = StepClock()
        self.ticks = 1
        self.acked: list[tuple[tuple[AnyWrite, ...], int]] = []
        self.entries = 0
        self.unlink_fails = False
        self._open(fresh=True)

    # -- plumbing -----------------------------------------------------------------------------

    def _fault(self, index: int, op: Op) -> Any:
        if self.unlink_fails and op.kind == "unlink" and op.path.startswith(SCOPES):
            return PermissionError(errno.EACCES, "injected: unlink refused")
        return None

    def _open(self, fresh: bool = False) -> None:
        self.initial = self.box.state()
        self.fs = RecordingFs(self.box.fs, fault=self._fault)
        self.repo = self.repository_class(ROOT, self.fs, self.clock, cwd="/crash")
        self.storage = self.repo.create(SESSION) if fresh else self.repo.open(SESSION)

    def _model(self, extra: tuple[AnyWrite, ...] | None = None) -> Any:
        session = ReferenceRepository().create(SESSION)
        for writes, now in self.acked:
            session.commit(writes, now)
        if extra is not None:
            try:
                session.commit(extra, self.clock.now)
            except UsageError:
                return None
        return session.snapshot()

    def _tick(self) -> None:
        self.ticks += 1
        self.clock.at(self.ticks)

    # -- rules --------------------------------------------------------------------------------

    @rule(tx=transactions())
    def commit(self, tx: tuple[AnyWrite, ...]) -> None:
        self._tick()
        self.storage.commit(tx)
        self.acked.append((tx, self.clock.now))

    @rule(
        tx=transactions(),
        point=st.integers(0, 7),
        partial=st.integers(0, 120),
        image=st.sampled_from(("prefix", "strict", "entries-kept")),
    )
    def crash_in_commit(
        self, tx: tuple[AnyWrite, ...], point: int, partial: int, image: str
    ) -> None:
        self._tick()
        before_ops = len(self.fs.ops)
        self.fs.crash_at = before_ops + point
        self.fs.partial = partial
        try:
            self.storage.commit(tx)
        except SimulatedCrash:
            type(self).crashes += 1
        else:
            self.fs.crash_at = None
            self.acked.append((tx, self.clock.now))
            return
        # The process died: build the crash image from the trace, then reopen.
        if image == "prefix":
            state = self.box.state()  # exactly what the process wrote, partial write included
        else:
            volume = Volume(self.initial)
            for op in file_ops(self.fs.ops, ROOT, self.initial):
                volume.apply(op)
            state = volume.power_image(Strict() if image == "strict" else EntriesKept())
        self.box.load(state)
        candidates = [self._model(), self._model(tx)]
        self._open()
        got = self.storage.snapshot()
        assert got in candidates, "recovered state is neither before nor after the crashed commit"
        if got == candidates[1] and got != candidates[0]:
            self.acked.append((tx, self.clock.now))

    @rule(scope=st.sampled_from(SCOPES_USED))
    def failed_unlink_retire(self, scope: str) -> None:
        self._tick()
        tx = (retire_scope(ephemeral_scope(scope)),)
        self.unlink_fails = True
        try:
            self.storage.commit(tx)  # must not raise: the retirement is committed (CRASH-10)
        finally:
            self.unlink_fails = False
        self.acked.append((tx, self.clock.now))

    @rule()
    def restart(self) -> None:
        self.storage.close()
        self._open()
        # Sidecars whose unlink failed (or was cut off) are gone after the open (CRASH-6/10).
        assert dead_sidecars(self.box.tree()) == []

    @invariant()
    def matches_model(self) -> None:
        assert self.storage.snapshot() == self._model()

    def teardown(self) -> None:
        self.storage.close()
