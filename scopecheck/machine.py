"""The stateful machine: the reference model against one backend, step by step.

``make_machine(backend)`` returns a :class:`~hypothesis.stateful.RuleBasedStateMachine` subclass.
Every rule performs one operation on the model and on the backend and compares the outcomes —
the return value, or the error code — and after every step the invariant compares the complete
logical state of every Session (``Snapshot``), so "a rejected transaction changed nothing" is
checked against the model, not assumed.  A failing run prints a program of ``state.rule(...)``
lines whose arguments are the contract's own constructors, runnable as Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

import scopecheck.strategies as sx
from scopecheck.backends import Backend, World
from scopecheck.models.errors import ProtocolError, ScopecheckError
from scopecheck.models.protocols import Repository, Storage
from scopecheck.models.reference import ReferenceRepository, ReferenceSession
from scopecheck.models.scope import EphemeralScope
from scopecheck.models.writes import retire_scope

SESSION_IDS = ("s1", "s2")
BASE_TIME = 1_750_000_000_000

Outcome = tuple[str, Any]


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


class MismatchError(AssertionError):
    """The backend disagreed with the model."""


def same(what: str, expected: Outcome, actual: Outcome) -> None:
    if expected != actual:
        raise MismatchError(f"{what}: model gave {expected!r}, backend gave {actual!r}")


class SessionPairMachine(RuleBasedStateMachine):
    """What every model-vs-backend machine shares: a fresh world per example, two Sessions
    created in the model and the backend, a step clock, and commits compared as outcomes.
    Subclasses add the rules (this class has none of its own)."""

    backend: ClassVar[Backend]
    #: Counters read by ``scopecheck fuzz``, ``validate`` and the benchmarks (class-wide, reset
    #: by the runner on the machine class it made).
    examples_run: ClassVar[int] = 0
    steps_run: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).examples_run += 1
        self.now = BASE_TIME
        self.world: World = self.backend.new_world(self.clock)
        self.repo: Repository = self.world.repository()
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

    def clock(self) -> int:
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

    @initialize(target=scopes, scope=sx.ephemeral_scopes)
    def first_scope(self, scope: EphemeralScope) -> EphemeralScope:
        """Seed the scope bundle so retirement rules are enabled from the first step."""
        return scope

    @initialize(target=lists, address=sx.list_addresses())
    def first_list(self, address: Any) -> Any:
        """Seed the list bundle so list reads are enabled from the first step."""
        return address

    @rule(sid=st.sampled_from(SESSION_IDS), writes=st.lists(sx.session_writes, max_size=3))
    def commit_session(self, sid: str, writes: list[Any]) -> None:
        """Session-scoped values and lists, entries and usage (TX-1, SEQ-1, WRITE-5/6)."""
        self._commit(sid, writes)

    @rule(target=scopes, sid=st.sampled_from(SESSION_IDS), writes=sx.ephemeral_transactions())
    def commit_ephemeral(self, sid: str, writes: list[Any]) -> EphemeralScope:
        """One ephemeral scope's values and lists; the scope joins the bundle for retirement."""
        self._commit(sid, writes)
        scope: EphemeralScope = writes[0].address.scope
        return scope

    @rule(target=lists, sid=st.sampled_from(SESSION_IDS), writes=sx.list_batches())
    def append_batch(self, sid: str, writes: list[Any]) -> Any:
        """Several appends to one list in one transaction (LIST-1, SEQ-1)."""
        self._commit(sid, writes)
        return writes[0].address

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        scope=scopes,
        siblings=st.lists(sx.session_writes, max_size=2),
        position=st.integers(0, 3),
        twice=st.booleans(),
    )
    def retire(
        self, sid: str, scope: EphemeralScope, siblings: list[Any], position: int, twice: bool
    ) -> None:
        """Retirement with session siblings, atomically (RETIRE-1/2, 000 §2.2–§2.3)."""
        writes = list(siblings)
        writes.insert(min(position, len(writes)), retire_scope(scope))
        if twice:
            writes.append(retire_scope(scope))
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), scope=scopes, data=st.data())
    def retire_then_reuse(self, sid: str, scope: EphemeralScope, data: st.DataObject) -> None:
        """Retire a scope, then write under the same ID at once: a new lifetime starts empty
        and nothing from before the retirement comes back (RETIRE-3, RETIRE-4)."""
        self._commit(sid, [retire_scope(scope)])
        writes = data.draw(st.lists(sx.scoped_writes(scope), min_size=1, max_size=3), "reuse")
        self._commit(sid, writes)

    @rule(sid=st.sampled_from(SESSION_IDS), writes=sx.mixed_transactions())
    def commit_invalid(self, sid: str, writes: list[Any]) -> None:
        """Mixed-scope, two-ID and non-write transactions are rejected before mutation (TX-4)."""
        result = self._commit(sid, writes)
        assert result[0] == "error", f"an invalid transaction was accepted: {writes!r}"

    # -- reads -----------------------------------------------------------------------------

    @rule(sid=st.sampled_from(SESSION_IDS), address=sx.value_addresses())
    def get_value(self, sid: str, address: Any) -> None:
        self._read(sid, "get_value", lambda s: s.get_value(address))

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        namespace=st.sampled_from(sx.NAMESPACES),
        prefix=st.sampled_from(("", "k", "z")),
        scope=sx.any_scopes,
    )
    def scan_values(self, sid: str, namespace: str, prefix: str, scope: Any) -> None:
        self._read(sid, "scan_values", lambda s: s.scan_values(namespace, prefix, scope))

    @rule(
        sid=st.sampled_from(SESSION_IDS),
        address=lists,
        cursor=st.none() | st.integers(0, 6).map(lambda i: ("element", i)) | st.integers(-1, 40),
        order=st.sampled_from(("asc", "desc", "asc", "sideways")),
        limit=st.none() | st.integers(-1, 6) | st.just(10**6),
        stop_at_tag=st.none() | st.sampled_from((*sx.TAGS, "")),
    )
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
        sid=st.sampled_from(SESSION_IDS),
        address=lists,
        cursor=st.none() | st.integers(0, 6).map(lambda i: ("element", i)),
        order=st.sampled_from(("asc", "desc")),
        limit=st.integers(1, 3),
        stop_at_tag=st.sampled_from(sx.TAGS),
    )
    def read_page(
        self, sid: str, address: Any, cursor: Any, order: Any, limit: int, stop_at_tag: str
    ) -> None:
        """Short valid pages with a stop tag: the page-limit boundary of LIST-5."""
        self.read_list(sid, address, cursor, order, limit, stop_at_tag)

    @rule(sid=st.sampled_from(SESSION_IDS), ident=st.sampled_from(sx.ENTRY_IDS + sx.USAGE_IDS))
    def get_entry_and_usage(self, sid: str, ident: str) -> None:
        """Entry and usage rows by id, and the stats they feed (WRITE-5, STATS-1/2)."""
        self._read(sid, "get_entry", lambda s: s.get_entry(ident))
        self._read(sid, "get_usage", lambda s: s.get_usage(ident))
        self._read(sid, "stats", lambda s: s.stats())

    @rule(bad=st.sampled_from(sx.BAD_PAYLOADS), kind=st.integers(0, 2))
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

    @rule(sid=st.sampled_from(SESSION_IDS), writes=st.lists(sx.session_writes, max_size=2))
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

    @rule()
    def restart(self) -> None:
        """Process restart: every handle closed, a new repository over the same location."""
        for sid in SESSION_IDS:
            self.model.close_session(sid)
        self.repo = self.world.restart()
        for sid in SESSION_IDS:
            self.models[sid] = self.model.open(sid)
            self.stores[sid] = self.repo.open(sid)

    @rule(sid=st.sampled_from(SESSION_IDS), op=st.sampled_from(("create", "open", "delete")))
    def repository_misuse(self, sid: str, op: str) -> None:
        """Duplicate create, double open and deleting an open Session are refused (REPO-1/3/4)."""
        expected = outcome(lambda: getattr(self.model, op)(sid))
        actual = outcome(lambda: getattr(self.repo, op)(sid))
        same(f"repository.{op}({sid!r})", expected, actual)
        same("repository.list()", ("ok", self.model.list()), outcome(self.repo.list))

    # -- invariant -------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        """After every step each Session's complete logical state equals the model's."""
        type(self).steps_run += 1
        for sid in SESSION_IDS:
            expected = self.models[sid].snapshot()
            actual = self.stores[sid].snapshot()
            if expected != actual:
                raise MismatchError(describe_difference(sid, expected, actual))


