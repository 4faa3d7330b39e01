"""Replay a saved failure exactly (``scopecheck replay FILE``).

A machine reproducer holds Hypothesis's choice sequence (the ``@reproduce_failure`` blob), so
the replay runs the very same steps; exit status 1 means the bug is still there, 0 that it is
gone.  Crash reproducers (crash point, fault) are replayed by ``crashsim``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orjson
from hypothesis import reproduce_failure
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from scopecheck.backends import Backend, resolve_backend
from scopecheck.fuzz import machine_for
from scopecheck.models.errors import UsageError
from scopecheck.mutants import failure_program
from scopecheck.profiles import get_profile


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


def replay_machine(record: dict[str, Any]) -> tuple[bool, str]:
    """Re-run a machine failure; returns ``(still_failing, program_or_message)``."""
    if record.get("spec"):
        from scopecheck.adapters import load_backend

        backend: Backend = load_backend(record["spec"])
    else:
        backend = resolve_backend(record["backend"])
    machine = machine_for(backend, record.get("machine", "storage"))
    settings = Settings(
        get_profile(record.get("profile", "dev")),
        max_examples=record.get("examples_per_round", 10),
        database=None,
    )
    target: Any = hypothesis_seed(record["seed"])(machine)
    if record.get("reproduce"):
        version, blob = record["reproduce"]
        target = reproduce_failure(version, ast.literal_eval(blob))(target)
    from scopecheck.process.client import ProtocolFailure

    try:
        run_state_machine_as_test(target, settings=settings)  # type: ignore[no-untyped-call]
    except Exception as exc:
        return True, failure_program(exc) + f"\n{type(exc).__name__}: {exc}"
    except ProtocolFailure as broke:  # the backend still breaks the protocol (PROC-2)
        return True, f"ProtocolError: {broke.error.message}"
    finally:
        if backend.close is not None:
            backend.close()
    return False, "the recorded steps now pass"


def replay_crash(record: dict[str, Any]) -> tuple[bool | None, str]:
    """Re-check a kind ``crash`` reproducer with the crash explorer of its backend (JSONL on
    pyfakefs, a SQLite sweep, a backend process's system calls, or the generic sweep of a
    third-party backend named by its ``spec``), showing the files before and after recovery:
    ``(still failing, report)``, where ``None`` is a run that did not reproduce in several
    tries (neither confirmed nor fixed)."""
    if record.get("source") == "syscall" or record.get("engine") == "syscall":
        from scopecheck.syscall_crash import replay

        return replay(record)  # an older format (``engine``) is refused there, saying why
    if record.get("source") == "fs":
        from scopecheck.crashsim.generic_sweep import replay_record
        from scopecheck.factory import load_factory, takes_filesystem

        target = record.get("target")
        spec = target.get("spec") if isinstance(target, dict) else None
        if not isinstance(spec, str):
            raise UsageError("invalid_payload", "crash reproducer of source fs without a spec")
        _, factory = load_factory(spec)
        if not callable(factory) or not takes_filesystem(factory):
            raise UsageError(
                "invalid_payload", f"{spec} no longer takes fs and root; cannot replay a crash"
            )
        return replay_record(record, factory)
    backend = resolve_backend(record["backend"])
    explorer = backend.crash
    if record.get("source") == "sqlite":
        from scopecheck.crash_explorers import SqliteCrashExplorer

        if not isinstance(explorer, SqliteCrashExplorer):
            raise UsageError(
                "invalid_payload",
                f"backend {record['backend']!r} has no SQLite crash explorer to replay with",
            )
        return explorer.replay(record)
    if explorer is None:
        if record.get("source") == "jsonl":
            from scopecheck.crash_explorers import JsonlCrashExplorer

            explorer = JsonlCrashExplorer()
        else:
            raise UsageError(
                "invalid_payload", f"backend {record['backend']!r} has no crash explorer"
            )
    return explorer.replay(record)
