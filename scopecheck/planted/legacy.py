"""Planted legacy-fork bugs (LEGACY-13, LEGACY-15): the two mistakes 001 §1.3 warns
about for legacy sources.

* ``legacy-fork-upgrades-open-source`` — "the fork must not mutate/upgrade the source itself":
  forking an open, not yet upgraded legacy Session first persists its upgrade, then forks the
  format-4 file, instead of rejecting with ``legacy_not_upgraded``.
* ``legacy-fork-normalises-in-place`` — "a closed legacy-v3 source … never touches the file":
  forking a closed legacy file rewrites it as format 4 (persisting the normalisation) and then
  forks that, instead of normalising read-only on the side.

Both run in the ``jsonl-legacy`` world, whose fork machine starts every example with a fork of
a not-yet-upgraded source; the model knows the Session is still legacy, so the first mutant
disagrees at once and the second as soon as the reopened source is forked open.
"""

from __future__ import annotations

import os
import tempfile
from functools import partial
from typing import Any

from scopecheck.backends.registry import Backend, JsonlLegacyWorld
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.journal import publish
from scopecheck.impl.jsonl.legacy import import_legacy, is_legacy_header, uuid7_ids
from scopecheck.impl.jsonl.legacy import upgrade_bytes as legacy_upgrade_bytes
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import ForkOptions, TreeFork
from scopecheck.planted import PROBES, Mutant, register


class _RemembersArguments(JsonlRepository):
    """The real repository, keeping its constructor arguments and the handles it hands out."""

    def __init__(
        self, root: str, fs: Any = None, clock: Any = None, cwd: Any = None, **kw: Any
    ) -> None:
        arguments = {"clock": clock} if clock is not None else {}
        super().__init__(root, fs, cwd=cwd, **arguments, **kw)
        self.arguments: dict[str, Any] = {"cwd": cwd, **arguments, **kw}
        self.handles: dict[str, Any] = {}

    def open(self, session_id: str) -> Any:
        handle = self.handles[session_id] = super().open(session_id)
        return handle


class UpgradesOpenSource(_RemembersArguments):
    """Planted: an open legacy source is upgraded by the fork instead of rejected: its
    format-4 file is published, then forked by a repository that does not know it is open."""

    def fork(self, source_id: str, options: ForkOptions) -> str:
        handle = self.handles.get(source_id)
        if handle is None or handle.closed or handle.legacy is None:
            return super().fork(source_id, options)
        publish(self.fs, handle.path, legacy_upgrade_bytes(handle.legacy))
        other = JsonlRepository(self.root, self.fs, **self.arguments)
        try:
            return other.fork(source_id, options)
        finally:
            other.close()


class NormalisesInPlace(_RemembersArguments):
    """Planted: a closed legacy source is rewritten as format 4 before it is forked."""

    def capture(self, source: str) -> Any:
        lines = self.fs.read_lines(source)
        if lines.complete and is_legacy_header(lines.complete[0]):
            session_id = source.rsplit("/", 1)[-1].removesuffix(".jsonl")
            mint = self.arguments.get("legacy_ids", uuid7_ids)
            imported = import_legacy(source, lines.complete, session_id, mint)
            publish(self.fs, source, legacy_upgrade_bytes(imported))
        return super().capture(source)


def _world(repository_class: type[JsonlRepository]) -> Any:
    def make(clock: Any) -> JsonlLegacyWorld:
        return JsonlLegacyWorld(clock, repository_class=repository_class)

    return make


def _backend(name: str, cls: type[JsonlRepository]) -> Backend:
    return Backend(
        f"jsonl-legacy[{name}]", _world(cls), f"jsonl-legacy with {name}", starts_legacy=True
    )


def probe_legacy_fork(
    repository_class: type[JsonlRepository] = JsonlRepository,
) -> tuple[bool, str]:
    """The focused legacy-fork checks against ``repository_class`` (LEGACY-13, LEGACY-15):
    forking the open, not yet upgraded prefix of a real transcript must reject with
    ``legacy_not_upgraded`` and forking it closed must leave every byte; caught iff either
    fails.  (The fork machine catches both mutants too — tests/legacy/test_legacy_mutants.py —
    but shrinking a legacy world is slow, so ``scopecheck mutants`` uses this probe.)"""
    from scopecheck.backends.registry import counter_legacy_ids, legacy_lines

    with tempfile.TemporaryDirectory(prefix="scopecheck-legacy-probe-") as root:
        path = os.path.join(root, "s1.jsonl")
        with open(path, "wb") as handle:
            handle.write(b"\n".join(legacy_lines("s1")) + b"\n")
        with open(path, "rb") as handle:
            before = handle.read()
        repo = repository_class(root, clock=lambda: 1, cwd="/", legacy_ids=counter_legacy_ids)
        try:
            storage = repo.open("s1")
            try:
                repo.fork("s1", TreeFork(id="open-fork"))
                return True, "a fork of the open, not yet upgraded legacy Session succeeded"
            except ScopecheckError as exc:
                if exc.code != "legacy_not_upgraded":
                    return (
                        True,
                        f"open legacy fork rejected with {exc.code}, not legacy_not_upgraded",
                    )
            storage.close()
            repo.fork("s1", TreeFork(id="closed-fork"))
        except ScopecheckError as exc:
            return True, f"closed legacy fork failed: {exc}"
        finally:
            repo.close()
        with open(path, "rb") as handle:
            after = handle.read()
        if after != before:
            return True, f"legacy source changed: {len(before)} → {len(after)} bytes"
        return False, "open fork rejected, closed fork left the source unchanged"


for _name, _cls, _what in (
    (
        "legacy-fork-upgrades-open-source",
        UpgradesOpenSource,
        "a fork of an open, not yet upgraded legacy Session upgrades the source and forks it "
        "instead of rejecting (001 §1.3)",
    ),
    (
        "legacy-fork-normalises-in-place",
        NormalisesInPlace,
        "a fork of a closed legacy file rewrites the source as format 4 before forking instead "
        "of normalising read-only (001 §1.3)",
    ),
):
    PROBES[_name] = partial(probe_legacy_fork, _cls)
    register(
        Mutant(
            _name,
            "fork",
            f"[jsonl-legacy] {_what}",
            partial(_backend, _name, _cls),
            "fork-probe",
        )
    )
