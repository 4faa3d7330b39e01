"""Planted bugs in the JSONL backend: the mistakes 000 §6 and REFERENCE §1 warn about.

Each is a small subclass of the real repository or storage overriding one hook.  Which check
catches each (``caught_by``):

* ``machine`` on the ``jsonl-fakefs`` world (restart / close-and-reopen replay the files):
  ``jsonl-high-water-ignores-retired``, ``jsonl-sidecar-listed``,
  ``jsonl-cleanup-deletes-reused``;
* ``machine`` on the ``jsonl-unlink-fails`` world (a retired sidecar must survive its
  retirement for the boundary to matter): ``jsonl-replay-ignores-boundary``;
* ``crash`` only — the end state without a crash is correct, so the machine cannot see them;
  the process-crash sweep (``tests/jsonl/test_crash_sweep.py``: crash before every mutating
  file operation and in the middle of every append, on a real directory) and the crash
  emulations in ``tests/jsonl/test_mutants_jsonl.py`` catch both, and ``run_mutant`` runs them
  through the pyfakefs crash simulator (``Mutant.check``, set in ``mutants/jsonl_crash.py``,
  which also holds the newer crash-only JSONL mutants): ``jsonl-unlink-before-retire-durable``,
  ``jsonl-torn-tail-kept``.
"""

from __future__ import annotations

from typing import Any

from scopecheck.backends import Backend, EveryOtherUnlinkFails, JsonlWorld
from scopecheck.impl.jsonl import JsonlRepository, JsonlStorage, layout
from scopecheck.impl.jsonl.load import SessionLoad, load_session
from scopecheck.models.records import Committed
from scopecheck.mutants import Mutant, register


def _repository(
    name: str, storage: type[JsonlStorage] | None = None, **overrides: Any
) -> type[JsonlRepository]:
    attributes: dict[str, Any] = dict(overrides)
    if storage is not None:
        attributes["storage_class"] = storage
    return type(f"Mutant_{name.replace('-', '_')}", (JsonlRepository,), attributes)


def _backend(name: str, repo: type[JsonlRepository], *, unlink_fails: bool = False) -> Backend:
    def world(clock: Any) -> JsonlWorld:
        # pyfakefs: the same code paths as a real directory, without temp-dir churn per example.
        fault = EveryOtherUnlinkFails() if unlink_fails else None
        return JsonlWorld(clock, fake=True, repository_class=repo, fault=fault)

    return Backend(f"jsonl[{name}]", world, f"JSONL with {name}")


# -- open ------------------------------------------------------------------------------------


def _plan_ignoring_retired(self: JsonlRepository, main: str, session_id: str) -> SessionLoad:
    return load_session(self.fs, main, session_id, count_retired_in_high_water=False)


HighWaterIgnoresRetired = _repository(
    "high-water-ignores-retired", _load_plan=_plan_ignoring_retired
)


def _plan_without_boundaries(self: JsonlRepository, main: str, session_id: str) -> SessionLoad:
    return load_session(self.fs, main, session_id, apply_boundaries=False)


ReplayIgnoresBoundary = _repository("replay-ignores-boundary", _load_plan=_plan_without_boundaries)


def _plan_keeping_torn_tail(self: JsonlRepository, main: str, session_id: str) -> SessionLoad:
    return load_session(self.fs, main, session_id, keep_torn_tail=True)


TornTailKept = _repository("torn-tail-kept", _load_plan=_plan_keeping_torn_tail)


# -- listing ---------------------------------------------------------------------------------


def _list_with_sidecars(self: JsonlRepository) -> list[str]:
    found = JsonlRepository.list(self)
    for entry in self.fs.list_dir(self.root):
        if entry.is_dir and entry.name.endswith(layout.MAIN_SUFFIX + layout.SCOPES_SUFFIX):
            for side in self.fs.list_dir(f"{self.root}/{entry.name}"):
                if side.name.endswith(layout.SIDECAR_SUFFIX):
                    found.append(side.name[: -len(layout.SIDECAR_SUFFIX)])
    return sorted(found)


SidecarListed = _repository("sidecar-listed", list=_list_with_sidecars)


# -- retirement cleanup ----------------------------------------------------------------------


class UnlinkBeforeRetireDurable(JsonlStorage):
    """Cleans up the retired sidecars *before* the retirement line is appended and fsynced."""

    def _append_main_then_cleanup(
        self, line: bytes, committed: tuple[Committed, ...], retired: list[str]
    ) -> None:
        for scope_id in retired:
            self._cleanup_retired(scope_id)
        self._append_main(line)
        self._apply_all(committed)


class CleanupDeletesReused(JsonlStorage):
    """Defers retirement cleanup off the commit queue to a batch at close(), which unlinks
    every sidecar retired during the handle's life without re-checking it: a write reusing
    the scope in between appended to the same file, and loses it."""

    def _cleanup_retired(self, scope_id: str) -> None:
        pending: list[str] = self.__dict__.setdefault("_pending_cleanup", [])
        pending.append(scope_id)

    def close(self) -> None:
        super().close()
        for scope_id in self.__dict__.pop("_pending_cleanup", []):
            JsonlStorage._cleanup_retired(self, scope_id)


def _register(name: str, description: str, make: Any, caught_by: str = "machine") -> None:
    register(Mutant(name, "jsonl", description, make, caught_by))


_register(
    "jsonl-high-water-ignores-retired",
    "reopen computes the high-water mark from replayed records only, ignoring retired sidecar "
    "records and retirement markers (JSONL-8)",
    lambda: _backend("high-water-ignores-retired", HighWaterIgnoresRetired),
)
_register(
    "jsonl-unlink-before-retire-durable",
    "retirement unlinks the sidecar before the retire record is durable in the main log (JSONL-9)",
    lambda: _backend(
        "unlink-before-retire-durable",
        _repository("unlink-before-retire-durable", UnlinkBeforeRetireDurable),
    ),
    caught_by="crash",
)
_register(
    "jsonl-replay-ignores-boundary",
    "replay keeps sidecar records from before the latest retirement (JSONL-16)",
    lambda: _backend("replay-ignores-boundary", ReplayIgnoresBoundary, unlink_fails=True),
)
_register(
    "jsonl-sidecar-listed",
    "repository list() reports sidecar files as Sessions (JSONL-13)",
    lambda: _backend("sidecar-listed", SidecarListed),
)
_register(
    "jsonl-torn-tail-kept",
    "open parses an unterminated final line as data instead of dropping it (JSONL-18)",
    lambda: _backend("torn-tail-kept", TornTailKept),
    caught_by="crash",
)
_register(
    "jsonl-cleanup-deletes-reused",
    "retirement cleanup is deferred off the commit queue (batched at close) and unlinks a "
    "reused lifetime's sidecar (JSONL-16)",
    lambda: _backend(
        "cleanup-deletes-reused", _repository("cleanup-deletes-reused", CleanupDeletesReused)
    ),
)
