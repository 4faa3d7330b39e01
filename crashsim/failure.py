"""The one failure type of crash exploration, which is also its versioned reproducer.

Every source -- a backend's system calls under strace, its ``FileSystem`` calls, the SQLite
VFS, the JSONL sweep of our own backend -- reports what broke as a :class:`CrashFailure`, and
the validator, ``scopecheck fuzz`` and ``scopecheck replay`` see only that type: one
``to_json``/``from_json`` (format :data:`VERSION`), one key telling distinct failures apart
(CRASH-COV-4), one way to rebuild a crash image (:class:`Evidence`, CRASH-COV-5).

What differs between sources is only how a failure is rerun: a process command, a factory
spec, a SQLite layout.  That is :attr:`CrashFailure.target`, a small mapping the source
writes and reads back; nothing in it is an absolute path of the run.  A message naming a file
under the directory a backend was given names it relative to that root, as
``<root>/sessions/a.jsonl`` (:func:`relative_to_root`): the directory differs from run to run,
the message does not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import orjson

from scopecheck.crashsim.persistence import (
    PROFILE_NAMES,
    FileOp,
    Image,
    image_from_json,
    image_to_json,
    op_from_json,
    op_to_json,
)
from scopecheck.crashsim.points import CrashPoint, Variant, parse_variant

#: The reproducer format.  3: one format for every source (``source`` names it).
VERSION = 3
#: The end of a failure's ``kind`` when the state it read holds a commit that failed and
#: everything acknowledged: the failed commit reappeared, nothing was lost (CHECK-10).
REAPPEARED = ":reappeared"
#: The start of a failure's ``kind`` for an error that is no scopecheck error (CRASH-FS-12).
UNCODED = "uncoded:"
#: What a failure reruns: a crash image, a crash during an image's recovery, a run with one
#: I/O fault, a run killed at one call, or the whole workload without any crash.
Run = Literal["crash", "recovery", "fault", "kill", "workload"]
RUNS: tuple[str, ...] = ("crash", "recovery", "fault", "kill", "workload")


@attrs.frozen
class Evidence:
    """What rebuilds a crash image by name, byte for byte, with no backend run: the recorded
    operations, the disk they started on, where each step was acknowledged among them, and,
    for a crash during recovery, the recovery's own operations (they start on the crash
    image)."""

    ops: tuple[FileOp, ...]
    base: Image
    acked_at: tuple[int | None, ...]
    recovery_ops: tuple[FileOp, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": [op_to_json(op) for op in self.ops],
            "base": image_to_json(self.base),
            "acked_at": list(self.acked_at),
            "recovery_ops": [op_to_json(op) for op in self.recovery_ops],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            tuple(op_from_json(op) for op in data["ops"]),
            image_from_json(data["base"]),
            tuple(data["acked_at"]),
            tuple(op_from_json(op) for op in data.get("recovery_ops", ())),
        )

    def acked(self, k: int) -> int:
        """Steps acknowledged before a crash at point ``k``."""
        return acked_before(self.acked_at, k)


class BadReproducer(ValueError):
    """A reproducer file that is not one this version can read (the message says why)."""


@attrs.frozen
class CrashFailure:
    """One state or run that broke a crash rule, with everything a replay needs.

    ``point`` is the crash point (an index into the recorded operations) of a crash image,
    the call of a fault or kill run; ``variant`` names the image (the name of a
    :mod:`~scopecheck.crashsim.points` variant: ``process``, a power-loss variant) or the
    fault; ``recovery`` is, for a crash during recovery, the point and variant name in the
    recovery's operations.  Names, not the typed variants, because they are the reproducer's
    own terms (format :data:`VERSION`); :attr:`crash_point` and :attr:`recovery_point` give
    them typed.  ``kind`` is what tells two failures of one rule apart (CRASH-COV-4): the
    image family, or the call and fault.

    ``profiles`` are the file-system profiles (CRASH-SYS-14) whose images of the crash point
    include the failing one, ``built_under`` the one whose rules rebuild it (a replay does so);
    both only for a power-loss image -- a process crash, a fault or a kill fails alike under
    every profile, and ``profiles`` is empty (CRASH-SYS-15)."""

    source: str
    rule: str
    problem: str
    run: Run
    kind: str
    seed: int
    workload: Any
    point: int | None = None
    variant: str = ""
    recovery: tuple[int, str] | None = None
    evidence: Evidence | None = attrs.field(default=None, eq=False, repr=False)
    #: How the source reruns it (a command, a factory spec, a layout, a mode).
    target: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: What a reader is shown besides the problem (expected and recovered states, files).
    shown: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    backend: str = ""
    #: Not part of a failure's identity (its key has them): a rerun of one image by its name
    #: does not see the other profiles' images of its crash point.
    profiles: tuple[str, ...] = attrs.field(default=(), eq=False)
    built_under: str = attrs.field(default="posix", eq=False)

    def fails_under(self, profile: str) -> bool:
        """Whether this failure happens under the file-system profile ``profile``
        (CRASH-SYS-15): a failure of no power-loss image, under every one."""
        return not self.profiles or profile in self.profiles

    @classmethod
    def of_image(
        cls,
        source: str,
        rule: str,
        problem: str,
        *,
        seed: int,
        workload: Any,
        point: int,
        variant: str,
        evidence: Evidence,
        recovery: tuple[int, str] | None = None,
        target: Mapping[str, Any] | None = None,
        shown: Mapping[str, Any] | None = None,
    ) -> CrashFailure:
        """A failure of the crash image named ``variant`` before operation ``point`` -- or,
        with ``recovery``, of a crash while that image was recovered; its kind is the family
        of the image (of the crash during recovery, for one).  :class:`ValueError` for a name
        of no crash image."""
        crashed = parse_variant(variant if recovery is None else recovery[1])
        return cls(
            source=source, rule=rule, problem=problem,
            run="crash" if recovery is None else "recovery",
            kind=crashed.family, seed=seed, workload=workload, point=point,
            variant=variant, recovery=recovery, evidence=evidence, target=target or {},
            shown=shown or {},
        )  # fmt: skip

    @property
    def crash_point(self) -> CrashPoint | None:
        """The crash image a crash or recovery failure names, typed (``None`` for a fault,
        kill or workload run)."""
        if self.run not in ("crash", "recovery") or self.point is None:
            return None
        return CrashPoint(self.point, parse_variant(self.variant))

    @property
    def recovery_point(self) -> CrashPoint | None:
        """For a crash during recovery, the crash in the recovery's operations, typed."""
        if self.recovery is None:
            return None
        return CrashPoint(self.recovery[0], parse_variant(self.recovery[1]))

    @property
    def key(self) -> tuple[str, str]:
        """Rule and kind of crash point or fault: what makes two failures distinct
        (CRASH-COV-4).  The profiles are not part of it: a later failure of a kept key adds its
        profiles to the kept one (:meth:`~scopecheck.crashsim.explore.Findings.add`), so
        profiles never multiply the failures a search keeps, nor hide one (CRASH-SYS-15)."""
        kind = "recovery:" + self.kind if self.run == "recovery" else self.kind
        return self.rule, kind

    @property
    def what(self) -> str:
        """What a replay reruns, in words."""
        return {
            "crash": "a crash state (rebuilt from the recorded operations)",
            "recovery": "a crash state during recovery (rebuilt from the recorded operations)",
            "fault": "an I/O-fault run (the workload rerun with one call failed)",
            "kill": "a kill run (the workload rerun with the backend killed at one call)",
            "workload": "the workload without any crash",
        }[self.run]

    def __str__(self) -> str:
        if self.run == "workload":
            where = "the workload, with no crash"
        elif self.run in ("fault", "kill"):
            where = f"{self.run} at call {self.point} ({self.variant})"
        else:
            where = f"crash before op {self.point}, {self.variant}"
            lost = self.shown.get("lost")  # the files it lost, not the one it is named after
            if lost and "data lost: " not in self.problem:
                where += f" (data lost: {lost})"
            if self.recovery is not None:
                where += f", then during recovery before op {self.recovery[0]}, {self.recovery[1]}"
        return f"{where}: {self.rule} {self.problem}"

    def details(self) -> str:
        """The failure and, a line each, what it shows (expected and recovered states, the
        files), for a test's or a report's message."""
        lines = [str(self)]
        for name, shown in self.shown.items():
            if name == "lost":  # in the first line already
                continue
            text = shown if isinstance(shown, str) else orjson.dumps(shown).decode()
            lines.append(f"{name.replace('_', ' ')}: {text}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The reproducer file contents (kind ``crash``), replayed by ``scopecheck replay``."""
        return {
            "kind": "crash",
            "version": VERSION,
            "source": self.source,
            "backend": self.backend,
            "rule": self.rule,
            "error": self.problem,
            "run": self.run,
            "failure_kind": self.kind,
            "seed": self.seed,
            "workload": self.workload,
            "point": self.point,
            "variant": self.variant,
            "recovery": None if self.recovery is None else list(self.recovery),
            "evidence": None if self.evidence is None else self.evidence.to_json(),
            "target": dict(self.target),
            "shown": dict(self.shown),
            "profiles": list(self.profiles),
            "built_under": self.built_under,
            "replay": f"scopecheck replay FILE  # replays {self.what}",
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CrashFailure:
        """Read a reproducer back; :class:`BadReproducer` for another version or a field
        missing or of the wrong type."""
        if data.get("version") != VERSION:
            raise BadReproducer(
                f"crash reproducer format {data.get('version')!r}, this scopecheck reads "
                f"format {VERSION}: rerun the exploration to get a new one"
            )
        try:
            run = str(data["run"])
            if run not in RUNS:
                raise BadReproducer(f"unknown run {run!r} (one of {', '.join(RUNS)})")
            recovery = data.get("recovery")
            evidence = data.get("evidence")
            point = data.get("point")
            failure = cls(
                source=str(data["source"]),
                rule=str(data["rule"]),
                problem=str(data["error"]),
                run=run,  # type: ignore[arg-type]
                kind=str(data["failure_kind"]),
                seed=int(data["seed"]),
                workload=data.get("workload"),
                point=None if point is None else int(point),
                variant=str(data.get("variant", "")),
                recovery=None if recovery is None else (int(recovery[0]), str(recovery[1])),
                evidence=None if evidence is None else Evidence.from_json(evidence),
                target=dict(data.get("target") or {}),
                shown=dict(data.get("shown") or {}),
                backend=str(data.get("backend", "")),
                profiles=tuple(str(name) for name in data.get("profiles") or ()),
                built_under=str(data.get("built_under") or "posix"),
            )
            if run in ("crash", "recovery"):  # the names of crash images must parse
                parse_variant(failure.variant)
            if failure.recovery is not None:
                parse_variant(failure.recovery[1])
            return failure
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, BadReproducer):
                raise
            raise BadReproducer(f"not a crash reproducer: {exc!r}") from None


#: How a message shows the root directory a backend was given.
ROOT_SHOWN = "<root>"


def relative_to_root(text: str, root: str | None) -> str:
    """``text`` with ``root`` (and the path it resolves to) shown as :data:`ROOT_SHOWN`, so a
    file under it reads ``<root>/sessions/a.jsonl`` and the root itself ``<root>``; a longer
    name that merely starts with the root's (a sibling directory) is left alone."""
    if not root or root == "/":
        return text
    for form in dict.fromkeys((root.rstrip("/"), os.path.realpath(root))):
        if form in text:
            text = re.sub(re.escape(form) + r"(?![\w.-])", ROOT_SHOWN, text)
    return text


def profiles_text(profiles: Sequence[str]) -> str:
    """Where a failure happens, in words (CRASH-SYS-15): ``under posix; not under
    ext4-ordered, btrfs``, or every profile for a failure of no power-loss image."""
    if not profiles:
        return "under every file-system profile (not a power loss)"
    others = [name for name in PROFILE_NAMES if name not in profiles]
    where = f"under {', '.join(profiles)}"
    return f"{where}; not under {', '.join(others)}" if others else f"{where} (every profile)"


def crash_kind(variant: Variant, recovery: tuple[int, Variant] | None = None) -> str:
    """The kind of a crash-image failure: its image family (the recovery crash's, for a
    crash during recovery)."""
    return (variant if recovery is None else recovery[1]).family


def acked_before(acked_at: Sequence[int | None], k: int) -> int:
    """Steps acknowledged before a crash at point ``k``."""
    return sum(1 for at in acked_at if at is not None and at <= k)
