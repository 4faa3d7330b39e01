"""Planted durability bugs that only the system-call path can find (CRASH-SYS-*).

Each one is the sqlite3 example (``scopecheck.examples.sqlite3_backend``), a backend doing its
own file I/O, changed at one of its public seams -- a constructor setting, a method a subclass
overrides -- into a classic durability mistake.  In-process checks pass them all: with no crash
every one of them stores the right state.  ``scopecheck mutants`` runs each through
:func:`scopecheck.syscall_crash.explore` in a child served by ``scopecheck serve`` and expects
the rule named here.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from typing import Any

from scopecheck.backends import Backend
from scopecheck.examples.sqlite3_backend import Sqlite3Repository, Sqlite3Storage
from scopecheck.mutants import Mutant, MutantResult, register


def ack_before_durable(clock: Any, *, root: str) -> Sqlite3Repository:
    """synchronous=OFF: SQLite never fsyncs, so a commit is acknowledged before it is durable."""
    return Sqlite3Repository(clock, root, synchronous="OFF")


def journal_unlink_undurable(clock: Any, *, root: str) -> Sqlite3Repository:
    """synchronous=FULL in DELETE mode: the journal's unlink is not fsynced in its directory,
    so after a power loss the journal comes back and rolls an acknowledged commit back."""
    return Sqlite3Repository(clock, root, synchronous="FULL")


class _NoDirectorySync(Sqlite3Repository):
    def sync_dir(self) -> None:
        """Skipped: a new Session's file is renamed into place and never made durable."""


def create_without_directory_fsync(clock: Any, *, root: str) -> Sqlite3Repository:
    return _NoDirectorySync(clock, root)


class _RawErrorStorage(Sqlite3Storage):
    def failed(self, exc: sqlite3.Error) -> Exception:
        return exc  # the driver's own exception escapes, with no stable code


class _RawErrors(Sqlite3Repository):
    storage_class = _RawErrorStorage


def io_error_escapes(clock: Any, *, root: str) -> Sqlite3Repository:
    return _RawErrors(clock, root)


#: name -> (factory, the rules that may catch it, one line).  With synchronous=OFF the schema
#: itself may be lost, so the image does not even open (CRASH-FS-1) as often as it opens short
#: of an acknowledged commit (CRASH-FS-6).
PLANTED = {
    "syscall-ack-before-durable": (
        "ack_before_durable",
        "CRASH-FS-1 CRASH-FS-6",
        "commits acknowledged before they are fsynced (sqlite3 synchronous=OFF)",
    ),
    "syscall-journal-unlink-undurable": (
        "journal_unlink_undurable",
        "CRASH-FS-6",
        "the rollback journal's unlink never fsynced in its directory (synchronous=FULL, DELETE)",
    ),
    "syscall-create-without-directory-fsync": (
        "create_without_directory_fsync",
        "CRASH-FS-6",
        "a new Session's file renamed into place without fsyncing the directory",
    ),
    "syscall-io-error-escapes": (
        "io_error_escapes",
        "CRASH-FS-9",
        "a failed write surfaces as the driver's exception, not an error with a stable code",
    ),
}


def spec_of(name: str) -> str:
    return f"{__name__}:{PLANTED[name][0]}"


def run(name: str, budget: float = 60.0) -> MutantResult:
    """Explore the planted bug's crash states (and, when the rule is about faults, its fault
    runs) until it is caught or ``budget`` seconds pass."""
    from scopecheck.syscall_crash import explore

    _, rule, description = PLANTED[name]
    spec = spec_of(name)
    command = [sys.executable, "-m", "scopecheck", "serve", spec]
    started = time.perf_counter()
    found = explore(spec, command, os.getcwd(), budget, seed=0)
    seconds = round(time.perf_counter() - started, 3)
    failure = found.failures[0] if found.failures else None
    caught = failure is not None and failure.rule in rule.split()
    error = "" if failure is None else f"{failure.rule}: {failure.error}"
    return MutantResult(name, "syscall", description, caught, seconds, None, "", error)


def _make(name: str) -> Backend:
    from scopecheck.adapters import load_backend

    return load_backend(spec_of(name))


for _name, (_, _rule, _description) in PLANTED.items():
    register(
        Mutant(
            _name,
            "syscall",
            _description,
            lambda n=_name: _make(n),  # type: ignore[misc]
            caught_by=f"syscall:{_rule}",
            check=lambda n=_name: run(n),  # type: ignore[misc]
        )
    )
