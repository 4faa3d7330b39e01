"""scopecheck's own failures: an exception of ours during a phase is never the backend's verdict.

A phase that raises -- a bug in the persistence model, an analysis that meets input it did not
expect, a library of ours that breaks -- ends ``incomplete`` with an :class:`InternalError` in
the verdict (INSTALL-19): what was raised, where in scopecheck it came from, the file holding
the whole traceback, and the command that runs the same check again.  It is never a failure of
a rule: a user must never read our bug as theirs.  A verdict with one exits with
:data:`EXIT_INTERNAL` (``docs/validate-json.md``, "Exit codes").
"""

from __future__ import annotations

import os
import sysconfig
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs

from scopecheck.models.errors import ScopecheckError

#: The exit code of a run that met an internal error (distinct from a backend's failure, 1).
EXIT_INTERNAL = 4

#: The folder of the installed ``scopecheck`` package: a frame under it is ours.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(tb)) if tb is not None else []


def _shown(frame: traceback.FrameSummary) -> str:
    path = os.path.abspath(frame.filename)
    if path.startswith(_OURS + os.sep):
        path = "scopecheck/" + os.path.relpath(path, _OURS)
    return f"{path}:{frame.lineno} in {frame.name}"


#: scopecheck's modules that are backends, not checks: what they raise is a backend's.
_BACKEND_MODULES = ("scopecheck.impl", "scopecheck.examples", "scopecheck.planted")

#: The folders of Python's standard library: a frame there raised for whoever called it.
_STDLIB = tuple(
    os.path.abspath(path) + os.sep
    for path in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def _in_stdlib(path: str) -> bool:
    """Whether a frame's file is the standard library's (not a package installed beside it)."""
    full = os.path.abspath(path)
    installed = {"site-packages", "dist-packages"} & set(full.split(os.sep))
    return full.startswith(_STDLIB) and not installed


def raised_by_us(exc: BaseException) -> bool:
    """Whether ``exc``, which a machine met as a failure, is scopecheck's own error rather
    than the backend's (INSTALL-19): not a check's failure (an ``AssertionError``, as every
    mismatch is) nor an error with a code (a ``ScopecheckError``: what a backend answered,
    a process backend's included), and raised by scopecheck's own code -- the innermost
    frame outside the standard library (which raises for whoever called it) is a scopecheck
    module other than the backends it bundles (``scopecheck.impl``, ``scopecheck.examples``,
    ``scopecheck.planted``).  A user's backend, its libraries and its adapter are never
    ours.  Modules are told apart by name, so an editable install's folders do not matter."""
    if isinstance(exc, (AssertionError, ScopecheckError)):
        return False
    tb, innermost = exc.__traceback__, None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not path.startswith("<") and not _in_stdlib(path):
            innermost = tb.tb_frame  # generated code (attrs, dataclasses) and the stdlib: skipped
        tb = tb.tb_next
    if innermost is None:
        return False
    module = str(innermost.f_globals.get("__name__", ""))
    ours = module == "scopecheck" or module.startswith("scopecheck.")
    return ours and not any(
        module == name or module.startswith(name + ".") for name in _BACKEND_MODULES
    )


def raised_where(exc: BaseException) -> str:
    """Where ``exc`` came from: the innermost frame of scopecheck's own code, and the
    innermost frame of all when that is elsewhere (a library we called)."""
    frames = _frames(exc.__traceback__)
    if not frames:
        return "(no traceback)"
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(_OURS + os.sep)]
    innermost = frames[-1]
    if not ours:
        return _shown(innermost)
    where = _shown(ours[-1])
    if ours[-1] is not innermost:
        where += f" (raised in {_shown(innermost)})"
    return where


@attrs.frozen
class InternalError:
    """An exception of scopecheck's own during ``phase`` (INSTALL-19)."""

    phase: str
    #: ``Type: message``, its first line.
    error: str
    #: Where in scopecheck it was raised (:func:`raised_where`).
    where: str
    #: The command that runs the same check again.
    rerun: str
    #: The file holding the whole traceback ("" when it could not be written).
    traceback_file: str = ""

    @classmethod
    def of(
        cls, phase: str, exc: BaseException, rerun: str, directory: Path | None
    ) -> InternalError:
        """The internal error ``exc`` raised in ``phase``; its traceback is written under
        ``directory`` (the run's failures folder) when one is given."""
        first = (str(exc).splitlines() or [""])[0]
        error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        written = ""
        if directory is not None:
            written = _write_traceback(directory, phase, exc, rerun)
        return cls(phase, error[:2000], raised_where(exc), rerun, written)

    def as_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "error": self.error,
            "where": self.where,
            "rerun": self.rerun,
            "traceback_file": self.traceback_file,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InternalError:
        return cls(
            str(data["phase"]),
            str(data["error"]),
            str(data["where"]),
            str(data["rerun"]),
            str(data["traceback_file"]),
        )

    def lines(self) -> list[str]:
        """How a summary shows it: never as the backend's failure."""
        lines = [
            f"INTERNAL ERROR ({self.phase}): {self.error}",
            f"  at {self.where}",
            "  this is scopecheck's own error, not the backend's: the phase is incomplete; "
            "please report it with the traceback",
        ]
        if self.traceback_file:
            lines.append(f"  traceback: {self.traceback_file}")
        lines.append(f"  rerun: {self.rerun}")
        return lines


def _write_traceback(directory: Path, phase: str, exc: BaseException, rerun: str) -> str:
    text = "".join(traceback.format_exception(exc))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() else "-" for ch in phase)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for number in range(1, 1000):
            path = directory / f"internal-error-{stamp}-{safe}-{number}.txt"
            try:
                with path.open("x", encoding="utf-8") as handle:
                    handle.write(f"phase: {phase}\nrerun: {rerun}\n\n{text}")
            except FileExistsError:
                continue
            return str(path)
    except OSError:
        return ""
    return ""
