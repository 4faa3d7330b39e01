"""The catalogue of planted bugs: deliberately broken backends the machines must catch.

Each :class:`Mutant` names the mistake the seeds warn about, in one line, and builds a
:class:`~scopecheck.backends.registry.Backend` whose code has exactly that mistake.
``scopecheck mutants`` runs each through the machine (or the crash explorer, for
``caught_by="crash"``) with the derandomised ``mutants`` profile and reports whether, how fast and
how small it was caught; the test suite asserts every entry is caught (BRIEF "Prove the checks can
fail").

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import settings as Settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.backends.registry import Backend
from scopecheck.machines.failures import count_steps, failure_program

_MODULES = (
    "scopecheck.planted.memory",
    "scopecheck.planted.payloads",
    "scopecheck.planted.identifiers",
    "scopecheck.planted.leftovers",
    "scopecheck.planted.ordering",
    "scopecheck.planted.concurrency",
    "scopecheck.planted.sqlite",
    "scopecheck.planted.jsonl",
    "scopecheck.planted.ops",
    "scopecheck.planted.fork",
    "scopecheck.planted.fork_validation",
    "scopecheck.planted.legacy",
    "scopecheck.planted.jsonl_crash",
    "scopecheck.planted.syscall",
    "scopecheck.planted.fs_crash",
)


@attrs.frozen
class Mutant:
    name: str
    backend: str
    description: str
    make: Callable[[], Backend]
    caught_by: str = "machine"
    #: Builds the machine class for the backend; ``None`` = the storage machine.  Harness
    #: mutants (scopecheck/planted/ops.py) choose the lifecycle machine here.
    machine: Callable[[Backend], Any] | None = None
    #: A check other than the machine (the crash explorers, for ``caught_by="crash"``):
    #: ``run_mutant`` calls it instead of running the machine.
    check: Callable[[], MutantResult] | None = None


@attrs.frozen
class MutantResult:
    name: str
    backend: str
    description: str
    caught: bool
    seconds: float
    steps: int | None
    program: str
    error: str


CATALOGUE: dict[str, Mutant] = {}

#: The check of each ``caught_by="fork-probe"`` mutant, by name: ``(caught, detail)``
#: (scopecheck/planted/fork.py, scopecheck/planted/legacy.py).
PROBES: dict[str, Callable[[], tuple[bool, str]]] = {}


def register(mutant: Mutant) -> Mutant:
    if mutant.name in CATALOGUE:  # pragma: no cover - catalogue definition error
        raise ValueError(f"duplicate mutant name {mutant.name!r}")
    CATALOGUE[mutant.name] = mutant
    return mutant


def register_factories(
    module: str,
    kind: str,
    planted: dict[str, tuple[str, str, str]],
    run: Callable[[str], MutantResult],
) -> None:
    """Register planted bugs that are backend factories in ``module`` -- ``planted`` maps a
    name to ``(factory name, the rules that may catch it, one line)`` -- loaded as a user's
    backend would be (``module:factory``) and checked by ``run(name)``."""

    def make(name: str) -> Backend:
        from scopecheck.backends.adapters import load_backend

        return load_backend(f"{module}:{planted[name][0]}")

    for name, (_, rules, description) in planted.items():
        register(
            Mutant(
                name,
                kind,
                description,
                functools.partial(make, name),
                caught_by=f"{kind}:{rules}",
                check=functools.partial(run, name),
            )
        )


def all_mutants(backend: str | None = None) -> list[Mutant]:
    """Every registered mutant (optionally of one backend), in registration order."""
    for module in _MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return [m for m in CATALOGUE.values() if backend is None or m.backend == backend]


def is_check_failure(exc: BaseException) -> bool:
    """True iff ``exc`` (or every member of an exception group) is an assertion failure."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_check_failure(sub) for sub in exc.exceptions)
    return isinstance(exc, AssertionError)


def run_mutant(mutant: Mutant, settings: Settings | None = None) -> MutantResult:
    """Run the machine against ``mutant`` until it fails or the budget is spent; a mutant
    with its own ``check`` (crash-only planted bugs) is run by that check instead."""
    if mutant.check is not None:
        return mutant.check()
    from scopecheck.machines.storage import make_machine
    from scopecheck.run.profiles import get_profile

    if mutant.caught_by.startswith("fork-"):
        return run_fork_mutant(mutant)
    chosen = settings or get_profile("mutants")
    machine = (mutant.machine or make_machine)(mutant.make())
    lines: list[object] = []
    start = time.perf_counter()
    error = ""
    caught = False
    program = ""
    with with_reporter(lines.append):
        try:
            run_state_machine_as_test(machine, settings=chosen)  # type: ignore[no-untyped-call]
        except Exception as exc:
            # Only a check failing counts; a mutant that merely crashes the machine is a
            # broken catalogue entry, not a caught bug.
            caught = is_check_failure(exc)
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            program = failure_program(exc)
    seconds = time.perf_counter() - start
    return MutantResult(
        mutant.name,
        mutant.backend,
        mutant.description,
        caught,
        round(seconds, 3),
        count_steps(program) if caught else None,
        program,
        error,
    )


def run_fork_mutant(mutant: Mutant, max_examples: int = 600, shrink: bool = True) -> MutantResult:
    """Run a fork mutant: the fork machine (``shrink=False`` for a quick yes/no), or its probe."""
    from hypothesis import HealthCheck, Phase

    from scopecheck.machines.fork import make_fork_machine

    start = time.perf_counter()
    if mutant.caught_by == "fork-probe":
        caught, detail = PROBES[mutant.name]()
        return MutantResult(
            mutant.name,
            mutant.backend,
            mutant.description,
            caught,
            round(time.perf_counter() - start, 3),
            1 if caught else None,
            detail,
            detail,
        )
    settings = Settings(
        max_examples=max_examples,
        stateful_step_count=30,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate),
    )
    caught, error, program = False, "", ""
    lines: list[object] = []
    with with_reporter(lines.append):
        try:
            run_state_machine_as_test(make_fork_machine(mutant.make()), settings=settings)  # type: ignore[no-untyped-call]
        except Exception as exc:
            caught = is_check_failure(exc)
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            program = failure_program(exc)
    return MutantResult(
        mutant.name,
        mutant.backend,
        mutant.description,
        caught,
        round(time.perf_counter() - start, 3),
        count_steps(program) if caught else None,
        program,
        error,
    )
