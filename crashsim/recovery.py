"""The one recovery checker: how a reopened crash image is judged, whatever reopened it.

A source reopens an image its own way -- a factory over a pyfakefs sandbox, a backend process
told ``hello`` over a directory -- and hands :func:`judge` a ``reopen()`` giving a
repository over it.  What the reopened Session must then be is the same for every source
(rules CRASH-FS-1..4 and CRASH-FS-6 in ``spec/rules/crash_fs.toml``):

* reopening, listing and opening do not raise (CRASH-FS-1);
* the Session is present unless a state the crash point allows has none (CRASH-FS-2), and
  its state is one of the model states the crash point allows: every acknowledged step
  present, none partly visible (CRASH-FS-2; CRASH-FS-6 for a power-loss image,
  :func:`after_power_loss`);
* the first commit after recovery gets a sequence above every one the recovered state's
  steps used (SEQ-7, CRASH-FS-3);
* a second reopen gives the state after that commit (CRASH-FS-4).

A source adds its own checks after these (``extra``: the JSONL sidecars, the lifecycle
invariants), never a second copy of them.  An error that names a file of the image names it
relative to the directory the image was reopened from (``root``: ``<root>/s.db``), so the
same failure reads the same in every run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from scopecheck.crashsim import shown
from scopecheck.crashsim.failure import relative_to_root
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.records import Snapshot

if TYPE_CHECKING:
    from scopecheck.crashsim.persistence import Image


@attrs.frozen
class Broken:
    """A rule the reopened image broke: ``recovered`` is what was read (a state, or why
    nothing could be), ``error`` the exception behind it, if any."""

    rule: str
    problem: str
    recovered: Snapshot | str | None = None
    error: BaseException | None = attrs.field(default=None, eq=False)


#: The rule each check of :func:`judge` enforces, by the check's name: the format-blind
#: CRASH-FS rules.  The JSONL sweep judges our own backend under its CRASH rules instead.
FS_RULES: Mapping[str, str] = {
    "reopen": "CRASH-FS-1",
    "vanished": "CRASH-FS-2",
    "state": "CRASH-FS-2",
    "recreate": "CRASH-FS-2",
    "recreate-raised": "CRASH-FS-1",
    "seq": "CRASH-FS-3",
    "again": "CRASH-FS-4",
}


@attrs.frozen
class Extra:
    """A source's own checks, run by :func:`judge` at three moments: ``recovered(storage,
    state, matched)`` on the open handle of a state the crash point allows, before the probe
    commit; ``committed(results, state)`` once the probe commit is made and everything is
    closed; ``reopened()`` after the second reopen.  Each returns what broke, or ``None``.
    ``mismatched(storage, state)`` adds the source's own words to a state no crash point
    allows (what its invariants say of it)."""

    recovered: Callable[[Any, Snapshot, int], Broken | None] | None = None
    committed: Callable[[Sequence[Any], Snapshot], Broken | None] | None = None
    reopened: Callable[[], Broken | None] | None = None
    mismatched: Callable[[Any, Snapshot | None], str] | None = None


@attrs.frozen
class Recovered:
    """The reopened image passed: ``state`` is what it recovered (``None``: no Session, as
    allowed), ``matched`` the model state it equals."""

    state: Snapshot | None
    matched: int


@attrs.frozen
class Expected:
    """What a crash point allows: ``snapshots[i]`` is the model's Session after the first
    ``i`` steps (``None``: none), ``next_seqs[i]`` the lowest seq the next commit may get then,
    ``steps`` the workload's step names, ``allowed`` the indices the recovered state may be."""

    snapshots: Sequence[Snapshot | None]
    next_seqs: Sequence[int]
    steps: Sequence[str]
    allowed: tuple[int, ...]

    @property
    def states(self) -> list[Snapshot | None]:
        return [self.snapshots[i] for i in self.allowed]

    def mismatch(self, got: object) -> str:
        """Which way ``got`` is wrong: an acknowledged delete undone, acknowledged steps lost
        (it equals an earlier model state), or something no prefix of the workload gives."""
        if all(self.snapshots[i] is None for i in self.allowed):
            return "a Session whose delete was acknowledged is back"
        before = [self.snapshots[i] for i in range(min(self.allowed))]
        earlier = [i for i in range(len(before)) if among(got, [before[i]]) is not None]
        if earlier:
            lost = [f"{i + 1}:{self.steps[i]}" for i in range(earlier[-1], min(self.allowed))]
            return (
                f"the recovered Session lost acknowledged steps {', '.join(lost)} (it is the "
                f"model after step {earlier[-1]})"
            )
        return (
            "the recovered Session is no state any prefix of the workload produces (part of a "
            "transaction visible, or data changed)"
        )


_HERE = os.path.dirname(os.path.abspath(__file__))


