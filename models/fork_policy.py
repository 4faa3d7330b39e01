"""The one closed fork classifier (001 §1.2) and the streaming driver every backend uses.

All namespace fork knowledge lives here, as a closed ``match`` — not a registry, hook or DSL.
A reserved namespace (exact ``pi`` or ``pi.*``) that is not listed below fails the fork *when it
holds current state*, so a new built-in namespace must declare its fork semantics here before a
fork can succeed (FORK-8).  Ephemeral state is never classified: it is never copied (000 §6.5,
FORK-10).

The driver is streaming: a backend feeds it one *current* session-scoped row at a time (a scalar
value row or a surviving list element) and writes whatever it returns; ``finish()`` returns the
transformed built-ins — the rewritten branch tip (branch scope) and fresh idle lane states — at
the seqs of the source rows they replace (FORK-6), and checks lane coherence.  It holds only
bounded state: lane names and their seqs.  Entry membership is a predicate the backend supplies
from its own index.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator

import attrs

from scopecheck.models.errors import CorruptError, usage
from scopecheck.models.fork import BranchFork, ForkOptions
from scopecheck.models.payload import encode_json
from scopecheck.models.records import ListElement

BRANCH_TIP = "pi.branch.tip"
LANE_CONFIG = "pi.lane.config"
LANE_STATE = "pi.lane.state"
SESSION_NAME = "pi.session.name"
ENTRY_LABEL = "pi.entry.label"
RESULT = "pi.result"
OP_PREFIX = "pi.op."
PENDING_PREFIX = "pi.pending."
LANE_NAMESPACES = (BRANCH_TIP, LANE_CONFIG, LANE_STATE)

#: Fresh idle lane state (REFERENCE §5): no current or last operation, empty inbox.
IDLE_LANE_STATE = encode_json({"currentOperationId": None, "lastOperationId": None, "inbox": []})


class Disposition(enum.Enum):
    EXCLUDE = "exclude"  # pi.op.*, pi.pending.*, pi.result: never copied
    COPY = "copy"  # pi.session.name
    LABEL = "label"  # pi.entry.label: copied iff its entry is copied
    BRANCH_TIP = "branch_tip"  # structured lane action
    LANE_CONFIG = "lane_config"
    LANE_STATE = "lane_state"
    APPLICATION = "application"  # copied by tree scope only
    UNKNOWN_RESERVED = "unknown_reserved"  # fails the fork when current state exists


def is_reserved(namespace: str) -> bool:
    return namespace == "pi" or namespace.startswith("pi.")


#: The dispositions :func:`classify_list` may give: a list is excluded, application data, or
#: undeclared (FORK-9).
LIST_DISPOSITIONS = frozenset(
    {Disposition.EXCLUDE, Disposition.APPLICATION, Disposition.UNKNOWN_RESERVED}
)


def _reserved_spec(name: str) -> bool:
    """FORK-8's wording, spelled apart from :func:`is_reserved` so the contracts test it."""
    return name == "pi" or name.startswith("pi.")


def _excluded_prefix(name: str) -> bool:
    return name.startswith("pi.op.") or name.startswith("pi.pending.")


def classify(name: str, /) -> Disposition:
    """The disposition of a scalar-value namespace ``name`` (FORK-7, FORK-8).  Closed on purpose.

    Total and closed (CHECK-3): every namespace gets a disposition without raising; exactly the
    non-reserved ones are application data; ``pi.result``, ``pi.op.*`` and ``pi.pending.*`` and
    nothing else are excluded.  (The parameter is not called ``namespace``: CrossHair 0.0.113
    evaluates contracts with a local of its own by that name in scope.)

    post: isinstance(__return__, Disposition)
    post: (__return__ is Disposition.APPLICATION) == (not _reserved_spec(name))
    post: (__return__ is Disposition.EXCLUDE) == (name == "pi.result" or _excluded_prefix(name))
    """
    match name:
        case "pi.result":
            return Disposition.EXCLUDE
        case "pi.session.name":
            return Disposition.COPY
        case "pi.entry.label":
            return Disposition.LABEL
        case "pi.branch.tip":
            return Disposition.BRANCH_TIP
        case "pi.lane.config":
            return Disposition.LANE_CONFIG
        case "pi.lane.state":
            return Disposition.LANE_STATE
        case _ if name.startswith((OP_PREFIX, PENDING_PREFIX)):
            return Disposition.EXCLUDE
        case _ if is_reserved(name):
            return Disposition.UNKNOWN_RESERVED
        case _:
            return Disposition.APPLICATION


