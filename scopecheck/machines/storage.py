"""The stateful machine: the reference model against one backend, step by step.

``make_machine(backend)`` returns a :class:`~hypothesis.stateful.RuleBasedStateMachine` subclass.
Every rule performs one operation on the model and on the backend and compares the outcomes —
the return value, or the error code — and after every step the invariant compares the complete
logical state of every Session (``Snapshot``), so "a rejected transaction changed nothing" is
checked against the model, not assumed.  A failing run prints a program of ``state.rule(...)``
lines whose arguments are the contract's own constructors, runnable as Python.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import scopecheck.machines.hygiene as hygiene
import scopecheck.machines.strategies as sx
from scopecheck.backends.registry import Backend, World
from scopecheck.crashsim.shown import brief
from scopecheck.machines.failures import FailureKey, stamp
from scopecheck.machines.failures import MismatchError as MismatchError
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ProtocolError, ScopecheckError
from scopecheck.models.fork import TreeFork
from scopecheck.models.protocols import Repository, Storage
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository, ReferenceSession
from scopecheck.models.scope import EphemeralScope, ephemeral_scope
from scopecheck.models.writes import append_list, retire_scope, set_value

SESSION_IDS = ("s1", "s2")
#: Seconds a commit racing close() or fork() may take to return before the machine says so.
RACE_TIMEOUT = 30
#: Seconds the machine waits for a racing commit to read its clock (it holds it there), and
#: lets close() or fork() run before letting the commit go on: enough for either to start.
ADMISSION_WAIT = 0.25
SEAL_DELAY = 0.001
BASE_TIME = 1_750_000_000_000

Outcome = tuple[str, Any]

SIDS = st.sampled_from(SESSION_IDS)
#: ``read_list`` options, each drawn as one choice: no cursor, the seq of the i-th surviving
#: element (``("element", i)``) and a raw seq each a third of the time, like a ``one_of`` of the
#: three; likewise the limits (none, small or invalid, huge) and stop tags (none, or a tag or
#: the invalid empty one).  ``read_page`` draws valid ones only.
CURSORS: tuple[Any, ...] = sx.interleave(
    (None,), tuple(("element", i) for i in range(7)), tuple(range(-1, 41))
)
LIMITS: tuple[int | None, ...] = sx.interleave((None,), tuple(range(-1, 7)), (10**6,))
STOPS: tuple[str | None, ...] = sx.interleave((None,), (*sx.TAGS, ""))
PAGE_CURSORS: tuple[Any, ...] = sx.interleave((None,), tuple(("element", i) for i in range(7)))


def outcome(call: Callable[[], Any]) -> Outcome:
    """Run ``call``; a ScopecheckError becomes ``("error", code)``, anything else propagates --
    a :class:`~scopecheck.models.errors.ProtocolError` too: a backend process that speaks the
    protocol wrongly has no outcome to compare (PROC-2)."""
    try:
        return ("ok", call())
    except ProtocolError:
        raise
    except ScopecheckError as exc:
        return ("error", exc.code)


def restart_spacing(world: World) -> int:
    """The steps a world needs between two restart steps: its ``restart_spacing`` if it has
    one (a backend in a child process, whose every restart starts a new process: PROC-9), else
    0 -- an in-process restart may come at any step."""
    return int(getattr(world, "restart_spacing", 0))


T = TypeVar("T")


def step(function: Callable[..., T]) -> Callable[..., T | None]:
    """A machine step (under its ``@rule``): it names the step a failure comes from, and a
    failure the run already reported is recorded instead of raised (CHECK-9) -- after it the
    example runs its remaining steps as no-ops, since the backend may no longer agree with the
    model.  A step called by another step is part of it."""

    @functools.wraps(function)
    def run(self: SessionPairMachine, *args: Any, **kwargs: Any) -> T | None:
        if self.halted:
            return None
        if self.stepping:
            return function(self, *args, **kwargs)
        self.step, self.stepping = function.__name__, True
        try:
            return self.guard(lambda: function(self, *args, **kwargs))
        finally:
            self.stepping = False

    return run


#: The corner steps ``StorageMachine.corner`` takes, each with its arguments' values (every
#: combination is a step; the first value of each is the simplest).  ``many_keys`` also draws
#: its keys, as a list (``sx.order_keys``).
CORNERS: dict[str, tuple[tuple[str, tuple[Any, ...]], ...]] = {
    "related_scopes": (
        ("sid", SESSION_IDS),
        ("pair", sx.RELATED_IDS),
        ("retire", (None, 0, 1)),
        ("restart", (False, True)),
    ),
    "related_names": (
        ("sid", SESSION_IDS),
        ("pair", sx.RELATED_IDS),
        ("scope", sx.ALL_SCOPES),
        ("as_keys", (False, True)),
    ),
    "related_sessions": (
        ("pair", sx.RELATED_IDS),
        ("restart", (False, True)),
    ),
    "many_keys": (
        ("sid", SESSION_IDS),
        ("scope", sx.ALL_SCOPES),
    ),
    "many_elements": (
        ("sid", SESSION_IDS),
        ("address", sx.LIST_ADDRESSES),
        ("count", (10, 11, 12)),
        ("limit", (3, 4, 5, 6, 7)),
        ("order", ("asc", "desc")),
    ),
    "race": (
        ("sid", SESSION_IDS),
        ("count", (2, 3)),
        ("fork", (False, True)),
    ),
}


def corner_steps(kind: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every ``(kind, arguments)`` step of one corner (its arguments in :data:`CORNERS`), the
    simplest first."""
    names = [name for name, _ in CORNERS[kind]]
    combos = itertools.product(*(values for _, values in CORNERS[kind]))
    return tuple((kind, dict(zip(names, combo, strict=True))) for combo in combos)


