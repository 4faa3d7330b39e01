"""What a failed machine run reports: its distinct failures, the rules each broke, and their
falsifying programs.

A check that fails raises :class:`MismatchError`; one whose rules are not the step's own
comparison names them itself (``rules``: HYGIENE-n after any step, LIFE-4 in a race), and the
machine stamps every exception that leaves one of its steps with the rules it broke and where it
came from (:func:`stamp`), so the rule travels with the failure into its reproducer and the
verdict.  Two failures with the same :class:`FailureKey` are one failure, reported once: a run
that meets it again records it and goes on (CHECK-9).

Hypothesis attaches a failure's falsifying program (the rule calls that reproduce it, and its
``@reproduce_failure`` blob) to the exception as notes; when it finds several distinct failures
it raises them together in a group. ``scopecheck fuzz`` saves one reproducer per distinct
failure, ``scopecheck replay`` shows the program it reran, and the planted-bug catalogue counts
the steps of the shortest one.
"""

from __future__ import annotations

import contextlib
import os
import traceback

import attrs


class MismatchError(AssertionError):
    """The backend disagreed with the model, or a check of what it did failed.

    ``rules``: the spec rules the failing check names itself when they are not the step's own
    (a leftover file is HYGIENE-1 whichever step left it); empty: the step's rules.  ``check``:
    what failed -- with ``rules``, the check; else what the step compared and found different
    (``"commit"``, ``"logical state: lists"``) -- which tells two failures apart
    (:class:`FailureKey`).  ``diverged``: whether the backend's state may now differ from the
    model's, so nothing after it in the example can be compared (``False`` for a check of
    what is left on disk, after which the example goes on once the failure is known)."""

    def __init__(
        self, message: str, *, rules: tuple[str, ...] = (), check: str = "", diverged: bool = True
    ) -> None:
        super().__init__(message)
        self.rules = rules
        self.check = check
        self.diverged = diverged


@attrs.frozen
class FailureKey:
    """What makes two failures one (CHECK-9): the rules a check names itself (none for a
    step's comparison) and where the failure came from -- that check; or what the comparison
    found different; or, for an exception the backend raised, its type and the line that
    raised it.  One bug met through several steps is one failure; its rules are those of the
    step of its shrunk program."""

    rules: tuple[str, ...]
    origin: str


_KEY = "scopecheck_failure_key"
_RULES = "scopecheck_failure_rules"


def origin_of(exc: BaseException) -> str:
    """Where a failure without rules of its own came from (:class:`FailureKey`)."""
    if isinstance(exc, MismatchError) and exc.check:
        return f"{type(exc).__name__}: {exc.check}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}"


def stamp(exc: BaseException, step_rules: tuple[str, ...]) -> FailureKey:
    """Give ``exc``, raised in (or right after) a machine step whose rules are ``step_rules``,
    its :class:`FailureKey` and the rules it broke (:func:`failure_rules`): a
    :class:`MismatchError` naming its own rules keeps them.  An exception already stamped keeps
    both (it left an inner step first)."""
    found = failure_key(exc)
    if found is not None:
        return found
    if isinstance(exc, MismatchError) and exc.rules:
        key, rules = FailureKey(exc.rules, exc.check or type(exc).__name__), exc.rules
    else:
        key, rules = FailureKey((), origin_of(exc)), step_rules
    # an exception type that takes no attributes is keyed again each time it is met
    with contextlib.suppress(AttributeError):
        setattr(exc, _KEY, key)
        setattr(exc, _RULES, rules)
    return key


def failure_key(exc: BaseException) -> FailureKey | None:
    """The key :func:`stamp` gave ``exc`` (``None``: it never left a machine step, e.g. it was
    raised while a world was made)."""
    key = getattr(exc, _KEY, None)
    return key if isinstance(key, FailureKey) else None


def failure_rules(exc: BaseException) -> tuple[str, ...] | None:
    """The rules :func:`stamp` found ``exc`` broke (``None``: never stamped)."""
    rules = getattr(exc, _RULES, None)
    return rules if isinstance(rules, tuple) else None


_NOT_STEPS = ("state.teardown()", "state.same_state()", "state.lifecycle_rules()")


def count_steps(program: str) -> int:
    """Rule calls in a printed falsifying program (not setup, invariant checks or teardown)."""
    return sum(
        1
        for line in program.splitlines()
        if "state." in line and not line.startswith("state =") and line.strip() not in _NOT_STEPS
    )


def _program_of(notes: list[str]) -> str:
    return "\n".join(
        note
        for note in notes
        if note.startswith(("state", "scopes_", "lists_", "@reproduce", "Draw "))
        or "reproduce_failure" in note
    )


def distinct_failures(exc: BaseException) -> list[BaseException]:
    """Each distinct failure Hypothesis reported in ``exc``: the exception that carries its
    falsifying program in its notes, or, when Hypothesis found several, each member of the
    group it raised (each shrunk on its own, with its own program and ``@reproduce_failure``
    blob).  A group the test itself raised carries the notes, so it stays one failure."""
    subs = getattr(exc, "exceptions", None)
    if subs and not _program_of(list(getattr(exc, "__notes__", []))):
        return [failure for sub in subs for failure in distinct_failures(sub)]
    return [exc]


def failure_programs(exc: BaseException) -> list[str]:
    """One falsifying program per distinct failure Hypothesis found (:func:`distinct_failures`)."""
    return [_program_of(list(getattr(f, "__notes__", []))) for f in distinct_failures(exc)]


def failure_program(exc: BaseException) -> str:
    """The shortest falsifying program attached to ``exc``: the reproducer to show and count."""
    return min(failure_programs(exc), key=count_steps)
