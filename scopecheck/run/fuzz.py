"""Time-boxed fuzzing of one or more backends: rounds of the machine under fixed seeds.

A run is a sequence of rounds; round ``i`` uses seed ``seed + i`` and the number of examples
its reproducer records (``examples_per_round``), so any failing round is reproducible from the
seed alone.  Each distinct failure Hypothesis found in a round is saved as its own reproducer
holding that failure's exact choice sequence (its ``@reproduce_failure`` blob, ``"reproduce"``),
which ``scopecheck replay`` runs as it is, without generating or shrinking anything, and the
rules it broke (``"rules"``: the failing check's own, else its step's).  A path under a world's
root directory is shown as ``<root>/...`` in what a reproducer says (:class:`WorldRoots`), so
the same failure reads the same in every run.

One failure never hides the others (CHECK-9): after a round that found failures the run goes
on with the next, and the machine of every later round knows the failures already reported
(their :class:`~scopecheck.machines.failures.FailureKey`): met again, one is recorded as a
repeat and not raised, so its examples, steps and restarts go on counting and a failure
reached only later is found and reported too.  Only a backend that broke the protocol ends the
run at once (PROC-2).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
import time
import traceback
import unittest
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import attrs
import orjson
from hypothesis import Phase
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis.database import ExampleDatabase
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.backends.registry import Backend, World
from scopecheck.crashsim.failure import relative_to_root
from scopecheck.crashsim.shown import dumps
from scopecheck.machines.failures import (
    FailureKey,
    distinct_failures,
    failure_key,
    failure_program,
    failure_rules,
    origin_of,
)
from scopecheck.machines.hygiene import disk_root
from scopecheck.machines.storage import StorageMachine, make_machine, rules_of_program
from scopecheck.models.protocols import Clock
from scopecheck.process.client import ProtocolFailure
from scopecheck.run.internal import raised_by_us, raised_where


def _frozen_record(record: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(record))


@attrs.frozen
class SavedFailure:
    """One failure a run found: the reproducer ``record`` it wrote (a read-only copy) and the
    file at ``path`` that holds it, for ``scopecheck replay``. What reports the failure reads
    ``record``, never the file."""

    record: Mapping[str, Any] = attrs.field(converter=_frozen_record)
    path: str


def save_failure(directory: Path, record: Mapping[str, Any]) -> SavedFailure:
    """Write ``record`` as a new reproducer in ``directory`` (:func:`save_reproducer`)."""
    return SavedFailure(record, str(save_reproducer(directory, dict(record))))


@attrs.define
class BackendReport:
    """What one backend's fuzzing did; ``as_json()`` is the per-backend shape of ``fuzz --json``.

    ``reproducers`` are the files of its failures; ``saved`` holds each failure's record with its
    file, for a run made in this process (a worker's report read back by
    :mod:`scopecheck.run.parallel` has the files only)."""

    examples: int = 0
    steps: int = 0
    #: Times a machine met again a failure the run had already reported (CHECK-9).
    repeats: int = 0
    crash_states: int = 0
    #: Single-I/O-fault runs without a crash, where the backend's explorer makes them.
    crash_fault_runs: int = 0
    failures: int = 0
    #: Crash failures only under other file-system profiles than the run's (CRASH-SYS-15):
    #: saved, listed, not failing the run.
    warnings: int = 0
    seconds: float = 0.0
    reproducers: list[str] = attrs.field(factory=list)
    saved: list[SavedFailure] = attrs.field(factory=list)

    def save(self, directory: Path, record: Mapping[str, Any]) -> None:
        """Count a failure and write its reproducer (:func:`save_failure`)."""
        failure = save_failure(directory, record)
        self.failures += 1
        self.saved.append(failure)
        self.reproducers.append(failure.path)

    def warn(self, directory: Path, record: Mapping[str, Any]) -> None:
        """Write the reproducer of a failure under other file-system profiles only, counted
        as a warning (CRASH-SYS-15)."""
        self.reproducers.append(save_failure(directory, record).path)
        self.warnings += 1

    @property
    def steps_per_second(self) -> float:
        return round(self.steps / self.seconds, 1) if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "examples": self.examples,
            "steps": self.steps,
            "crash_states": self.crash_states,
            "crash_fault_runs": self.crash_fault_runs,
            "failures": self.failures,
            "warnings": self.warnings,
            "steps_per_second": self.steps_per_second,
            "reproducers": self.reproducers,
        }


#: Share of a backend's fuzz budget spent on crash exploration when it has a crash explorer.
CRASH_SHARE = 0.3

#: The machines a fuzzing run can drive: the storage machine, or the fork machine.
MachineKind = Literal["storage", "fork"]


def machine_for(backend: Backend, kind: MachineKind = "storage") -> type[Any]:
    """The machine class of ``kind`` over ``backend``; both count ``examples_run`` and
    ``steps_run``."""
    if kind == "fork":
        from scopecheck.machines.fork import make_fork_machine

        return make_fork_machine(backend)
    machine: type[StorageMachine] = make_machine(backend)
    return machine


def reproduce_blob(program: str) -> tuple[str, str] | None:
    """``(version, blob)`` from the ``@reproduce_failure(...)`` hint Hypothesis printed."""
    marker = "@reproduce_failure("
    start = program.find(marker)
    if start < 0:
        return None
    inner = program[start + len(marker) : program.index(")", start)]
    version, blob = (part.strip() for part in inner.split(",", 1))
    return version.strip("'\""), blob


@attrs.define
class WorldRoots:
    """The root directories of the worlds a machine made (``disk_root``, HYGIENE-1..3), so a
    message naming one -- a hygiene check's, a backend's error about one of its files -- can
    show it as ``<root>`` (:func:`~scopecheck.crashsim.failure.relative_to_root`): every
    example's world has a fresh directory, and the same failure must read the same."""

    roots: set[str] = attrs.field(factory=set)

    def watch(self, backend: Backend) -> Backend:
        """``backend`` with every new world's root noted here."""
        make = backend.new_world

        def new_world(clock: Clock) -> World:
            world = make(clock)
            root = disk_root(world)
            if root is not None:
                self.roots.add(root)
            return world

        return attrs.evolve(backend, new_world=new_world)

    def shown(self, text: str) -> str:
        """``text`` with each noted root shown as ``<root>``."""
        for root in self.roots:
            text = relative_to_root(text, root)
        return text