#: The spec rules each machine step checks, so a failure can name the rule it broke.
STEP_RULES: dict[str, tuple[str, ...]] = {
    "first_scope": ("SCOPE-1",),
    "first_list": ("LIST-1",),
    "commit_session": ("TX-6", "SEQ-1", "WRITE-5", "WRITE-6"),
    "commit_ephemeral": ("TX-3", "SEQ-1", "ADDR-1"),
    "append_batch": ("LIST-1", "SEQ-1"),
    "retire": ("RETIRE-1", "RETIRE-2", "RETIRE-5"),
    "retire_then_reuse": ("RETIRE-3", "RETIRE-4"),
    "commit_invalid": ("TX-1", "TX-2", "TX-3", "TX-4"),
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
        if name in table:
            return table[name]
    return ()


def describe_difference(sid: str, expected: Any, actual: Any) -> str:
    """One line per differing field of two snapshots."""
    lines = [f"logical state of session {sid!r} differs from the model:"]
    for name in ("entries", "usage", "values", "lists", "stats"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            lines.append(f"  {name}: model={want!r}")
            lines.append(f"  {' ' * len(name)}  backend={got!r}")
    return "\n".join(lines)


def make_machine(backend: Backend) -> type[StorageMachine]:
    """A machine class bound to ``backend`` (its ``TestCase`` is collected by pytest)."""
    words = "".join(ch if ch.isalnum() else " " for ch in backend.name).split()
    name = "".join(word[:1].upper() + word[1:] for word in words)
    return type(f"{name}Machine", (StorageMachine,), {"backend": backend})
