"""What a failed machine run reports: its distinct failures and their falsifying programs.

Hypothesis attaches a failure's falsifying program (the rule calls that reproduce it, and its
``@reproduce_failure`` blob) to the exception as notes; when it finds several distinct failures
it raises them together in a group. ``scopecheck fuzz`` saves one reproducer per distinct
failure, ``scopecheck replay`` shows the program it reran, and the planted-bug catalogue counts
the steps of the shortest one.
"""

from __future__ import annotations

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
