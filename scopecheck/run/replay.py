"""Replay a saved failure exactly (``scopecheck replay FILE``).

A machine reproducer holds the exact choice sequence of one distinct failure (Hypothesis's
``@reproduce_failure`` blob, ``"reproduce"``): the replay runs that one example as it is --
nothing is generated and nothing is shrunk -- up to :data:`REPLAY_TRIES` times, until it fails
again.  It says the failure was reproduced (exit 1) or that it could not be reproduced (exit 3);
it never calls the bug fixed, since steps that race threads or talk to a backend process may
pass on one run and fail on the next (as a fault or kill replay, CRASH-COV-5).  A reproducer
without a choice sequence (a protocol failure, or one written by another Hypothesis version)
reruns its seed, without shrinking.  Crash reproducers (crash point, fault) are replayed by
``crashsim``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson
from hypothesis import Phase, reproduce_failure
from hypothesis import __version__ as hypothesis_version
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis.errors import DidNotReproduce
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.backends.registry import Backend
from scopecheck.backends.resolve import resolve_backend
from scopecheck.crashsim.fs_session import Factory
from scopecheck.machines.failures import failure_program
from scopecheck.models.errors import UsageError
from scopecheck.run.fuzz import WorldRoots, machine_for
from scopecheck.run.profiles import get_profile

#: How often a machine replay runs the recorded example before it says it could not
#: reproduce it.
REPLAY_TRIES = 3
#: The phases of an exact replay: the recorded example alone (``@reproduce_failure`` runs it
#: whatever the phases say; with these, nothing else could run either).
EXACT_PHASES = (Phase.explicit,)
#: The phases of a replay by seed: the seed's examples, never shrunk.
SEEDED_PHASES = (Phase.explicit, Phase.generate)


def load_reproducer(path: str) -> dict[str, Any]:
    try:
        record = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise UsageError("not_found", f"no reproducer file at {path}") from None
    except (orjson.JSONDecodeError, IsADirectoryError, PermissionError) as exc:
        raise UsageError("invalid_payload", f"{path} is not a reproducer file: {exc}") from None
    if not isinstance(record, dict) or "kind" not in record or "backend" not in record:
        raise UsageError("invalid_payload", f"{path} is not a reproducer file (no kind/backend)")
    return record


@attrs.frozen
class MachineReplay:
    """What a machine replay found: whether the failure happened again (``reproduced``) and
    the report; whether the recorded choice sequence ran as it is (``exact``) or the seed was
    rerun (no choice sequence usable), with the ``phases`` Hypothesis was given; how many
    ``tries`` it took and the ``examples`` the machine ran over them (an exact replay runs one
    example per try)."""

    reproduced: bool
    text: str
    exact: bool
    phases: tuple[Phase, ...]
    tries: int
    examples: int


def _machine_backend(record: dict[str, Any]) -> Backend:
    if record.get("spec"):
        from scopecheck.backends.adapters import load_backend

        return load_backend(record["spec"])
    return resolve_backend(record["backend"])


def replay_machine(record: dict[str, Any], *, tries: int = REPLAY_TRIES) -> MachineReplay:
    """Run a machine reproducer's recorded example again, up to ``tries`` times until it
    fails (see the module docstring); paths under a world's root are shown as ``<root>``."""
    from scopecheck.process.client import ProtocolFailure

    backend = _machine_backend(record)
    roots = WorldRoots()
    machine = machine_for(roots.watch(backend), record.get("machine", "storage"))
    version, blob = record.get("reproduce") or (None, None)
    exact = version == hypothesis_version
    if exact:
        how = "the recorded choice sequence, as it is"
    elif version is not None:
        how = (
            f"seed {record['seed']}, unshrunk: the choice sequence was recorded by Hypothesis "
            f"{version}, and this is {hypothesis_version}"
        )
    else:
        how = f"seed {record['seed']}, unshrunk: no choice sequence was recorded"
    phases = EXACT_PHASES if exact else SEEDED_PHASES
    settings = Settings(
        get_profile(record.get("profile", "dev")),
        max_examples=record.get("examples_per_round", 10),
        database=None,
        phases=phases,
    )
    target: Any = hypothesis_seed(record["seed"])(machine)
    if exact:
        target = reproduce_failure(str(version), ast.literal_eval(str(blob)))(target)
    missed = "the steps passed"
    try:
        for attempt in range(1, tries + 1):
            shown: list[object] = []
            try:
                with with_reporter(shown.append):
                    run_state_machine_as_test(target, settings=settings)  # type: ignore[no-untyped-call]
            except DidNotReproduce as exc:  # it passed, or it now draws other choices
                missed = str(exc)
                continue
            except Exception as exc:
                program = failure_program(exc) or "\n".join(map(str, shown)).strip()
                text = roots.shown(f"{program}\n{type(exc).__name__}: {exc}")
                return MachineReplay(True, f"ran {how}\n{text}", exact, phases, attempt,
                                     machine.examples_run)  # fmt: skip
            except ProtocolFailure as broke:  # the backend still breaks the protocol (PROC-2)
                text = roots.shown(f"ProtocolError: {broke.error.message}")
                return MachineReplay(True, f"ran {how}\n{text}", exact, phases, attempt,
                                     machine.examples_run)  # fmt: skip
    finally:
        if backend.close is not None:
            backend.close()
    return MachineReplay(
        False,
        f"ran {how}\ncould not reproduce in {tries} tries: {missed}",
        exact,
        phases,
        tries,
        machine.examples_run,
    )