def _argument_chunks(kind: str) -> list[st.SearchStrategy[dict[str, Any]]]:
    """A corner's arguments in as few one-choice draws as keep every draw uniform: consecutive
    arguments share a draw while their combinations fit in ``sx.UNIFORM_INDICES``."""
    chunks: list[list[tuple[str, tuple[Any, ...]]]] = [[]]
    size = 1
    for name, values in CORNERS[kind]:
        if chunks[-1] and size * len(values) > sx.UNIFORM_INDICES:
            chunks.append([])
            size = 1
        chunks[-1].append((name, values))
        size *= len(values)
    return [
        sx.pick(
            tuple(
                dict(zip([name for name, _ in chunk], combo, strict=True))
                for combo in itertools.product(*(values for _, values in chunk))
            )
        )
        for chunk in chunks
    ]


@st.composite
def _corner_of(
    draw: st.DrawFn, kind: str, chunks: list[st.SearchStrategy[dict[str, Any]]]
) -> tuple[str, dict[str, Any]]:
    arguments: dict[str, Any] = {}
    for chunk in chunks:
        arguments.update(draw(chunk))
    if kind == "many_keys":  # its keys are a drawn list, between the Session and the scope
        keys = draw(sx.order_keys)
        arguments = {"sid": arguments["sid"], "keys": keys, "scope": arguments["scope"]}
    return (kind, arguments)