def classify_list(name: str, /) -> Disposition:
    """Lists: the only built-in list namespace (``pi.pending.assistant_frame``) and every other
    op/pending/result namespace exclude; application lists are APPLICATION; a list in any other
    reserved namespace has no declared list semantics and is UNKNOWN_RESERVED (CHECK-3).

    post: __return__ in LIST_DISPOSITIONS
    post: (__return__ is Disposition.APPLICATION) == (not _reserved_spec(name))
    post: (__return__ is Disposition.EXCLUDE) == (classify(name) is Disposition.EXCLUDE)
    """
    disposition = classify(name)
    if disposition in (Disposition.EXCLUDE, Disposition.APPLICATION):
        return disposition
    return Disposition.UNKNOWN_RESERVED


# -- what a fork has to read: namespace spans matching the classifier ------------------------


@attrs.frozen
class NamespaceSpan:
    """A run of namespaces in code-point order, for index-range prefilters (001 §1.3 SQLite).

    Python ``str`` order is code-point order, and SQLite's BINARY collation compares UTF-8
    bytes, which orders the same way, so a span is one B-tree range on ``namespace``.
    ``low``/``high`` of ``None`` are unbounded.
    """

    low: str | None = None
    high: str | None = None
    low_open: bool = False  # exclude ``low`` itself
    high_closed: bool = False  # include ``high`` itself

    def contains(self, namespace: str) -> bool:
        low, high = self.low, self.high
        if low is not None and (namespace < low or (self.low_open and namespace == low)):
            return False
        return high is None or namespace < high or (self.high_closed and namespace == high)


def _exact(name: str) -> NamespaceSpan:
    return NamespaceSpan(name, name, high_closed=True)


def _prefix(prefix: str) -> NamespaceSpan:
    """Every namespace starting with ``prefix``: ``[prefix, prefix with its last char + 1)``."""
    return NamespaceSpan(prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))


def _gaps(bound: NamespaceSpan, holes: tuple[NamespaceSpan, ...]) -> tuple[NamespaceSpan, ...]:
    """``bound`` minus ``holes`` (sorted, disjoint, inside ``bound``; each exact or prefix)."""
    out: list[NamespaceSpan] = []
    low, low_open = bound.low, bound.low_open
    for hole in holes:
        out.append(NamespaceSpan(low, hole.low, low_open))
        low, low_open = hole.high, hole.high_closed
    out.append(NamespaceSpan(low, bound.high, low_open, bound.high_closed))
    return tuple(span for span in out if not _empty(span))


def _empty(span: NamespaceSpan) -> bool:
    if span.low is None or span.high is None:
        return False
    return span.low > span.high or (
        span.low == span.high and (span.low_open or not span.high_closed)
    )


#: Never copied in either scope: ``pi.op.*``, ``pi.pending.*``, ``pi.result`` (in order).
_EXCLUDED = (_prefix(OP_PREFIX), _prefix(PENDING_PREFIX), _exact(RESULT))
#: The reserved namespaces: exact ``pi`` and ``pi.*`` (everything in ``["pi.", "pi/")``).
_RESERVED = (_exact("pi"), _prefix("pi."))
#: The structured built-ins a branch fork reads by point (its own lane) or through its
#: member set (labels), not by scanning.
_POINT_READ = (_exact(BRANCH_TIP), _exact(ENTRY_LABEL), _exact(LANE_CONFIG), _exact(LANE_STATE))

#: Tree scope reads every current session-scoped row except the excluded namespaces — values
#: and lists alike (a list in a reserved non-excluded namespace fails the fork).
TREE_SPANS: tuple[NamespaceSpan, ...] = _gaps(NamespaceSpan(), _EXCLUDED)
#: Branch scope scans only reserved scalar namespaces that are neither excluded nor read by
#: point: ``pi.session.name`` (copied) and undeclared reserved ones (FORK-8).  Application
#: namespaces are never read: branch scope copies none (FORK-9).
BRANCH_VALUE_SPANS: tuple[NamespaceSpan, ...] = (
    _RESERVED[0],
    *_gaps(_RESERVED[1], tuple(sorted(_EXCLUDED + _POINT_READ, key=lambda s: s.low or ""))),
)
#: Branch scope scans list rows only where they would fail the fork: reserved, not excluded.
BRANCH_LIST_SPANS: tuple[NamespaceSpan, ...] = (_RESERVED[0], *_gaps(_RESERVED[1], _EXCLUDED))


