"""The fork machine: the storage machine plus harness namespaces and fork steps (FORK-*).

``make_fork_machine(backend)`` extends :class:`~scopecheck.machines.storage.StorageMachine` with
rules that write lanes (tips, configs, states — complete, partial and data-only), labels, the
session name, op/pending/result state, unknown reserved namespaces (set, and set-then-deleted), and
with a ``fork`` rule that draws a random branch, entry, position or tree scope, and a
``fork_refused`` rule for the refusals other draws make rarely or never (a missing source, a
closed destination, data-only and partial lanes, options that are no ``ForkOptions``).  The
model computes the expected destination from the source's log
(:mod:`scopecheck.models.fork_model`); every fork step compares the outcome (destination id or
error code) and ``repository.list()`` -- a refused fork leaves no Session behind, on every
backend (FORK-1, CHECK-8) -- then the destination's complete logical state, its
``parent_session_id`` and the seq of its first commit (the high-water mark, FORK-6), then
deletes it again.  ``make_lockstep_machine`` runs Memory, JSONL and SQLite side by side.
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import scopecheck.machines.hygiene as hygiene
import scopecheck.machines.strategies as sx
from scopecheck.backends.registry import Backend, World
from scopecheck.machines.failures import MismatchError
from scopecheck.machines.storage import (
    BASE_TIME,
    SESSION_IDS,
    SessionPairMachine,
    describe_difference,
    outcome,
    same,
    step,
)
from scopecheck.models.addresses import ValueAddress, value, value_list
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import (
    AnyWrite,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    set_value,
)

BRANCHES = ("main", "side")
_tip_values = st.sampled_from((None, *sx.ENTRY_IDS))
_configs = st.sampled_from(({"model": "m1"}, {"model": "m2", "thinking": "high"}))
_busy = st.sampled_from(
    (
        {"currentOperationId": "op1", "lastOperationId": None, "inbox": []},
        {
            "currentOperationId": None,
            "lastOperationId": "op0",
            "inbox": [{"entryId": "e1", "kind": "steer"}],
        },
    )
)


@st.composite
def harness_writes(draw: st.DrawFn) -> list[AnyWrite]:
    """One transaction of harness-namespace writes (REFERENCE §5), including corrupting ones."""
    kind = draw(
        st.sampled_from(
            (
                *("lane",) * 4,
                *("chain",) * 3,
                "tip",
                "config",
                "state",
                "drop",
                "name",
                "label",
                "label",
                "ephemeral_ops",
                "unknown",
                "unknown_dead",
                "app",
                "app",
                "app_list",
                "app_list",
                "app_list_delete",
            )
        )
    )
    branch = draw(st.sampled_from(BRANCHES))
    if kind == "lane":
        return [
            set_value(value("pi.branch.tip", branch), draw(_tip_values)),
            set_value(value("pi.lane.config", branch), draw(_configs)),
            set_value(value("pi.lane.state", branch), draw(_busy)),
        ]
    if kind == "tip":
        return [set_value(value("pi.branch.tip", branch), draw(_tip_values))]
    if kind == "config":
        return [set_value(value("pi.lane.config", branch), draw(_configs))]
    if kind == "state":
        return [set_value(value("pi.lane.state", branch), draw(_busy))]
    if kind == "drop":
        ns = draw(st.sampled_from(("pi.branch.tip", "pi.lane.config", "pi.lane.state")))
        return [delete_value(value(ns, branch))]
    if kind == "name":
        return [set_value(value("pi.session.name"), draw(st.sampled_from(("a", "ü"))))]
    if kind == "label":
        return [set_value(value("pi.entry.label", draw(st.sampled_from(sx.ENTRY_IDS))), "lbl")]
    if kind == "ephemeral_ops":
        return [
            set_value(value("pi.result", "op1"), {"ok": True}),
            set_value(value("pi.op.meta", "op1"), 1),
            set_value(value("pi.pending.entry", "e9"), {}),
            append_list(value_list("pi.pending.assistant_frame", "op1:r1"), {"delta": "x"}),
        ]
    if kind == "unknown":
        ns = draw(st.sampled_from(("pi", "pi.future")))
        if draw(st.booleans()):
            return [set_value(value(ns, "k"), 1)]
        return [append_list(value_list(ns, "k"), 1)]
    if kind == "unknown_dead":
        ns = draw(st.sampled_from(("pi", "pi.future")))
        return [
            set_value(value(ns, "k"), 1),
            delete_value(value(ns, "k")),
            append_list(value_list(ns, "l"), 1),
            delete_list(value_list(ns, "l")),
        ]
    if kind == "app":
        return [set_value(value("my-app.state"), draw(sx.json_values))]
    if kind == "app_list":
        return [append_list(value_list("my-app.log"), draw(sx.json_values), draw(sx.tags))]
    if kind == "app_list_delete":
        return [delete_list(value_list("my-app.log"))]
    # chain: a few entries in a line, so ancestry walks have depth
    ids = draw(st.lists(st.sampled_from(sx.ENTRY_IDS), min_size=1, max_size=3, unique=True))
    parent = draw(st.sampled_from((None, *sx.ENTRY_IDS)))
    writes: list[AnyWrite] = []
    for ident in ids:
        writes.append(insert_entry(ident, parent, "message", {"text": ident}))
        parent = ident
    return writes


fork_options: st.SearchStrategy[ForkOptions] = st.one_of(
    st.builds(
        BranchFork,
        branch=st.sampled_from((*BRANCHES, "nope")),
        entry_id=st.none() | st.sampled_from((*sx.ENTRY_IDS, "e-none")),
        position=st.sampled_from(("at", "before")),
        id=st.sampled_from((None, "fork1", "s1")),
    ),
    st.builds(TreeFork, id=st.sampled_from((None, "fork1", "s2"))),
)

#: ``(source, options, first)`` of forks every backend must refuse before it copies anything,
#: which no other fork step makes often or at all, simplest first (FORK-1, FORK-2, REPO-1):
#:
#: * a source that does not exist: ``not_found``;
#: * ``first="close"``: the destination exists but is closed: ``already_exists`` (the registry
#:   decides, not the open handles);
#: * ``first="data-only"``/``"partial"``: the source's lane ``solo`` is only a tip
#:   (``data_only_branch``) or only a config (``corrupt``) -- written just before the fork and
#:   deleted again after it, so no later fork sees it;
#: * options that are no ``ForkOptions`` -- nothing, the TypeScript dict spelling (a missing
#:   ``branch``, an ``entry_id`` a tree fork does not have), a bare scope name:
#:   ``invalid_fork_options`` (no default scope, no implicit main).
REFUSED_FORKS: tuple[tuple[str, object, str], ...] = (
    ("gone", TreeFork(), ""),
    ("s2", TreeFork(id="s1"), "close"),
    ("s1", BranchFork("solo"), "data-only"),
    ("s1", BranchFork("solo"), "partial"),
    ("s1", None, ""),
    ("s1", {"scope": "tree"}, ""),
    ("s1", {"scope": "branch"}, ""),
    ("s1", {"scope": "tree", "entry_id": "e1"}, ""),
    ("s1", "tree", ""),
)
#: The address and value ``first`` sets in the source's lane ``solo`` before the fork (and
#: deletes after it).
_SOLO_LANE: dict[str, tuple[ValueAddress[Any, Any], object]] = {
    "data-only": (value("pi.branch.tip", "solo"), None),
    "partial": (value("pi.lane.config", "solo"), {"model": "m1"}),
}


class ForkMachine(SessionPairMachine):
    """Model vs. one backend over two Sessions, with harness writes and fork steps.

    Its own rule set (not the whole storage machine's), weighted towards what forks read:
    lanes whose tips name existing entries, entry chains, application state, and forks whose
    entry ids are drawn from the source's existing entries.
    """

    backend: ClassVar[Backend]
    forks_run: ClassVar[int] = 0
    forks_ok: ClassVar[int] = 0
    #: Fork outcomes by error code ("ok" for a fork that succeeded); set per machine class.
    outcomes: ClassVar[dict[str, int]] = {}

    def _entries(self, sid: str) -> list[str]:
        return [e.id for e in self.models[sid].snapshot().entries]

    def _entry_or_none(self, sid: str, data: st.DataObject) -> str | None:
        """An omitted entry id half the time, however many entries the source has (a legacy
        source starts with hundreds: a uniform pick would almost never omit it)."""
        entries = self._entries(sid)
        if not entries:
            return None
        return data.draw(st.none() | st.sampled_from(entries), "entry_id")

    @rule(sid=st.sampled_from(SESSION_IDS), writes=st.lists(sx.session_writes, max_size=3))
    @step
    def commit_session(self, sid: str, writes: list[Any]) -> None:
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), writes=sx.ephemeral_transactions())
    @step
    def commit_ephemeral(self, sid: str, writes: list[Any]) -> None:
        """Ephemeral state, including reserved namespaces: never copied (FORK-10)."""
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), writes=harness_writes())
    @step
    def commit_harness(self, sid: str, writes: list[AnyWrite]) -> None:
        """Lanes, labels, names, op/pending state, unknown reserved namespaces, app state."""
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), branch=st.sampled_from(BRANCHES), data=st.data())
    @step
    def configure_lane(self, sid: str, branch: str, data: st.DataObject) -> None:
        """A complete lane whose tip is an existing entry (or null)."""
        tip = data.draw(st.sampled_from([None, *self._entries(sid)]), "tip")
        self._commit(
            sid,
            [
                set_value(value("pi.branch.tip", branch), tip),
                set_value(value("pi.lane.config", branch), data.draw(_configs, "config")),
                set_value(value("pi.lane.state", branch), data.draw(_busy, "state")),
            ],
        )

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        namespace=st.sampled_from(("pi", "pi.future")),
        dead=st.sampled_from((True, True, True, False)),
        as_list=st.booleans(),
    )
    @step
    def unknown_reserved(self, sid: str, namespace: str, dead: bool, as_list: bool) -> None:
        """State in an undeclared reserved namespace: it fails a fork only while current
        (FORK-8); set-then-deleted history must not."""
        if as_list:
            writes: list[Any] = [append_list(value_list(namespace, "l"), 1)]
            if dead:
                writes.append(delete_list(value_list(namespace, "l")))
        else:
            writes = [set_value(value(namespace, "k"), 1)]
            if dead:
                writes.append(delete_value(value(namespace, "k")))
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), count=st.integers(1, 3), data=st.data())
    @step
    def add_entries(self, sid: str, count: int, data: st.DataObject) -> None:
        """A chain of new entries under an existing parent (or a new root), so trees branch."""
        existing = self._entries(sid)
        fresh = [e for e in sx.ENTRY_IDS if e not in existing][:count]
        if not fresh:
            return
        parent = data.draw(st.sampled_from([None, *existing]), "parent")
        writes: list[Any] = []
        for ident in fresh:
            kind = data.draw(st.sampled_from(("message", "custom")), "type")
            writes.append(insert_entry(ident, parent, kind, {"text": ident}))
            parent = ident
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), app=st.sampled_from(("my-app.state", "my-app.log")))
    @step
    def app_write(self, sid: str, app: str) -> None:
        self.now += 1
        writes: list[Any] = (
            [set_value(value(app), self.now)]
            if app.endswith("state")
            else [append_list(value_list(app), self.now)]
        )
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), branch=st.sampled_from(BRANCHES))
    @step
    def app_state_then_turn(self, sid: str, branch: str) -> None:
        """The 001 §1.1 scalar and list trace: the application records state (a scalar and a
        list element), then the lane takes a turn — a new entry under its tip, the tip moves
        there and the lane is complete.  Application rows now have seqs *below* the tip
        entry's, so a branch fork of this lane is exactly where a ``seq <= tip`` cutoff would
        copy them; branch scope must copy none (FORK-9)."""
        self.now += 1
        self._commit(
            sid,
            [
                set_value(value("my-app.state"), self.now),
                append_list(value_list("my-app.log"), self.now),
            ],
        )
        existing = self._entries(sid)
        fresh = [e for e in sx.ENTRY_IDS if e not in existing]
        tip_row = self.models[sid].get_value(value("pi.branch.tip", branch))
        tip = None if tip_row is None else tip_row.value
        writes: list[AnyWrite] = []
        if fresh:
            parent = tip if isinstance(tip, str) and tip in existing else None
            writes.append(insert_entry(fresh[0], parent, "message", {"text": fresh[0]}))
            tip = fresh[0]
        writes += [
            set_value(value("pi.branch.tip", branch), tip),
            set_value(value("pi.lane.config", branch), {"model": "m1"}),
            set_value(value("pi.lane.state", branch), {"currentOperationId": "op1"}),
        ]
        self._commit(sid, writes)

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        branch=st.sampled_from((*BRANCHES, "nope")),
        position=st.sampled_from(("at", "before")),
        dest=st.sampled_from((None, "fork1", "s1")),
        data=st.data(),
    )
    @step
    def fork_branch(
        self, sid: str, branch: str, position: Any, dest: str | None, data: st.DataObject
    ) -> None:
        """A branch fork at an entry drawn from the source (on or off the ancestry)."""
        entry = data.draw(st.sampled_from([None, "e-none", *self._entries(sid)]), "entry_id")
        self._fork(sid, BranchFork(branch, entry_id=entry, position=position, id=dest))

    @rule(sid=st.sampled_from(SESSION_IDS), options=fork_options)
    @step
    def fork(self, sid: str, options: ForkOptions) -> None:
        """Fork with random scope/branch/entry/position; compare the destination (FORK-*)."""
        self._fork(sid, options)

    @rule(sid=st.sampled_from(SESSION_IDS), dest=st.sampled_from((None, "fork1")))
    @step
    def fork_tree(self, sid: str, dest: str | None) -> None:
        self._fork(sid, TreeFork(id=dest))

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        tree=st.booleans(),
        position=st.sampled_from(("at", "before")),
        data=st.data(),
    )
    @step
    def fork_closed(self, sid: str, tree: bool, position: Any, data: st.DataObject) -> None:
        """Fork a *closed* source, then reopen it: a closed legacy file takes the bounded disk
        normaliser and must fork, where the open one rejects (001 §1.3, LEGACY-13)."""
        if tree:
            options: ForkOptions = TreeFork(id="fork1")
        else:
            branch = data.draw(st.sampled_from(BRANCHES), "branch")
            entry = self._entry_or_none(sid, data)
            options = BranchFork(branch, entry_id=entry, position=position, id="fork1")
        legacy = self.model.legacy.get(sid)
        pending = legacy is not None and len(self.model.logs[sid]) == legacy.imported
        self.stores[sid].close()
        self.model.close_session(sid)
        key = self._fork(sid, options)
        if pending:  # a closed, not yet upgraded legacy file (the disk normaliser)
            tally = type(self).outcomes
            tally[f"closed-legacy:{key}"] = tally.get(f"closed-legacy:{key}", 0) + 1
        self._reopen(sid)

    @rule(call=st.sampled_from(REFUSED_FORKS))
    @step
    def fork_refused(self, call: tuple[str, object, str]) -> None:
        """A fork every backend refuses before it copies anything, leaving nothing behind
        (FORK-1, FORK-2): ``call`` is ``(source, options, first)`` from
        :data:`REFUSED_FORKS`."""
        source, options, first = call
        closed = getattr(options, "id", None) if first == "close" else None
        lane = _SOLO_LANE.get(first)
        if closed is not None:
            self.stores[closed].close()
            self.model.close_session(closed)
        if lane is not None:
            self._commit(source, [set_value(*lane)])
        self._fork(source, options)
        if lane is not None:
            self._commit(source, [delete_value(lane[0])])
        if closed is not None:
            self._reopen(closed)

    def _reopen(self, sid: str) -> None:
        """Reopen a Session a step closed.  A backend that lost it fails the check; after a
        failed check nothing is reopened (the example ends), so a second error from the
        reopen can never hide the first."""
        self.models[sid] = self.model.open(sid)
        reopened = outcome(lambda: self.repo.open(sid))
        if reopened[0] != "ok":
            raise MismatchError(
                f"repository.open({sid!r}) of the Session the step closed: model gave ok, "
                f"backend gave {reopened!r}"
            )
        self.stores[sid] = reopened[1]

    def _fork(self, sid: str, options: object) -> str:
        """Fork on both sides and compare; returns the outcome ("ok" or the error code).

        Besides the outcome, ``repository.list()`` must equal the model's afterwards: a fork
        adds its destination and nothing else, a refused one adds nothing -- no destination,
        no placeholder under a fresh id (FORK-1, CHECK-8).  That is asked of the repository,
        so it holds on every backend; the disk diff (HYGIENE-3) is an extra check for worlds
        that have a disk, and the only one that sees stray files that name no Session."""
        self.now += 1
        root = hygiene.disk_root(self.world)
        before = hygiene.tree(root) if root is not None else frozenset()
        actual = outcome(lambda: self.repo.fork(sid, options))  # type: ignore[arg-type]
        named = getattr(options, "id", None)
        dest = actual[1] if actual[0] == "ok" else (named or "fork-model")
        expected = outcome(lambda: self.model.fork(sid, options, dest))
        same(f"fork({sid!r}, {options!r})", expected, actual)
        same(
            f"repository.list() after fork({sid!r}, {options!r}) (FORK-1)",
            ("ok", self.model.list()),
            outcome(self.repo.list),
        )
        if root is not None:
            after = hygiene.tree(root)
            left = (
                hygiene.strays(before, after, dest) if actual[0] == "ok" else sorted(after - before)
            )
            if left:
                self.finding(
                    MismatchError(
                        f"fork({sid!r}, {options!r}) left paths under {root} that are not its "
                        f"destination's (HYGIENE-3): {left}",
                        rules=("HYGIENE-3",),
                        check="a fork leaves paths beside its destination",
                        diverged=False,
                    )
                )
        type(self).forks_run += 1
        key = actual[1] if actual[0] == "error" else "ok"
        type(self).outcomes[key] = type(self).outcomes.get(key, 0) + 1
        if actual[0] != "ok":
            return key
        type(self).forks_ok += 1
        check_destination(self.model, self.repo, dest, sid)
        return key

    @precondition(lambda self: self.may_restart())
    @rule()
    @step
    def restart(self) -> None:
        """Forks of closed-then-reopened sources read what reached the disk."""
        self.restart_world()

    @invariant()
    def same_state(self) -> None:
        """Each Session's state is the model's, and the step left nothing behind (HYGIENE-1,
        HYGIENE-4)."""
        self.compare_sessions()
        self.check_leftovers()


def check_destination(model: ReferenceRepository, repo: Any, dest: str, source: str) -> None:
    """Open the destination on both sides, compare state, parent and high-water, delete it."""
    want = model.open(dest)
    got = repo.open(dest)
    try:
        expected, actual = want.snapshot(), got.snapshot()
        if expected != actual:
            raise MismatchError(describe_difference(dest, expected, actual))
        same("parent_session_id", ("ok", want.parent_session_id),
             ("ok", getattr(got, "parent_session_id", None)))  # fmt: skip
        probe = [set_value(value("probe"), 1)]
        now = BASE_TIME
        first_model = want.commit(probe, now)[0].seq
        first_backend = got.commit(probe)[0].seq
        same("first seq after fork (high-water)", ("ok", first_model), ("ok", first_backend))
    finally:
        got.close()
        model.close_session(dest)
    repo.delete(dest)
    model.delete(dest)


class LegacyForkMachine(ForkMachine):
    """The fork machine for worlds whose Sessions start as legacy files (``jsonl-legacy``):
    every example first forks a not-yet-upgraded source, open (must reject with
    ``legacy_not_upgraded``) or closed (the disk normaliser), so that state is never left
    to chance — any commit upgrades it (LEGACY-13)."""

    @initialize(
        sid=st.sampled_from(SESSION_IDS),
        closed=st.booleans(),
        tree=st.booleans(),
        position=st.sampled_from(("at", "before")),
        data=st.data(),
    )
    @step
    def legacy_fork_first(
        self, sid: str, closed: bool, tree: bool, position: Any, data: st.DataObject
    ) -> None:
        if closed:
            self.fork_closed(sid, tree, position, data)
            return
        options: ForkOptions = (
            TreeFork(id="fork1")
            if tree
            else BranchFork(
                "main",
                entry_id=self._entry_or_none(sid, data),
                position=position,
                id="fork1",
            )
        )
        self._fork(sid, options)


#: The spec rules each fork-machine step checks, so a failure can name the rule it broke.
FORK_STEP_RULES: dict[str, tuple[str, ...]] = {
    "commit_session": ("SEQ-1", "TX-6"),
    "commit_ephemeral": ("TX-3", "SEQ-1"),
    "commit_harness": ("SEQ-1",),
    "configure_lane": ("SEQ-1",),
    "unknown_reserved": ("SEQ-1",),
    "add_entries": ("WRITE-5", "WRITE-6"),
    "app_write": ("SEQ-1",),
    "app_state_then_turn": ("SEQ-1",),
    "fork": ("FORK-1", "FORK-2", "FORK-3", "FORK-4", "FORK-5", "FORK-6", "FORK-7", "FORK-8"),
    "fork_branch": ("FORK-1", "FORK-2", "FORK-3", "FORK-4"),
    "fork_tree": ("FORK-1", "FORK-6", "FORK-7", "FORK-9", "FORK-10", "FORK-11"),
    "fork_closed": ("FORK-1", "FORK-4", "FORK-6", "FORK-12"),
    "fork_refused": ("FORK-1", "FORK-2", "REPO-1"),
    "restart": ("REPO-2", "SEQ-7"),
}


ForkMachine.step_rules = {**FORK_STEP_RULES, "legacy_fork_first": FORK_STEP_RULES["fork"]}


def make_fork_machine(backend: Backend) -> type[ForkMachine]:
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).split()
    name = "".join(word[:1].upper() + word[1:] for word in words)
    base = LegacyForkMachine if backend.starts_legacy else ForkMachine
    return type(f"{name}ForkMachine", (base,), {"backend": backend, "outcomes": {}})


class LockstepForkMachine(RuleBasedStateMachine):
    """Memory, JSONL and SQLite driven by the same steps; every fork must produce identical
    logical destinations on all three (001 §5 "Backend equivalence")."""

    backends: ClassVar[tuple[Backend, ...]]

    def __init__(self) -> None:
        super().__init__()
        self.now = BASE_TIME
        self.worlds: list[World] = [b.new_world(lambda: self.now) for b in self.backends]
        self.repos = [w.repository() for w in self.worlds]
        self.stores = [{sid: r.create(sid) for sid in SESSION_IDS} for r in self.repos]

    def teardown(self) -> None:
        for world in self.worlds:
            world.cleanup()

    def _all(self, what: str, call: Any) -> list[Any]:
        results = [outcome(partial(call, i)) for i in range(len(self.repos))]
        for name, result in zip(self.backends[1:], results[1:], strict=True):
            same(f"{what} on {self.backends[0].name} vs {name.name}", results[0], result)
        return results

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        writes=st.one_of(harness_writes(), st.lists(sx.session_writes, max_size=3)),
    )
    def commit(self, sid: str, writes: list[AnyWrite]) -> None:
        self.now += 1
        self._all("commit", lambda i: self.stores[i][sid].commit(writes))

    @rule(sid=st.sampled_from(SESSION_IDS), options=fork_options)
    def fork(self, sid: str, options: ForkOptions) -> None:
        if options.id is None:
            return  # random ids differ per backend; the other machines cover omitted ids
        results = self._all("fork", lambda i: self.repos[i].fork(sid, options))
        if results[0][0] != "ok":
            return
        dest = results[0][1]
        opened = [r.open(dest) for r in self.repos]
        try:
            snaps = [s.snapshot() for s in opened]
            for name, snap in zip(self.backends[1:], snaps[1:], strict=True):
                if snap != snaps[0]:
                    raise MismatchError(
                        f"{name.name}: " + describe_difference(dest, snaps[0], snap)
                    )
            self._all(
                "high-water", lambda i: opened[i].commit([set_value(value("probe"), 1)])[0].seq
            )
        finally:
            for s in opened:
                s.close()
        for r in self.repos:
            r.delete(dest)

    @invariant()
    def same_sources(self) -> None:
        for sid in SESSION_IDS:
            snaps = [s[sid].snapshot() for s in self.stores]
            for snap in snaps[1:]:
                if snap != snaps[0]:
                    raise MismatchError(describe_difference(sid, snaps[0], snap))


def make_lockstep_machine(backends: tuple[Backend, ...]) -> type[LockstepForkMachine]:
    return type("LockstepForkMachineCase", (LockstepForkMachine,), {"backends": backends})