def _corner(kind: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """One corner's steps: a single choice where they are few, else one per argument chunk."""
    steps = corner_steps(kind)
    if kind != "many_keys" and len(steps) <= sx.UNIFORM_INDICES:
        return sx.pick(steps)
    return _corner_of(kind, _argument_chunks(kind))


#: ``(kind, arguments)`` for :meth:`StorageMachine.corner`, kinds in :data:`CORNERS` order,
#: each as likely as another: the kind, then one or two choices for its arguments (plus the
#: keys of ``many_keys``).
CORNER_STEPS: st.SearchStrategy[tuple[str, dict[str, Any]]] = st.one_of(
    *(_corner(kind) for kind in CORNERS)
)


def race_writes(race: int, index: int) -> list[Any]:
    """Writer ``index``'s transaction in race ``race``: a value and a list element of its own,
    so a fork shows which racing commits it holds, each wholly or not at all."""
    return [
        set_value(value("race", f"{race}.{index}"), index),
        append_list(value_list("race", f"{race}.log"), index),
    ]


class AdmissionGate:
    """Holds the first racing commit that reads the machine's clock, so the machine knows
    that commit is admitted and running while it starts close() or a fork (LIFE-4): a commit
    reads its clock only once admitted, so it must then finish, whatever starts meanwhile."""

    def __init__(self) -> None:
        self.writers: set[int] = set()
        self.held = threading.Event()
        self.release = threading.Event()
        self.holder: int | None = None
        self._lock = threading.Lock()

    def hold(self) -> None:
        """Called from the clock on a writer thread: the first caller waits for release."""
        with self._lock:
            if self.holder is not None or threading.get_ident() not in self.writers:
                return
            self.holder = threading.get_ident()
        self.held.set()
        self.release.wait(RACE_TIMEOUT)


def kind(result: Outcome) -> Outcome:
    """An outcome with its value dropped: what two repositories' ``create`` can agree on."""
    return ("ok", None) if result[0] == "ok" else result


def same(what: str, expected: Outcome, actual: Outcome) -> None:
    """``expected == actual``, else a :class:`MismatchError` whose check is what was compared,
    without its arguments (``"commit"``, ``"repository.open"``): one comparison failing on any
    Session or with any argument is one failure (CHECK-9)."""
    if expected != actual:
        raise MismatchError(
            f"{what}: model gave {brief(expected)}, backend gave {brief(actual)}",
            check=compared(what),
        )


def compared(what: str) -> str:
    """What a comparison's label compares, without its arguments, Sessions or numbers."""
    label = re.sub(r"\(.*\)|\d+| on \S+$", "", what.split(" on ", 1)[0])
    return " ".join(label.split())


class SessionPairMachine(RuleBasedStateMachine):
    """What every model-vs-backend machine shares: a fresh world per example, two Sessions
    created in the model and the backend, a step clock, and commits compared as outcomes.
    Subclasses add the rules (this class has none of its own)."""

    backend: ClassVar[Backend]
    #: Counters read by ``scopecheck fuzz``, ``validate`` and the benchmarks (class-wide, reset
    #: by the runner on the machine class it made).
    examples_run: ClassVar[int] = 0
    steps_run: ClassVar[int] = 0
    #: The failures the run already reported (CHECK-9), set by the runner on the machine class
    #: it made: met again, each is counted in ``repeats`` and not raised.
    known_failures: ClassVar[frozenset[FailureKey]] = frozenset()
    repeats: ClassVar[int] = 0
    #: The spec rules of each step, by name: the rules a failure in it broke, unless the
    #: failing check names its own.
    step_rules: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self) -> None:
        super().__init__()
        type(self).examples_run += 1
        self.now = BASE_TIME
        self.gate: AdmissionGate | None = None
        self.race_held = False
        #: The step running (or last run), whether one is running, and whether a failure the
        #: run already reported ended this example's comparisons (:func:`step`).
        self.step = ""
        self.stepping = False
        self.halted = False
        self.world: World = self.backend.new_world(self.clock)
        #: Steps since the world started or last restarted, and how many a restart step needs
        #: (PROC-9: a restart that starts a process comes at most once per that many steps).
        self.since_restart = 0
        self.restart_spacing = restart_spacing(self.world)
        root = hygiene.disk_root(self.world)
        #: What the stores made under the world's root, and by which operation (HYGIENE-1, -4).
        self.leftovers = (
            None if root is None else hygiene.Leftovers(root, hygiene.own_files(self.world))
        )
        self.repo: Repository = hygiene.watched(self.world.repository(), self.leftovers)
        self.model = ReferenceRepository()
        self.stores: dict[str, Storage] = {}
        self.models: dict[str, ReferenceSession] = {}
        # A world may hold Sessions that already exist as legacy files (jsonl-legacy): the
        # backend opens them, the model imports the same lines itself (LEGACY-11).
        legacy: dict[str, list[bytes]] = getattr(self.world, "legacy_files", {})
        for sid in SESSION_IDS:
            if sid in legacy:
                mint = self.world.legacy_ids  # type: ignore[attr-defined]
                self.model.import_legacy(sid, legacy[sid], mint)
                self.models[sid] = self.model.open(sid)
                self.stores[sid] = self.repo.open(sid)
            else:
                self.models[sid] = self.model.create(sid)
                self.stores[sid] = self.repo.create(sid)

    def known(self, failure: BaseException) -> bool:
        """Whether the run already reported ``failure`` (its key, :func:`stamp`); if so it is
        counted as a repeat (CHECK-9)."""
        key = stamp(failure, self.step_rules.get(self.step, ()))
        if key not in type(self).known_failures:
            return False
        type(self).repeats += 1
        return True

    def finding(self, failure: MismatchError) -> None:
        """A check after which the state can still be compared (what is left on disk) failed:
        raised, unless the run already reported it -- then the example goes on (CHECK-9)."""
        if not self.known(failure):
            raise failure

    def guard(self, call: Callable[[], T]) -> T | None:
        """``call()``; a failure the run already reported ends this example's comparisons
        instead of being raised (CHECK-9).  Hypothesis's own exceptions pass untouched."""
        try:
            return call()
        except HypothesisException:
            raise
        except Exception as exc:
            if not self.known(exc):
                raise
            self.halted = True
            return None

    def may_restart(self) -> bool:
        """Whether a restart step may come now (PROC-9)."""
        return self.since_restart >= self.restart_spacing

    def restart_world(self) -> None:
        """Process restart: every handle closed, a new repository over the same location,
        both Sessions opened again on the model and the backend.  What the new repository's
        making leaves under the root is its own, as at the world's start (HYGIENE-4).  The
        world closes the old handles and repository inside the same call, so a temp file
        their closing leaves is taken for the repository's too: a finding only when such
        files pile up, one more at every restart (the close steps judge a close alone)."""
        self.since_restart = 0
        for sid in SESSION_IDS:
            self.model.close_session(sid)
        if self.leftovers is None:
            self.repo = self.world.restart()
        else:
            repo = self.leftovers.opening(self.world.restart, lambda _: None)
            self.repo = hygiene.watched(repo, self.leftovers)
        for sid in SESSION_IDS:
            self.models[sid] = self.model.open(sid)
            self.stores[sid] = self.repo.open(sid)

    def count_step(self) -> None:
        """One more step run (the invariant's first act: it runs after every step)."""
        type(self).steps_run += 1
        self.since_restart += 1

    def compare_sessions(self) -> None:
        """Each Session's complete logical state equals the model's (the machines' invariant,
        after the step is counted).  Nothing once a failure the run already reported ended this
        example's comparisons (:func:`step`); such a failure ends them here too."""
        if not self.halted:
            self.guard(self._compare_sessions)

    def check_leftovers(self) -> None:
        """What the step left on disk (HYGIENE-1, HYGIENE-4), once its comparisons passed:
        each finding raised, unless the run already reported it (CHECK-9)."""
        if self.halted or self.leftovers is None:
            return
        for failure in self.leftovers.findings():
            self.finding(failure)

    def _compare_sessions(self) -> None:
        self.count_step()
        for sid in SESSION_IDS:
            expected = self.models[sid].snapshot()
            actual = self.stores[sid].snapshot()
            if expected != actual:
                raise MismatchError(
                    describe_difference(sid, expected, actual),
                    check=f"logical state differs: {differing_fields(expected, actual)}",
                )

    def clock(self) -> int:
        gate = self.gate
        if gate is not None:
            gate.hold()
        return self.now

    def teardown(self) -> None:
        self.world.cleanup()

    def _commit(self, sid: str, writes: list[Any]) -> Outcome:
        self.now += 1
        expected = outcome(lambda: self.models[sid].commit(writes, self.now))
        actual = outcome(lambda: self.stores[sid].commit(writes))
        same(f"commit on {sid}", expected, actual)
        return expected


