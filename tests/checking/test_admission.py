"""A commit that has read its clock is admitted and finishes, whatever close() or a fork does
meanwhile (LIFE-4): the machine's race step holds such a commit and starts close() or the fork
then, on every bundled backend; a backend that drops it is caught, and only with the hold."""

from __future__ import annotations

import pytest

from scopecheck.backends.registry import BUNDLED
from scopecheck.machines.storage import AdmissionGate, MismatchError, make_machine
from scopecheck.planted import CATALOGUE, all_mutants

all_mutants()


def _race(backend: object, *, fork: bool, count: int = 2) -> object:
    machine = make_machine(backend)()  # type: ignore[arg-type]
    try:
        machine.race(sid="s1", count=count, fork=fork)
        machine.same_state()
        return machine
    finally:
        machine.teardown()


@pytest.mark.rule("LIFE-4", "LIFE-1", "FORK-12")
@pytest.mark.parametrize("fork", [False, True], ids=["close", "fork"])
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_a_commit_held_in_its_clock_read_finishes_on_every_bundled_backend(
    name: str, fork: bool
) -> None:
    """The race step held a writer inside its clock read while close() or the fork started,
    and the bundled backend let it finish and kept it (close) or held it wholly or not at all
    (fork)."""
    machine = _race(BUNDLED[name], fork=fork, count=3)
    assert machine.race_held  # type: ignore[attr-defined]


@pytest.mark.rule("LIFE-4")
def test_a_close_that_drops_an_admitted_commit_is_caught_by_the_hold() -> None:
    backend = CATALOGUE["memory-close-drops-admitted"].make()
    with pytest.raises(MismatchError, match="LIFE-4"):
        _race(backend, fork=False)


@pytest.mark.rule("LIFE-4")
def test_without_the_hold_the_dropped_commit_looks_unadmitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Teeth of the hold: with the clock left alone the same backend passes the race step
    (its refused commit is indistinguishable from one refused at admission)."""
    monkeypatch.setattr(AdmissionGate, "hold", lambda self: None)
    monkeypatch.setattr("scopecheck.machines.storage.ADMISSION_WAIT", 0.0)
    backend = CATALOGUE["memory-close-drops-admitted"].make()
    machine = _race(backend, fork=False)
    assert not machine.race_held  # type: ignore[attr-defined]