def scan_spans(branch: bool, lists: bool) -> tuple[NamespaceSpan, ...]:
    """The namespace spans a fork must scan for current rows (001 §1.3 "SQL-level namespace
    prefilters matching the classifier"); every row read still passes through the driver.
    ``tests/fork/test_fork_reads.py`` checks these agree with :func:`classify`."""
    if not branch:
        return TREE_SPANS
    return BRANCH_LIST_SPANS if lists else BRANCH_VALUE_SPANS


def unknown_namespace(namespace: str, kind: str) -> Exception:
    return usage(
        "unknown_namespace",
        f"the source holds current {kind} state in reserved namespace {namespace!r}, whose fork "
        "semantics are not declared in models/fork_policy.py; declare them before forking (FORK-8)",
        namespace=namespace,
    )


def lane_corrupt(name: str, what: str) -> CorruptError:
    return CorruptError(
        "corrupt",
        f"lane {name!r} is corrupt: {what}; a configured lane needs pi.branch.tip, "
        "pi.lane.config and pi.lane.state together (FORK-2, FORK-5)",
        lane=name,
    )


# -- branch scope: lane check and target selection ----------------------------------------


def check_branch_lane(
    options: BranchFork, has_tip: bool, has_config: bool, has_state: bool
) -> None:
    """The named branch must be a complete configured lane (001 §1.1, FORK-2)."""
    name = options.branch
    if has_config != has_state:
        raise lane_corrupt(name, "lane config and lane state are not both present")
    if not has_tip:
        if has_config:
            raise lane_corrupt(name, "lane config/state without a branch tip")
        raise usage("unknown_branch", f"the source has no branch {name!r} (FORK-2)", branch=name)
    if not has_config:
        raise usage(
            "data_only_branch",
            f"branch {name!r} has a tip but no lane config/state (a data-only branch); fork it "
            "with TreeFork() instead (FORK-2)",
            branch=name,
        )


_MISSING = object()


def ancestry(tip: str | None, parent_of: Callable[[str], object]) -> Iterator[str]:
    """Entry ids from ``tip`` to the root, walking parent links through the backend's index.

    ``parent_of(id)`` returns the parent id (``None`` at a root) or :data:`MISSING` when the id
    is no entry: a tip naming a missing entry is corruption.
    """
    current = tip
    while current is not None:
        parent = parent_of(current)
        if parent is _MISSING:
            raise CorruptError("corrupt", f"branch tip ancestry names missing entry {current!r}")
        yield current
        assert parent is None or isinstance(parent, str)
        current = parent


MISSING: object = _MISSING


@attrs.frozen
class BranchTarget:
    """Where a branch fork's destination tip lands (FORK-3, FORK-4)."""

    destination_tip: str | None


def select_target(
    options: BranchFork,
    source_tip: str | None,
    parent_of: Callable[[str], object],
    on_ancestry: Callable[[str], bool],
) -> BranchTarget:
    """Validate ``entry_id`` against the tip ancestry and apply ``position`` (001 §1.1).

    ``on_ancestry(id)`` answers membership in the source tip's ancestry (inclusive) from the
    backend's index; ``parent_of`` as in :func:`ancestry`.
    """
    target = source_tip
    if options.entry_id is not None:
        if parent_of(options.entry_id) is _MISSING:
            raise usage(
                "unknown_entry",
                f"entry {options.entry_id!r} does not exist in the source (FORK-3)",
                entry_id=options.entry_id,
            )
        if source_tip is None or not on_ancestry(options.entry_id):
            raise usage(
                "entry_not_on_branch",
                f"entry {options.entry_id!r} is not on branch {options.branch!r}'s tip "
                "ancestry (FORK-3)",
                entry_id=options.entry_id,
            )
        target = options.entry_id
    if options.position == "before" and target is not None:
        parent = parent_of(target)
        assert parent is None or isinstance(parent, str)
        target = parent
    return BranchTarget(target)


# -- the streaming driver ---------------------------------------------------------------------


@attrs.frozen
class DestValue:
    """A session-scoped scalar row of the destination, with its (source) seq."""

    namespace: str
    key: str
    seq: int
    value_json: bytes


@attrs.frozen
class DestElement:
    """A surviving session-scoped list element of the destination."""

    namespace: str
    key: str
    element: ListElement