class StorageMachine(SessionPairMachine):
    """Model vs. one backend over two Sessions; subclass via :func:`make_machine`."""

    scopes = Bundle("scopes")
    lists = Bundle("lists")

    def _read(self, sid: str, what: str, op: Callable[[Any], Any]) -> None:
        same(
            f"{what} on {sid}",
            outcome(lambda: op(self.models[sid])),
            outcome(lambda: op(self.stores[sid])),
        )

    # -- transactions ----------------------------------------------------------------------

    # The scope bundle is not seeded: a retirement rule is enabled once some ephemeral commit
    # has named a scope, which is also the first step any retirement worth checking needs.
    # (Each initialize rule costs every example a strategy Hypothesis builds and validates.)
    @initialize(target=lists, address=sx.list_addresses())
    def first_list(self, address: Any) -> Any:
        """Seed the list bundle so list reads are enabled from the first step: reads of an
        empty list, invalid queries, and of whichever lists session commits append to."""
        return address

    @rule(sid=SIDS, writes=st.lists(sx.session_writes, max_size=3))
    @step
    def commit_session(self, sid: str, writes: list[Any]) -> None:
        """Session-scoped values and lists, entries and usage (TX-1, SEQ-1, WRITE-5/6)."""
        self._commit(sid, writes)

    @rule(target=scopes, sid=SIDS, writes=sx.ephemeral_transactions())
    @step
    def commit_ephemeral(self, sid: str, writes: list[Any]) -> EphemeralScope:
        """One ephemeral scope's values and lists; the scope joins the bundle for retirement."""
        self._commit(sid, writes)
        scope: EphemeralScope = writes[0].address.scope
        return scope

    @rule(target=lists, sid=SIDS, writes=sx.list_batches())
    @step
    def append_batch(self, sid: str, writes: list[Any]) -> Any:
        """Several appends to one list in one transaction (LIST-1, SEQ-1)."""
        self._commit(sid, writes)
        return writes[0].address

    @rule(
        sid=SIDS,
        scope=scopes,
        siblings=st.lists(sx.session_writes, max_size=2),
        position=st.sampled_from((0, 1, 2, 3)),
        twice=st.booleans(),
    )
    @step
    def retire(
        self, sid: str, scope: EphemeralScope, siblings: list[Any], position: int, twice: bool
    ) -> None:
        """Retirement with session siblings, atomically (RETIRE-1/2, 000 §2.2–§2.3)."""
        writes = list(siblings)
        writes.insert(min(position, len(writes)), retire_scope(scope))
        if twice:
            writes.append(retire_scope(scope))
        self._commit(sid, writes)

    @rule(sid=SIDS, scope=scopes, data=st.data())
    @step
    def retire_then_reuse(self, sid: str, scope: EphemeralScope, data: st.DataObject) -> None:
        """Retire a scope, then write under the same ID at once: a new lifetime starts empty
        and nothing from before the retirement comes back (RETIRE-3, RETIRE-4)."""
        self._commit(sid, [retire_scope(scope)])
        writes = data.draw(sx.scoped_transactions(scope), "reuse")
        self._commit(sid, writes)

    @rule(sid=SIDS, writes=sx.mixed_transactions())
    @step
    def commit_invalid(self, sid: str, writes: list[Any]) -> None:
        """Mixed-scope, two-ID and non-write transactions are rejected before mutation (TX-4)."""
        result = self._commit(sid, writes)
        assert result[0] == "error", f"an invalid transaction was accepted: {writes!r}"

    def related_scopes(
        self, sid: str, pair: tuple[str, str], retire: int | None, restart: bool
    ) -> None:
        """Two scope ids related on purpose (a prefix, a percent-encoding look-alike, twins,
        ids at the encoded limit) are two scopes: a write to one never shows in the other, and
        retiring one leaves the other whole, before and after a restart (ADDR-1, RETIRE-2,
        SCOPE-4).  Ids one step past the limit are refused (SCOPE-2)."""
        scopes = [ephemeral_scope(ident) for ident in pair]
        for index, scope in enumerate(scopes):
            self._commit(
                sid,
                [
                    set_value(value("app", "k", scope), index),
                    append_list(value_list("app", "k", scope), index),
                ],
            )
        if retire is not None:
            self._commit(sid, [retire_scope(scopes[retire])])
        if restart:
            self.restart()
        for ident in sx.PAST_LIMIT:
            refused = outcome(lambda ident=ident: ephemeral_scope(ident))  # type: ignore[misc]
            same(f"ephemeral_scope({ident!r})", ("error", "invalid_scope"), refused)

    def related_names(self, sid: str, pair: tuple[str, str], scope: Any, as_keys: bool) -> None:
        """Namespaces or keys related on purpose never alias, and a prefix scan over one finds
        exactly the keys starting with it, in code-point order (ADDR-1, LIST-9)."""
        for index, name in enumerate(pair):
            namespace, key = ("app", name) if as_keys else (name, "k")
            self._commit(
                sid,
                [
                    set_value(value(namespace, key, scope), index),
                    append_list(value_list(namespace, key, scope), index),
                ],
            )
        for name in pair:
            namespace, prefix = ("app", name) if as_keys else (name, "")
            self._read(
                sid,
                "scan_values",
                lambda s, n=namespace, p=prefix: s.scan_values(n, p, scope),  # type: ignore[misc]
            )

    def related_sessions(self, pair: tuple[str, str], restart: bool) -> None:
        """Two Session ids related on purpose are two Sessions: each keeps its own state across
        a restart, ``list()`` names both, and deleting one leaves the other whole and nothing
        of itself on disk (REPO-1, REPO-3, SCOPE-4, HYGIENE-2).  Each is left closed, or
        deleted, when the step ends."""
        root = hygiene.disk_root(self.world)
        paths: dict[str, set[str]] = {}
        opened: list[str] = []
        for index, sid in enumerate(pair):
            before = hygiene.tree(root) if root is not None else frozenset()
            expected = outcome(lambda sid=sid: self.model.create(sid))  # type: ignore[misc]
            actual = outcome(lambda sid=sid: self.repo.create(sid))  # type: ignore[misc]
            same(f"repository.create({sid!r})", kind(expected), kind(actual))
            if expected[0] != "ok":
                continue
            if root is not None:
                paths[sid] = hygiene.session_paths(before, hygiene.tree(root), sid)
            opened.append(sid)
            self.models[sid], self.stores[sid] = expected[1], actual[1]
            self._commit(sid, [set_value(value("app", "k"), index)])
            self._commit(sid, [set_value(value("app", "k", sx.EPHEMERAL[0]), index)])
        for sid in opened:
            self._close_extra(sid)
        if restart:
            self.restart()
        same("repository.list()", ("ok", self.model.list()), outcome(self.repo.list))
        first, second = pair
        expected = outcome(lambda: self.model.delete(first))
        actual = outcome(lambda: self.repo.delete(first))
        same(f"repository.delete({first!r})", expected, actual)
        if root is not None and expected[0] == "ok" and paths.get(first):
            left = hygiene.leftovers(paths[first], hygiene.tree(root))
            if left:
                self.finding(
                    MismatchError(
                        f"repository.delete({first!r}) left paths of the Session under {root} "
                        f"(HYGIENE-2): {left}",
                        rules=("HYGIENE-2",),
                        check="delete leaves paths of the Session",
                        diverged=False,
                    )
                )
        same("repository.list()", ("ok", self.model.list()), outcome(self.repo.list))
        if second in self.model.list():
            self.models[second] = self.model.open(second)
            self.stores[second] = self.repo.open(second)
            self._close_extra(second)

    def _close_extra(self, sid: str) -> None:
        """Compare an extra Session's state, then close it in both and forget it."""
        expected, actual = self.models[sid].snapshot(), self.stores[sid].snapshot()
        if expected != actual:
            raise MismatchError(describe_difference(sid, expected, actual))
        self.model.close_session(sid)
        self.stores[sid].close()
        del self.models[sid], self.stores[sid]

    def many_keys(self, sid: str, keys: list[str], scope: Any) -> None:
        """Many keys written in a drawn order, then scanned whole and by prefix: the model's
        answer, and independently of it code-point order of the keys (LIST-9)."""
        namespace = "app.many"
        writes = [set_value(value(namespace, key, scope), i) for i, key in enumerate(keys)]
        self._commit(sid, writes)
        model, store = self.models[sid], self.stores[sid]
        for prefix in ("", keys[-1]):
            expected = outcome(functools.partial(model.scan_values, namespace, prefix, scope))
            actual = outcome(functools.partial(store.scan_values, namespace, prefix, scope))
            same(f"scan_values({namespace!r}, {prefix!r}) on {sid}", expected, actual)
            found = [key for key, _ in actual[1]]
            if found != sorted(found, key=lambda key: [ord(ch) for ch in key]):
                raise MismatchError(
                    f"scan_values({namespace!r}, {prefix!r}) is not in code-point order "
                    f"(LIST-9): {found!r}",
                    rules=("LIST-9",),
                    check="scan_values not in code-point order",
                )

    def many_elements(self, sid: str, address: Any, count: int, limit: int, order: Any) -> None:
        """A long list read page by page to its end in one order, each cursor the last seq of
        the page before (a page edge): every page is the model's (LIST-2..LIST-5)."""
        self._commit(sid, [append_list(address, i) for i in range(count)])
        cursor = None
        model, store = self.models[sid], self.stores[sid]
        while True:
            page = model.read_list(address, cursor=cursor, order=order, limit=limit)
            read = functools.partial(store.read_list, address, cursor=cursor, order=order)
            got = outcome(functools.partial(read, limit=limit))
            same(f"read_list page after {cursor} ({order}, {limit}) on {sid}", ("ok", page), got)
            if len(page) < limit:
                break
            cursor = page[-1].seq

    @rule(step=CORNER_STEPS)
    @step
    def corner(self, step: tuple[str, dict[str, Any]]) -> None:
        """One of the corners reached on purpose -- related ids as scopes, names or Sessions,
        many keys, long lists, commits racing close() or a fork -- drawn as ``(kind,
        arguments)``: the kind, then its arguments as prebuilt combinations
        (:data:`CORNER_STEPS`).  One rule for all of them keeps each a small share of the
        steps, so the machine stays fast while every corner is reached within a few steps."""
        kind, arguments = step
        self.step = kind  # a failure in it breaks that corner's rules (CORNER_RULES)
        getattr(self, kind)(**arguments)

    # -- reads -----------------------------------------------------------------------------

    @rule(sid=SIDS, address=sx.value_addresses())
    @step
    def get_value(self, sid: str, address: Any) -> None:
        self._read(sid, "get_value", lambda s: s.get_value(address))

    @rule(
        sid=SIDS,
        namespace=st.sampled_from(sx.NAMESPACES),
        prefix=st.sampled_from(("", "k", "z")),
        scope=sx.any_scopes,
    )
    @step
    def scan_values(self, sid: str, namespace: str, prefix: str, scope: Any) -> None:
        self._read(sid, "scan_values", lambda s: s.scan_values(namespace, prefix, scope))

    @rule(
        sid=SIDS,
        address=lists,
        cursor=st.sampled_from(CURSORS),
        order=st.sampled_from(("asc", "desc", "asc", "sideways")),
        limit=st.sampled_from(LIMITS),
        stop_at_tag=st.sampled_from(STOPS),
    )
    @step
    def read_list(
        self, sid: str, address: Any, cursor: Any, order: Any, limit: Any, stop_at_tag: Any
    ) -> None:
        """Paging, order, limits and stop_at_tag, including invalid options (LIST-*).

        ``cursor=("element", i)`` means "the seq of the i-th surviving element", so exclusive
        cursors land on real elements as often as between them.
        """
        if isinstance(cursor, tuple):
            elements = self.models[sid].read_list(address, limit=10_000)
            cursor = elements[cursor[1] % len(elements)].seq if elements else None
        self._read(
            sid,
            "read_list",
            lambda s: s.read_list(
                address, cursor=cursor, order=order, limit=limit, stop_at_tag=stop_at_tag
            ),
        )

    @rule(
        sid=SIDS,
        address=lists,
        cursor=st.sampled_from(PAGE_CURSORS),
        order=st.sampled_from(("asc", "desc")),
        limit=st.sampled_from((1, 2, 3)),
        stop_at_tag=st.sampled_from(sx.TAGS),
    )
    @step
    def read_page(
        self, sid: str, address: Any, cursor: Any, order: Any, limit: int, stop_at_tag: str
    ) -> None:
        """Short valid pages with a stop tag: the page-limit boundary of LIST-5."""
        self.read_list(sid, address, cursor, order, limit, stop_at_tag)

    @rule(sid=SIDS, ident=st.sampled_from(sx.ENTRY_IDS + sx.USAGE_IDS))
    @step
    def get_entry_and_usage(self, sid: str, ident: str) -> None:
        """Entry and usage rows by id, and the stats they feed (WRITE-5, STATS-1/2)."""
        self._read(sid, "get_entry", lambda s: s.get_entry(ident))
        self._read(sid, "get_usage", lambda s: s.get_usage(ident))
        self._read(sid, "stats", lambda s: s.stats())

    @rule(bad=st.sampled_from(sx.BAD_PAYLOADS), kind=st.sampled_from((0, 1, 2)))
    @step
    def commit_bad_payload(self, bad: Any, kind: int) -> None:
        """A write carrying an unstorable payload never reaches storage: building it raises
        ``invalid_payload`` and every Session's state stays the model's (WRITE-3)."""
        try:
            writes = [sx.build_bad_write(bad, kind)]
        except ScopecheckError as exc:
            assert exc.code == "invalid_payload", exc
        else:  # pragma: no cover - would mean the boundary accepted bad JSON
            raise MismatchError(f"an unstorable payload was accepted: {writes[-1]!r}")

    # -- lifecycle -------------------------------------------------------------------------

    @rule(sid=SIDS, writes=st.lists(sx.session_writes, max_size=2))
    @step
    def close_and_reopen(self, sid: str, writes: list[Any]) -> None:
        """Close seals at once; later reads and commits fail ``closed``; reopen restores the
        same state (LIFE-1, LIFE-2, REPO-2)."""
        store = self.stores[sid]
        store.close()
        store.close()  # idempotent
        self.model.close_session(sid)
        self._read(sid, "stats after close", lambda s: s.stats())
        self._commit(sid, writes)
        same(
            "open while open elsewhere",
            ("error", "already_open") if sid in self.model.open_handles else ("ok", None),
            ("ok", None),
        )
        self.models[sid] = self.model.open(sid)
        self.stores[sid] = self.repo.open(sid)

    def race(self, sid: str, count: int, fork: bool) -> None:
        """Threads commit while ``close()`` -- or a fork of the Session -- runs.  The first
        writer to read the clock is held there, so ``close()`` or the fork starts while that
        commit is admitted and running; it must finish (LIFE-4).  The backend's seqs order the
        admitted commits and the model replays them in that order: each one is the model's
        commit, refused ones are refused with ``closed`` and nothing else, and a reopen the
        moment ``close()`` returns already holds exactly the admitted ones, so close drained
        them (LIFE-1).  A racing fork holds a prefix of them, each wholly or not at all
        (FORK-12)."""
        self.now += 1
        # a fork needs a fork() and a source that is not a legacy file still to be upgraded
        fork = fork and getattr(self.repo, "supports_fork", True) and not self.backend.starts_legacy
        op = "fork" if fork else "close"
        store = self.stores[sid]
        batches = [race_writes(self.now, i) for i in range(count)]
        results: list[Outcome | None] = [None] * count
        #: What a thread raised that is not a coded storage error, raised again here once the
        #: threads are joined: the backend's own exception (or a ProtocolFailure), not an
        #: assertion about a missing answer.
        raised: list[BaseException] = []
        start = threading.Barrier(count + 1)

        def writer(index: int) -> None:
            start.wait()
            try:
                results[index] = outcome(lambda: store.commit(batches[index]))
            except BaseException as exc:  # raised again on the machine's thread
                raised.append(exc)

        threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(count)]
        for thread in threads:
            thread.start()
        writers = {thread.ident: index for index, thread in enumerate(threads)}
        gate = self.gate = AdmissionGate()
        gate.writers = {ident for ident in writers if ident is not None}
        dest = f"race-fork-{self.now}"
        done: list[Outcome] = []

        def racer() -> None:
            try:
                if fork:
                    done.append(outcome(lambda: self.repo.fork(sid, TreeFork(id=dest))))
                else:
                    done.append(outcome(store.close))
            except BaseException as exc:  # raised again on the machine's thread
                raised.append(exc)

        racing = threading.Thread(target=racer, daemon=True)
        try:
            start.wait()
            gate.held.wait(ADMISSION_WAIT)
            racing.start()
            time.sleep(SEAL_DELAY)  # close() seals, or the fork starts, while one is held
        finally:
            gate.release.set()
        racing.join(RACE_TIMEOUT)
        self.gate = None
        if raised:
            for thread in threads:
                thread.join(RACE_TIMEOUT)
            raise raised[0]
        if racing.is_alive():
            raise MismatchError(f"{op}() racing commits on {sid} did not return within "
                                f"{RACE_TIMEOUT} s (LIFE-1)", rules=("LIFE-1",),
                                check=f"{op}() racing commits hangs")  # fmt: skip
        forked = done[0] if fork else None
        reopened: Storage | None = None
        if not fork:
            if done[0] != ("ok", None):
                raise MismatchError(
                    f"close() racing commits on {sid} gave {done[0]!r} (LIFE-1)",
                    rules=("LIFE-1",),
                    check="close() racing commits fails",
                )
            result = outcome(lambda: self.repo.open(sid))  # before any writer is joined
            if result[0] != "ok":
                raise MismatchError(
                    f"open({sid!r}) the moment close() returned gave {result!r}: close must "
                    "have drained its commits and released the Session (LIFE-1, REPO-4)",
                    rules=("LIFE-1", "REPO-4"),
                    check="open after a racing close() fails",
                )
            reopened = result[1]
            at_close = reopened.snapshot()
        for thread in threads:
            thread.join(RACE_TIMEOUT)
            if thread.is_alive():
                raise MismatchError(f"a commit racing {op}() on {sid} did not return within "
                                    f"{RACE_TIMEOUT} s (LIFE-1)", rules=("LIFE-1",),
                                    check=f"a commit racing {op}() hangs")  # fmt: skip
        if raised:
            raise raised[0]
        #: Whether this race held a commit inside its clock read (LIFE-4 was checked).
        self.race_held = gate.holder is not None
        if gate.holder is not None:
            held = writers[gate.holder]
            if results[held] is None or results[held][0] != "ok":  # type: ignore[index]
                raise MismatchError(
                    f"commit {held} racing {op}() on {sid} had read its clock -- it was admitted "
                    f"and running when {op}() started -- and gave {results[held]!r}: an "
                    "admitted commit must finish (LIFE-4)",
                    rules=("LIFE-4",),
                    check=f"an admitted commit racing {op}() does not finish",
                )
        admitted: list[tuple[int, int]] = []
        for index, answer in enumerate(results):
            assert answer is not None
            if answer[0] == "ok":
                admitted.append((answer[1][0].seq, index))
            elif fork or answer != ("error", "closed"):
                raise MismatchError(
                    f"a commit racing {op}() on {sid} gave {answer!r}; only ('error', 'closed') "
                    "may refuse it (LIFE-1)",
                    rules=("LIFE-1",),
                    check=f"a commit racing {op}() refused otherwise than closed",
                )
        admitted.sort()
        if fork:
            same(f"fork({sid!r}) racing commits", ("ok", dest), forked or ("ok", None))
            self.model.fork(sid, TreeFork(id=dest), dest)  # the source before the race
        for _, index in admitted:
            expected = self.models[sid].commit(batches[index], self.now)
            same(f"commit {index} racing on {sid}", ("ok", expected), results[index])  # type: ignore[arg-type]
        if fork:
            self._check_racing_fork(dest, [index for _, index in admitted], self.now)
        else:
            assert reopened is not None
            self.model.close_session(sid)
            self.models[sid] = self.model.open(sid)
            self.stores[sid] = reopened
            expected_state = self.models[sid].snapshot()
            if at_close != expected_state:
                raise MismatchError(
                    f"close() on {sid} returned before every commit it admitted was in the "
                    "Session (LIFE-1): reopened at once, "
                    + describe_difference(sid, expected_state, at_close),
                    rules=("LIFE-1",),
                    check="close() returns before its admitted commits are in",
                )

    def _check_racing_fork(self, dest: str, order: list[int], race: int) -> None:
        """The fork holds the first ``j`` admitted commits (in seq order) for some ``j``: the
        model's fork of the source before the race plus those ``j``, replayed."""
        handle = self.repo.open(dest)
        try:
            present = [
                index
                for index in order
                if handle.get_value(race_writes(race, index)[0].address) is not None
            ]
            if present != order[: len(present)]:
                raise MismatchError(
                    f"fork {dest!r} holds racing commits {present} of {order} (seq order): not "
                    "a prefix, so it is not one commit boundary (FORK-12)",
                    rules=("FORK-12",),
                    check="a fork racing commits is not one commit boundary",
                )
            model = self.model.open(dest)
            for index in present:
                model.commit(race_writes(race, index), self.now)
            expected, actual = model.snapshot(), handle.snapshot()
            if expected != actual:
                raise MismatchError(describe_difference(dest, expected, actual))
        finally:
            handle.close()
            self.model.close_session(dest)
        same(f"delete({dest!r})", outcome(lambda: self.model.delete(dest)),
             outcome(lambda: self.repo.delete(dest)))  # fmt: skip

    @precondition(lambda self: self.may_restart())
    @rule()
    @step
    def restart(self) -> None:
        """Process restart: every handle closed, a new repository over the same location."""
        self.restart_world()

    @rule(sid=SIDS, op=st.sampled_from(("create", "open", "delete")))
    @step
    def repository_misuse(self, sid: str, op: str) -> None:
        """Duplicate create, double open and deleting an open Session are refused (REPO-1/3/4)."""
        expected = outcome(lambda: getattr(self.model, op)(sid))
        actual = outcome(lambda: getattr(self.repo, op)(sid))
        same(f"repository.{op}({sid!r})", expected, actual)
        same("repository.list()", ("ok", self.model.list()), outcome(self.repo.list))

    # -- invariant -------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        """After every step each Session's complete logical state equals the model's, and
        no temp file an operation made outlives it (HYGIENE-1; one a store's opening made is
        that store's, judged as it is used: HYGIENE-4)."""
        self.compare_sessions()
        self.check_leftovers()


#: The spec rules each corner checks (a ``corner`` step names its kind).
CORNER_RULES: dict[str, tuple[str, ...]] = {
    "related_scopes": ("ADDR-1", "RETIRE-2", "SCOPE-2", "SCOPE-4", "CHECK-7"),
    "related_names": ("ADDR-1", "LIST-9", "CHECK-7"),
    "related_sessions": ("REPO-1", "REPO-3", "SCOPE-4", "HYGIENE-2", "CHECK-7"),
    "many_keys": ("LIST-9",),
    "many_elements": ("LIST-2", "LIST-3", "LIST-4", "LIST-5"),
    "race": ("LIFE-1", "LIFE-4", "FORK-12"),
}

#: The spec rules each machine step checks, so a failure can name the rule it broke.
STEP_RULES: dict[str, tuple[str, ...]] = {
    "first_list": ("LIST-1",),
    "commit_session": ("TX-6", "SEQ-1", "WRITE-5", "WRITE-6"),
    "commit_ephemeral": ("SCOPE-1", "TX-3", "SEQ-1", "ADDR-1"),
    "append_batch": ("LIST-1", "SEQ-1"),
    "retire": ("RETIRE-1", "RETIRE-2", "RETIRE-5"),
    "retire_then_reuse": ("RETIRE-3", "RETIRE-4"),
    "commit_invalid": ("TX-1", "TX-2", "TX-3", "TX-4"),
    "corner": tuple(sorted({rule for rules in CORNER_RULES.values() for rule in rules})),
    "get_value": ("ADDR-1", "WRITE-2"),
    "scan_values": ("LIST-9",),
    "read_list": ("LIST-2", "LIST-3", "LIST-4", "LIST-5"),
    "read_page": ("LIST-5",),
    "get_entry_and_usage": ("WRITE-5", "STATS-1", "STATS-2"),
    "commit_bad_payload": ("WRITE-3",),
    "close_and_reopen": ("LIFE-1", "LIFE-2", "REPO-2"),
    "restart": ("REPO-2", "SEQ-7"),
    "repository_misuse": ("REPO-1", "REPO-3", "REPO-4", "REPO-6"),
}


StorageMachine.step_rules = {**STEP_RULES, **CORNER_RULES}


def rules_of_program(
    program: str, table: dict[str, tuple[str, ...]] | None = None
) -> tuple[str, ...]:
    """The spec rules of the last step in a printed failing program (empty if unknown);
    ``table`` maps step names to rules (default: the storage machine's :data:`STEP_RULES`)."""
    table = STEP_RULES if table is None else table
    for line in reversed(program.splitlines()):
        if "state." not in line or line.strip() in ("state.teardown()", "state.same_state()"):
            continue
        name = line.split("state.", 1)[1].split("(", 1)[0]
        if name == "corner" and table is STEP_RULES:
            kind = re.search(r"step=\('(\w+)'", line)
            if kind is not None and kind.group(1) in CORNER_RULES:
                return CORNER_RULES[kind.group(1)]
        if name in table:
            return table[name]
    return ()


#: The fields of a Session's snapshot, in the order a difference lists them.
SNAPSHOT_FIELDS = ("entries", "usage", "values", "lists", "stats")


def differing_fields(expected: Snapshot, actual: object) -> str:
    """Which fields of a snapshot differ from the model's, or that it is no snapshot at all."""
    if not isinstance(actual, Snapshot):
        return "snapshot() returned no Snapshot"
    return ", ".join(n for n in SNAPSHOT_FIELDS if getattr(expected, n) != getattr(actual, n))


def describe_difference(sid: str, expected: Any, actual: Any) -> str:
    """One line per differing field of two snapshots."""
    lines = [f"logical state of session {sid!r} differs from the model:"]
    if not isinstance(actual, Snapshot):
        return f"{lines[0]} the backend's snapshot() returned {brief(actual)}"
    for name in SNAPSHOT_FIELDS:
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            lines.append(f"  {name}: model={brief(want)}")
            lines.append(f"  {' ' * len(name)}  backend={brief(got)}")
    return "\n".join(lines)


def make_machine(backend: Backend) -> type[StorageMachine]:
    """A machine class bound to ``backend`` (its ``TestCase`` is collected by pytest)."""
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).split()
    name = "".join(word[:1].upper() + word[1:] for word in words)
    return type(f"{name}Machine", (StorageMachine,), {"backend": backend})