def ours(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by scopecheck's own crash tooling (a recorder, the sandbox)
    rather than by the backend: then it is our bug, re-raised, never a verdict on the
    backend."""
    if isinstance(exc, ScopecheckError):
        return False
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(
        _HERE + os.sep
    )


def error_text(exc: BaseException, root: str | None = None) -> str:
    """``Type(code): message`` of a backend's error, a path under ``root`` shown as
    ``<root>/...``: bounded and escaped (:mod:`~scopecheck.crashsim.shown`), whatever the
    backend put in it -- a message of megabytes, a lone surrogate, a ``__str__`` that raises."""
    try:
        message = str(exc)
    except Exception as failed:
        message = f"(its message could not be read: {type(failed).__name__})"
    code = getattr(exc, "code", None)
    kind = type(exc).__name__
    said = shown.text(message, ERROR_LIMIT)
    text = f"{kind}({shown.text(str(code), 80)}): {said}" if code else f"{kind}: {said}"
    return relative_to_root(text, root)


#: Characters of a backend's error message a report shows.
ERROR_LIMIT = 2000


class Garbled(Exception):
    """A backend call returned something no backend keeping the contract returns (``list()``
    giving no list of Session ids, ``commit()`` no committed writes): what the reopen read
    back is no state a crash point allows."""


def listed(found: object) -> list[str]:
    """What ``repository.list()`` returned, checked to be Session ids; :class:`Garbled`
    saying what it was instead."""
    if isinstance(found, (list, tuple)) and all(isinstance(s, str) for s in found):
        return list(found)
    raise Garbled(f"listing the Sessions returned {shown.thing(found)}, not a list of ids")


def among(got: object, states: Sequence[Snapshot | None]) -> int | None:
    """The index of the first of ``states`` equal to ``got``, or ``None``; a comparison that
    raises (a recovered record holding an object whose ``==`` fails) matches nothing."""
    for index, state in enumerate(states):
        try:
            if state == got:
                return index
        except Exception:
            continue
    return None


def close(thing: Any) -> None:
    """Close a repository or storage that has a ``close``."""
    closer = getattr(thing, "close", None)
    if callable(closer):
        closer()


def _quietly(*things: Any) -> None:
    for thing in things:  # the check failed already; that is the report
        with contextlib.suppress(Exception):
            close(thing)


def judge(
    reopen: Callable[[], Any],
    expected: Expected,
    *,
    session: str,
    probe: Any | None,
    recreate: Snapshot | None = None,
    extra: Extra = Extra(),
    rules: Mapping[str, str] = FS_RULES,
    errors: tuple[type[Exception], ...] = (Exception,),
    root: str | None = None,
) -> Broken | Recovered:
    """Reopen through ``reopen()`` and judge the Session ``session`` (see the module
    docstring); ``probe`` is the write of the first commit after recovery (``None``: a source
    whose rules ask for the recovered state only -- SQLite's CRASH-SQL-3 -- stops there).
    ``recreate``: when the Session is absent (as allowed), creating it again must give this
    empty Session -- nothing of a deleted or unacknowledged Session joins it (CRASH-FS-2).
    ``extra`` holds the
    source's own checks; ``rules`` names the rule of each check; ``errors`` are the exceptions
    that are the backend's answer (a source whose backend must answer with coded errors only
    narrows them) -- any other, and any raised by our own tooling (:func:`ours`), propagates.
    ``root`` is the directory ``reopen()`` opens, for the errors' text (:func:`error_text`)."""
    allowed = expected.states
    repo: Any = None
    storage: Any = None
    try:
        repo = reopen()
        present = session in listed(repo.list())
        if present:
            storage = repo.open(session)
            got: Snapshot | None = storage.snapshot()
    except Garbled as exc:
        _quietly(storage, repo)
        return Broken(rules["state"], f"after the crash {exc}", str(exc))
    except errors as exc:
        if ours(exc):
            raise
        _quietly(storage, repo)
        problem = f"reopen after the crash raised {error_text(exc, root)}"
        return Broken(rules["reopen"], problem, error=exc)
    if not present:
        if None not in allowed:
            _quietly(repo)
            problem = "the Session vanished though its create was acknowledged"
            return Broken(rules["vanished"], problem)
        if recreate is None:
            _quietly(repo)
            return Recovered(None, 0)
        return _recreated(repo, session, recreate, rules, errors, root)
    index = among(got, allowed)
    if index is None:
        more = "" if extra.mismatched is None else extra.mismatched(storage, got)
        _quietly(storage, repo)
        return Broken(rules["state"], expected.mismatch(got) + more, got)
    assert got is not None
    matched = expected.allowed[index]
    if extra.recovered is not None:
        broken = extra.recovered(storage, got, matched)
        if broken is not None:
            _quietly(storage, repo)
            return broken
    if probe is None:
        _quietly(storage, repo)
        return Recovered(got, matched)
    try:
        done = storage.commit([probe])
        after = storage.snapshot()
    except errors as exc:
        if ours(exc):
            raise
        _quietly(storage, repo)
        problem = f"the first commit after recovery raised {error_text(exc, root)}"
        return Broken(rules["seq"], problem, got, error=exc)
    try:
        storage.close()
        close(repo)
    except errors as exc:
        if ours(exc):
            raise
        problem = (
            f"closing the recovered Session after its first commit raised {error_text(exc, root)}"
        )
        return Broken(rules["again"], problem, got, error=exc)
    floor = expected.next_seqs[matched]
    first = _first_seq(done)
    if isinstance(first, str):
        return Broken(rules["seq"], f"the first commit after recovery returned {first}", got)
    if first is None or first < floor:
        return Broken(
            rules["seq"],
            f"the first commit after recovery got seq {first}, but the "
            f"recovered state is the model after step {matched}, whose writes used every seq "
            f"below {floor}: a consumed sequence is reused (SEQ-7), or part of a transaction "
            "whose other writes left nothing visible was recovered",
            got,
        )
    if extra.committed is not None:
        broken = extra.committed(done, got)
        if broken is not None:
            return broken
    again, error = read_again(reopen, session, errors, root)
    if among(again, [after]) is None:
        return Broken(
            rules["again"],
            "a second reopen gives a different state (recovery is not idempotent, or the "
            "commit after recovery was lost)",
            again,
            error,
        )
    if extra.reopened is not None:
        broken = extra.reopened()
        if broken is not None:
            return broken
    return Recovered(got, matched)


def _first_seq(done: object) -> int | str | None:
    """The seq the first write of a commit got (``None``: nothing committed), or, for a
    result that is not the committed writes, what it is instead."""
    if not isinstance(done, (list, tuple)):
        return f"{shown.thing(done)}, not its committed writes"
    if not done:
        return None
    seq = getattr(done[0], "seq", None)
    if type(seq) is not int:
        return f"{shown.thing(done[0])} as its first committed write, whose seq is no integer"
    return seq


def image_key(image: Image) -> tuple[Any, ...]:
    """``image`` as a dictionary key (equal keys, equal images): a checker that meets an image
    it reopened already, judged against the same states, answers with that reopen instead of
    making it again -- the same reopen of the same files gives the same Session."""
    return (tuple(sorted(image.files.items())), image.dirs, image.links)


def read_again(
    reopen: Callable[[], Any],
    session: str,
    errors: tuple[type[Exception], ...] = (Exception,),
    root: str | None = None,
) -> tuple[Snapshot | str | None, BaseException | None]:
    """The Session's state after another reopen (``None``: absent), or why it could not be
    read (a path under ``root`` shown as ``<root>/...``) and the exception."""
    repo: Any = None
    try:
        repo = reopen()
        if session not in listed(repo.list()):
            return None, None
        storage = repo.open(session)
        snapshot: object = storage.snapshot()
        storage.close()
        if not isinstance(snapshot, Snapshot):
            return f"the Session's snapshot() returned {shown.thing(snapshot)}", None
        return snapshot, None
    except Garbled as exc:
        return str(exc), exc
    except errors as exc:
        if ours(exc):
            raise
        return f"reopen raised {error_text(exc, root)}", exc
    finally:
        with contextlib.suppress(Exception):
            close(repo)


def _recreated(
    repo: Any,
    session: str,
    empty: Snapshot,
    rules: Mapping[str, str],
    errors: tuple[type[Exception], ...],
    root: str | None,
) -> Broken | Recovered:
    storage: Any = None
    try:
        storage = repo.create(session)
        got = storage.snapshot()
    except errors as exc:
        if ours(exc):
            raise
        _quietly(storage, repo)
        problem = f"creating the absent Session raised {error_text(exc, root)}"
        return Broken(rules["recreate-raised"], problem, error=exc)
    _quietly(storage, repo)
    if among(got, [empty]) is None:
        return Broken(
            rules["recreate"],
            "the Session is absent, but creating it again gives old data instead of an empty "
            "Session",
            got,
        )
    return Recovered(None, 0)


def power_loss_named(variant: str) -> str:
    """How a CRASH-FS-6 problem names its image: a story that knows which files lost data
    adds them inside the parentheses (:func:`~scopecheck.crashsim.story.with_lost`)."""
    return f"after power loss ({variant})"


def after_power_loss(broken: Broken, variant: str, power_loss: bool) -> Broken:
    """A lost or partial state after power loss breaks CRASH-FS-6, with what to do about it."""
    if broken.rule != "CRASH-FS-2" or not power_loss:
        return broken
    return attrs.evolve(
        broken,
        rule="CRASH-FS-6",
        problem=f"{power_loss_named(variant)} {broken.problem}: fsync the file's data (and "
        "its directory, after a create, rename or unlink) before acknowledging",
    )