def step_rules_of(kind: MachineKind) -> dict[str, tuple[str, ...]] | None:
    """The step rules of the machine of ``kind`` for
    :func:`~scopecheck.machines.storage.rules_of_program` (``None``: the storage machine's)."""
    if kind == "fork":
        from scopecheck.machines.fork import FORK_STEP_RULES

        return FORK_STEP_RULES
    return None


def key_of(failure: BaseException) -> FailureKey:
    """What makes ``failure`` one failure of the run (CHECK-9): the key its machine stamped
    on it, or, for one raised outside any step (while a world was made), where it came from."""
    return failure_key(failure) or FailureKey((), f"outside a step: {origin_of(failure)}")


def rules_of(failure: BaseException, program: str, kind: MachineKind) -> tuple[str, ...]:
    """The rules ``failure`` broke: those its machine found (the failing check's own, else its
    step's), or, for one raised outside any step, those of its program's last step."""
    found = failure_rules(failure)
    return found if found is not None else rules_of_program(program, step_rules_of(kind))


def machine_record(
    failure: BaseException,
    roots: WorldRoots,
    reports: list[str],
    kind: MachineKind = "storage",
    **fields: Any,
) -> dict[str, Any]:
    """The reproducer of one distinct failure
    (:func:`~scopecheck.machines.failures.distinct_failures`) of the machine of ``kind``:
    ``fields`` (backend, seed, ...), then its own error, the rules it broke (:func:`rules_of`:
    the failing check's own, else its step's), its shrunk program and its exact choice
    sequence (``reproduce``: ``[version, blob]``, ``None`` when Hypothesis printed none),
    whether shrinking ran to its end, and what Hypothesis reported; paths under a world's root
    are shown as ``<root>``.  A failure scopecheck's own code raised
    (:func:`~scopecheck.run.internal.raised_by_us`) also says so -- ``"origin": "scopecheck"``,
    where it was raised and its traceback -- so that it is reported as an internal error,
    never as the backend's failure (INSTALL-19)."""
    program = roots.shown(failure_program(failure))
    record = {
        "kind": "machine",
        "machine": kind,
        **fields,
        "error": roots.shown(f"{type(failure).__name__}: {failure}"),
        "rules": list(rules_of(failure, program, kind)),
        "program": program,
        "reproduce": reproduce_blob(program),
        "shrunk": not any(SHRINK_STOPPED in text for text in reports),
        "reports": reports,
    }
    if raised_by_us(failure):
        record.update(
            origin="scopecheck",
            where=raised_where(failure),
            traceback=roots.shown("".join(traceback.format_exception(failure))),
        )
    return record


