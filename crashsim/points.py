"""Crash points as values: which image of a crash before an operation, typed.

The persistence model (:mod:`scopecheck.crashsim.persistence`, CRASH-SYS-1) gives several
images of one crash point, and each is a *variant* here, a frozen value that says everything
its image depends on -- the cut of a torn write included -- so the operations and the variant
rebuild the image byte for byte, with no sampling (CRASH-SYS-9, CRASH-SYS-12):

* a **process crash** (the kernel lives, every completed call kept): :class:`ProcessCrash`,
  and :class:`TornCall`, the write in flight when the process died, of which only a prefix
  reached the file;
* a **power loss**: :class:`Strict` (only what was synced), :class:`DataKept` (every unsynced
  write, no unsynced directory change), :class:`EntriesKept` (every directory change, no
  unsynced data), :class:`Only` (one file keeps its unsynced writes, on a device that
  reorders), :class:`Prefix` (the first unsynced changes in trace order, on one that does
  not), :class:`Torn` (one unsynced write cut at the device's granularity) and
  :class:`Names` (some of the unsynced directory changes, on a file system that orders them
  or one that does not).

Each variant has a stable :attr:`name` -- ``process``, ``torn-call:<path>:<cut>``,
``strict``, ``data-kept``, ``entries-kept``, ``only:<path>``, ``prefix:<m>``,
``torn@<g>:<path>:<n>:<cut>``, ``names-before:<op>``, ``names-only:<op>``,
``names-but:<op>`` -- which is what a reproducer stores (``CrashFailure.variant``)
and what a report shows; :func:`parse_variant` is the one way back from a name, and its
inverse: ``parse_variant(v.name) == v``.  The :attr:`family` of a variant is the kind of
crash point two failures of one rule are told apart by (CRASH-COV-4).
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

import attrs


class _Named:
    """A variant shows as its name (in messages and reports)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


def _natural(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"'{attribute.name}' must not be negative (got {value!r})")


def _positive(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"'{attribute.name}' must be positive (got {value!r})")


# -- a process crash ---------------------------------------------------------------------------


@attrs.frozen
class ProcessCrash(_Named):
    """The process died before the operation: every completed call is kept (CRASH-SYS-1)."""

    family: ClassVar[str] = "process"
    power_loss: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return "process"


@attrs.frozen
class TornCall(_Named):
    """The process died while the operation -- a write -- was in flight: its first ``cut``
    bytes reached the file at ``path`` (CRASH-SYS-1).  ``path`` is empty when the source does
    not know the file (a crash it made itself, in a recovery)."""

    path: str
    cut: int = attrs.field(validator=_natural)

    family: ClassVar[str] = "torn-call"
    power_loss: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return f"torn-call:{self.path}:{self.cut}"


# -- a power loss ------------------------------------------------------------------------------


@attrs.frozen
class Strict(_Named):
    """Power loss keeping only what was synced, data and directory entries alike."""

    family: ClassVar[str] = "strict"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "strict"


@attrs.frozen
class DataKept(_Named):
    """Power loss after every unsynced write reached the disk and no unsynced directory
    change did."""

    family: ClassVar[str] = "data-kept"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "data-kept"


@attrs.frozen
class EntriesKept(_Named):
    """Power loss after every directory change reached the disk and no unsynced data did
    (the zero-length file after a rename)."""

    family: ClassVar[str] = "entries-kept"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "entries-kept"


@attrs.frozen
class Only(_Named):
    """Power loss on a device that reorders (CRASH-SYS-12): the file at ``path`` keeps all
    its unsynced changes, every other file only its synced data."""

    path: str

    family: ClassVar[str] = "only"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return f"only:{self.path}"


@attrs.frozen
class Prefix(_Named):
    """Power loss on a device that keeps trace order (CRASH-SYS-12): the first ``count``
    unsynced changes of all files together reached the disk."""

    count: int = attrs.field(validator=_natural)

    family: ClassVar[str] = "prefix"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return f"prefix:{self.count}"


@attrs.frozen
class Torn(_Named):
    """Power loss with the ``change``-th unsynced change of the file at ``path`` -- a write --
    kept up to its first ``cut`` bytes, cut at an absolute offset that is a multiple of
    ``granularity`` (the device's tear, CRASH-SYS-12).  The changes before it reached the
    disk: that file's own on a device that reorders, every file's in trace order on one that
    does not."""

    granularity: int = attrs.field(validator=_positive)
    path: str
    change: int = attrs.field(validator=_natural)
    cut: int = attrs.field(validator=_natural)

    family: ClassVar[str] = "torn"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return f"torn@{self.granularity}:{self.path}:{self.change}:{self.cut}"


#: How a :class:`Names` variant keeps the unsynced directory changes: those made before its
#: operation, its operation's only, or all but its operation's.
NamesKept = Literal["before", "only", "but"]


@attrs.frozen
class Names(_Named):
    """Power loss keeping some of the directory changes made since their directory's last
    fsync, and no unsynced data (CRASH-SYS-20).  ``op`` is an operation's index in the
    recorded operations: ``before`` keeps the changes of the operations before it (every
    profile: a journal commits them in order), ``only`` keeps that operation's change alone
    and ``but`` every one except its (``posix`` and ``btrfs``, which do not order directory
    operations: a later unlink kept, an earlier rename lost)."""

    keep: NamesKept
    op: int = attrs.field(validator=_natural)

    family: ClassVar[str] = "names"
    power_loss: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return f"names-{self.keep}:{self.op}"


#: A process crash: the kernel lived, every completed call is kept.
ProcessVariant: TypeAlias = ProcessCrash | TornCall
#: A power loss: what reaches the disk is decided by the syncs and the device.
PowerLoss: TypeAlias = Strict | DataKept | EntriesKept | Only | Prefix | Torn | Names
#: Which image of a crash point.
Variant: TypeAlias = ProcessVariant | PowerLoss

_CONSTANT: dict[str, Variant] = {
    v.name: v for v in (ProcessCrash(), Strict(), DataKept(), EntriesKept())
}


_NAMES_KEPT: dict[str, NamesKept] = {
    "names-before": "before", "names-only": "only", "names-but": "but"
}  # fmt: skip


def parse_variant(name: str) -> Variant:
    """The variant named ``name`` (its :attr:`name` gives ``name`` back); :class:`ValueError`
    for any other text.  A path is whatever lies between the prefix and the numbers, so it
    may hold a colon."""
    found = _CONSTANT.get(name)
    if found is not None:
        return found
    try:
        found = _parse(name)
    except (ValueError, TypeError):
        found = None
    if found is None or found.name != name:
        raise ValueError(f"no crash image is named {name!r}")
    return found


def _parse(name: str) -> Variant | None:
    head, colon, rest = name.partition(":")
    if not colon:
        return None
    if head == "torn-call":
        path, colon, cut = rest.rpartition(":")
        return TornCall(path, int(cut)) if colon else None
    if head == "only":
        return Only(rest)
    if head == "prefix":
        return Prefix(int(rest))
    keep = _NAMES_KEPT.get(head)
    if keep is not None:
        return Names(keep, int(rest))
    if head.startswith("torn@"):
        path, change, cut = rest.rsplit(":", 2)
        return Torn(int(head.removeprefix("torn@")), path, int(change), int(cut))
    return None


@attrs.frozen
class CrashPoint:
    """One crash image: the variant ``variant`` of a crash before operation ``op`` (the
    operation at index ``op`` of the recorded operations; their length for the end)."""

    op: int = attrs.field(validator=_natural)
    variant: Variant

    def __str__(self) -> str:
        return f"before op {self.op}, {self.variant.name}"