class ForkDriver:
    """Turns current source rows into destination rows, one at a time (001 §1.2).

    ``entry_copied(id)`` is the backend's membership predicate (labels follow their entries).
    For branch scope ``target`` is the selected destination tip.
    """

    def __init__(
        self,
        options: ForkOptions,
        entry_copied: Callable[[str], bool],
        target: BranchTarget | None = None,
    ) -> None:
        self.options = options
        self.branch = options.branch if isinstance(options, BranchFork) else None
        if self.branch is not None and target is None:
            raise AssertionError("a branch fork needs its selected target")
        self._target = target
        self._entry_copied = entry_copied
        #: Bounded state: lane names with the seqs of their tip and state rows.
        self._tips: dict[str, int] = {}
        self._configs: set[str] = set()
        self._states: dict[str, int] = {}

    def value(
        self, scope_id: str | None, namespace: str, key: str, seq: int, value_json: bytes
    ) -> tuple[DestValue, ...]:
        """One current scalar row; ephemeral rows are never copied (FORK-10)."""
        if scope_id is not None:
            return ()
        disposition = classify(namespace)
        keep = (DestValue(namespace, key, seq, value_json),)
        tree = self.branch is None
        match disposition:
            case Disposition.EXCLUDE:
                return ()
            case Disposition.COPY:
                return keep
            case Disposition.LABEL:
                return keep if self._entry_copied(key) else ()
            case Disposition.APPLICATION:
                return keep if tree else ()
            case Disposition.UNKNOWN_RESERVED:
                raise unknown_namespace(namespace, "scalar")
            case Disposition.BRANCH_TIP:
                self._tips[key] = seq
                # Tree scope copies every tip verbatim; branch scope rewrites its one tip.
                return keep if tree else ()
            case Disposition.LANE_CONFIG:
                self._configs.add(key)
                return keep if tree or key == self.branch else ()
            case Disposition.LANE_STATE:
                self._states[key] = seq
                return ()
        raise AssertionError(disposition)  # pragma: no cover - the match is closed

    def copies_verbatim(self, namespace: str, is_list: bool) -> bool:
        """Whether :meth:`value` (or :meth:`list_element` when ``is_list``) returns every
        current session-scoped row of ``namespace`` unchanged and records nothing for
        :meth:`finish`: a backend may then copy such rows as they are without feeding them
        through the driver (the JSONL fork copies whole unchanged lines, JSONL-20).  A
        subclass that changes what :meth:`value` or :meth:`list_element` does for a namespace
        must answer ``False`` for it (the planted-bug drivers only touch reserved namespaces,
        which answer ``False`` here already)."""
        if is_list:
            return self.branch is None and classify_list(namespace) is Disposition.APPLICATION
        disposition = classify(namespace)
        return disposition is Disposition.COPY or (
            self.branch is None and disposition is Disposition.APPLICATION
        )

    def list_element(
        self, scope_id: str | None, namespace: str, key: str, element: ListElement
    ) -> tuple[DestElement, ...]:
        """One surviving list element (FORK-9)."""
        if scope_id is not None:
            return ()
        disposition = classify_list(namespace)
        if disposition is Disposition.UNKNOWN_RESERVED:
            raise unknown_namespace(namespace, "list")
        if disposition is Disposition.APPLICATION and self.branch is None:
            return (DestElement(namespace, key, element),)
        return ()

    def finish(self) -> tuple[DestValue, ...]:
        """Check lane coherence, then emit fresh idle lane states and the rewritten tip at the
        seqs of the source's current rows (FORK-5, FORK-6), in seq order."""
        out: list[DestValue] = []
        if self.branch is None:
            for name in sorted(self._configs | set(self._states)):
                if name not in self._configs or name not in self._states:
                    raise lane_corrupt(name, "lane config and lane state are not both present")
                if name not in self._tips:
                    raise lane_corrupt(name, "lane config/state without a branch tip")
            for name, seq in self._states.items():
                out.append(DestValue(LANE_STATE, name, seq, IDLE_LANE_STATE))
        else:
            name = self.branch
            assert self._target is not None
            if name not in self._tips or name not in self._states or name not in self._configs:
                raise lane_corrupt(name, "the lane changed while the fork read it")
            tip = encode_json(self._target.destination_tip)
            out.append(DestValue(BRANCH_TIP, name, self._tips[name], tip))
            out.append(DestValue(LANE_STATE, name, self._states[name], IDLE_LANE_STATE))
        out.sort(key=lambda row: row.seq)
        return tuple(out)