def fs_factory(record: Mapping[str, Any]) -> Factory:
    """The factory a crash reproducer of source ``fs`` names (``target.spec``), which must
    still take ``fs`` and ``root``; a usage error saying why otherwise."""
    from scopecheck.backends.factory import load_factory, takes_filesystem

    target = record.get("target")
    spec = target.get("spec") if isinstance(target, Mapping) else None
    if not isinstance(spec, str):
        raise UsageError("invalid_payload", "crash reproducer of source fs without a spec")
    _, factory = load_factory(spec)
    if not callable(factory) or not takes_filesystem(factory):
        raise UsageError(
            "invalid_payload", f"{spec} no longer takes fs and root; cannot replay a crash"
        )
    return factory  # type: ignore[no-any-return]


def replay_crash(record: dict[str, Any]) -> tuple[bool | None, str]:
    """Re-check a kind ``crash`` reproducer with the crash explorer of its backend (JSONL on
    pyfakefs, a SQLite sweep, a backend process's system calls, or the generic sweep of a
    third-party backend named by its ``spec``), showing the files before and after recovery:
    ``(still failing, report)``, where ``None`` is a run that did not reproduce in several
    tries (neither confirmed nor fixed)."""
    if record.get("source") == "syscall" or record.get("engine") == "syscall":
        from scopecheck.process.syscall_crash import replay

        return replay(record)  # an older format (``engine``) is refused there, saying why
    if record.get("source") == "fs":
        from scopecheck.crashsim.generic_sweep import replay_record

        return replay_record(record, fs_factory(record))
    backend = resolve_backend(record["backend"])
    explorer = backend.crash
    if record.get("source") == "sqlite":
        from scopecheck.backends.crash_explorers import SqliteCrashExplorer

        if not isinstance(explorer, SqliteCrashExplorer):
            raise UsageError(
                "invalid_payload",
                f"backend {record['backend']!r} has no SQLite crash explorer to replay with",
            )
        return explorer.replay(record)
    if explorer is None:
        if record.get("source") == "jsonl":
            from scopecheck.backends.crash_explorers import JsonlCrashExplorer

            explorer = JsonlCrashExplorer()
        else:
            raise UsageError(
                "invalid_payload", f"backend {record['backend']!r} has no crash explorer"
            )
    return explorer.replay(record)