def save_reproducer(directory: Path, record: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in record["backend"])
    stem = f"{safe.strip('-')}-{stamp}-seed{record['seed']}"
    data = dumps(record, option=orjson.OPT_INDENT_2)  # an odd string a backend gave, escaped
    for number in itertools.count(1):
        path = directory / (f"{stem}.json" if number == 1 else f"{stem}-{number}.json")
        try:  # exclusive create: two failures of one run never share (and overwrite) a file
            with path.open("xb") as handle:
                handle.write(data)
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def report_file_name(name: str) -> str:
    """A worker's report file for backend ``name``: bundled names as they are, a
    ``PATH:FACTORY`` spec made safe for a file name (with a hash, so two specs never clash)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if safe != name:
        safe += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe}.json"


def protocol_record(
    broke: ProtocolFailure, backend: str, spec: str | None, seed: int, profile: str
) -> dict[str, Any]:
    """The reproducer of a world stopped by the backend breaking the protocol: no shrunk
    program (nothing about it is the model's), the rule, and the error with what was sent,
    what came back and the end of the backend's stderr (PROC-2); a replay reruns the seed."""
    return {
        "kind": "machine",
        "backend": backend,
        "spec": spec,
        "seed": seed,
        "profile": profile,
        "error": f"ProtocolError: {broke.error.message}",
        "rules": [broke.rule],
        "program": "",
        "reproduce": None,
    }


class _ShrinkUntil:
    """Hypothesis stops shrinking at ``perf_counter() + MAX_SHRINKING_SECONDS``, computed when
    shrinking starts; as that module constant, this value makes the sum the reading ``at``, so
    shrinking ends at the run's deadline however late the failure was found (INSTALL-11)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __radd__(self, now: float) -> float:
        return max(now, self.at)


@contextlib.contextmanager
def shrinking_until(at: float | None) -> Iterator[None]:
    """Hypothesis's shrinking ends at the ``time.perf_counter()`` reading ``at`` (``None``:
    its own limit) while the block runs."""
    from hypothesis.internal.conjecture import engine

    saved = engine.MAX_SHRINKING_SECONDS
    if at is not None:
        engine.MAX_SHRINKING_SECONDS = _ShrinkUntil(at)  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = saved


#: What Hypothesis reports when it stopped shrinking at its time limit.
SHRINK_STOPPED = "stopped because it is making very slow progress"


def _round_size(
    report: BackendReport,
    *,
    planned: int,
    examples: int | None,
    per_round: int,
    started: float,
    end: float,
    sized: bool,
) -> int:
    """How many examples the next round runs (0: stop).  ``examples``: exactly that many over
    all rounds; ``sized``: one to start, then as many as fit before ``end`` at the pace so far;
    else a full round while time is left."""
    if examples is not None:
        return min(per_round, examples - planned)
    if sized and report.examples == 0:
        return 1  # at least one example, then as many as fit
    left = end - time.perf_counter()
    if left <= 0:
        return 0
    if not sized:
        return per_round
    pace = (time.perf_counter() - started) / report.examples
    if left < pace / 2:
        return 0
    return max(1, min(per_round, int(left / pace)))


def fuzz_backend(
    backend: Backend,
    *,
    budget: float,
    seed: int,
    settings: Settings,
    failures_dir: Path,
    profile: str,
    examples_per_round: int = 10,
    on_progress: Callable[[BackendReport], None] | None = None,
    spec: str | None = None,
    machine_kind: MachineKind = "storage",
    examples: int | None = None,
    deadline: float | None = None,
    shrink_deadline: float | None = None,
    saved: ExampleDatabase | None = None,
    fs_profile: str = "posix",
) -> BackendReport:
    """Run rounds of the machine on ``backend`` until ``budget`` seconds pass, saving a
    reproducer for each distinct failure (:func:`machine_record`) once: a failure already
    reported is a repeat in later rounds, and the rounds go on (CHECK-9) -- only a backend
    that broke the protocol ends them (PROC-2).  A backend with a crash explorer
    (``Backend.crash``) spends :data:`CRASH_SHARE` of the budget on crash states after the
    machine, filling ``crash_states``, whatever the machine found.  ``machine_kind``
    picks the storage machine or the fork machine (:func:`machine_for`).

    ``examples`` runs exactly that many examples instead, in rounds of
    ``examples_per_round``: the same seed does the same work every time (INSTALL-12).
    ``deadline`` (a ``time.perf_counter()`` reading) ends the machine there instead of after
    ``budget``, each round sized to what is left at the pace so far (INSTALL-11), and
    ``shrink_deadline`` ends Hypothesis's shrinking there: the failure is then saved as
    found, with ``"shrunk": false``.  ``saved``: an example database whose examples for this
    machine are replayed first (the reuse phase alone, then shrinking).  What Hypothesis
    reports while it runs goes into the reproducer (``"reports"``), never to stdout.  A crash
    failure that happens only under other file-system profiles than ``fs_profile`` is a
    warning (CRASH-SYS-15)."""
    report = BackendReport()
    machine_budget = budget * (1 - CRASH_SHARE) if backend.crash is not None else budget
    roots = WorldRoots()
    machine = machine_for(roots.watch(backend), machine_kind)
    started = time.perf_counter()
    end = deadline if deadline is not None else started + machine_budget
    round_index = planned = 0
    #: The failures reported so far, each once (CHECK-9).
    known: set[FailureKey] = set()

    def run_round(
        round_settings: Settings, round_seed: int, size: int, *, replay: bool = False
    ) -> bool:
        """One round of ``size`` examples, saving each failure it found that the run had not
        reported; ``True`` when the backend broke the protocol (the run ends).  In the
        ``replay`` of a database with nothing saved, Hypothesis has no example to run."""
        machine.examples_run = machine.steps_run = machine.repeats = 0
        machine.known_failures = frozenset(known)
        roots.roots.clear()
        reports: list[object] = []
        try:
            with shrinking_until(shrink_deadline), with_reporter(reports.append):
                run_state_machine_as_test(  # type: ignore[no-untyped-call]
                    hypothesis_seed(round_seed)(machine),
                    settings=Settings(round_settings, max_examples=size, print_blob=True),
                )
        except unittest.SkipTest:
            if not replay:
                raise
            return False
        except Exception as exc:
            shown = [roots.shown(str(text)) for text in reports]
            for failure in distinct_failures(exc):  # each with its own choice sequence
                record = machine_record(
                    failure,
                    roots,
                    shown,
                    machine_kind,
                    backend=backend.name,
                    spec=spec,
                    seed=round_seed,
                    profile=profile,
                    examples_per_round=size,
                )
                key = key_of(failure)
                if key in known:
                    report.repeats += 1
                    continue
                known.add(key)
                report.save(failures_dir, record)
            return False
        except ProtocolFailure as broke:  # the backend broke the protocol: reported once (PROC-2)
            record = protocol_record(broke, backend.name, spec, round_seed, profile)
            record.update(machine=machine_kind, examples_per_round=examples_per_round)
            report.save(failures_dir, record)
            return True
        finally:
            report.examples += machine.examples_run
            report.steps += machine.steps_run
            report.repeats += machine.repeats
            report.seconds = time.perf_counter() - started
            if on_progress is not None:
                on_progress(report)
        return False

    # What the example database holds for this machine -- a finding of another run, a HypoFuzz
    # worker or a fleet sharing a Redis -- is replayed before the seeded rounds (FLEET-3).
    stopped = saved is not None and run_round(
        Settings(settings, database=saved, phases=[Phase.reuse, Phase.shrink]), seed, 1, replay=True
    )
    while not stopped and (
        size := _round_size(
            report, planned=planned, examples=examples, per_round=examples_per_round,
            started=started, end=end, sized=deadline is not None,
        )
    ):  # fmt: skip
        round_seed = seed + round_index
        round_index += 1
        planned += size
        stopped = run_round(settings, round_seed, size)
    remaining = max(0.0, budget - (time.perf_counter() - started))
    if backend.crash is not None and not stopped:
        # Even with nothing left, the first workload's states after every acknowledgement
        # are checked (CRASH-COV-2): a run never shows a crash phase that did not run.
        states, faults, records = backend.crash.explore_with_faults(remaining, seed)
        report.crash_fault_runs += faults
        report.crash_states += states
        for record in records:
            record.setdefault("spec", spec)
            profiles = record.get("profiles") or ()
            if profiles and fs_profile not in profiles:
                report.warn(failures_dir, record)  # CRASH-SYS-15
            else:
                report.save(failures_dir, record)
        report.seconds = time.perf_counter() - started
        if on_progress is not None:
            on_progress(report)
    return report
