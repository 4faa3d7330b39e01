"""Planted bugs in the JSONL backend: the mistakes 000 §6 and REFERENCE §1 warn about.

Each is the real JSONL repository doing its I/O through a
:class:`~scopecheck.planted.seams.ForwardingFileSystem` that changes one call -- what the backend
reads at open, or what it writes when -- or overriding one public method.  Which check catches
each (``caught_by``):

* ``machine`` on the ``jsonl-fakefs`` world (restart / close-and-reopen replay the files):
  ``jsonl-high-water-ignores-retired``, ``jsonl-sidecar-listed``,
  ``jsonl-cleanup-deletes-reused``;
* ``machine`` on the ``jsonl-unlink-fails`` world (a retired sidecar must survive its
  retirement for the boundary to matter): ``jsonl-replay-ignores-boundary``;
* ``crash`` only -- the end state without a crash is correct, so the machine cannot see them;
  the crash explorer (``Mutant.check``, set in ``mutants/jsonl_crash.py``, which also holds the
  other crash-only JSONL mutants) catches them: ``jsonl-unlink-before-retire-durable``,
  ``jsonl-torn-tail-kept``.
"""

from __future__ import annotations

import contextlib
import posixpath
from typing import Any

import orjson

from scopecheck.backends.registry import Backend, EveryOtherUnlinkFails, JsonlWorld
from scopecheck.impl.fs import AppendFile, FileSystem, ForwardingFileSystem, Lines, fs_code
from scopecheck.impl.jsonl import JsonlRepository, session_paths
from scopecheck.impl.jsonl.codec import encode_write, transaction_records
from scopecheck.models.addresses import value
from scopecheck.models.errors import StorageIOError
from scopecheck.models.records import Committed
from scopecheck.models.writes import delete_value
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import over_fs


def jsonl_backend(name: str, repo: type[JsonlRepository], *, unlink_fails: bool = False) -> Backend:
    def world(clock: Any) -> JsonlWorld:
        # pyfakefs: the same code paths as a real directory, without temp-dir churn per example.
        fault = EveryOtherUnlinkFails() if unlink_fails else None
        return JsonlWorld(clock, fake=True, repository_class=repo, fault=fault)

    return Backend(f"jsonl[{name}]", world, f"JSONL with {name}")


def _is_main(path: str) -> bool:
    return path.endswith(session_paths.MAIN_SUFFIX)


def _records(line: bytes) -> list[dict[str, Any]]:
    return transaction_records(orjson.loads(line))


def _is_retirement(record: dict[str, Any]) -> bool:
    return record.get("kind") == "scope" and record.get("op") == "retire"


class _MainLinesRead(ForwardingFileSystem):
    """Hands the loader a main log whose transaction lines :meth:`line` rewrote (``None``
    drops one); sidecars and writes are untouched."""

    def read_lines(self, path: str) -> Lines:
        lines: Lines = self.inner.read_lines(path)
        if not _is_main(path) or not lines.complete:
            return lines
        head, *body = lines.complete
        kept = [head]
        for raw in body:
            try:
                changed = self.line(raw)
            except orjson.JSONDecodeError:
                changed = raw  # not JSON: the loader reports it as it is
            if changed is not None:
                kept.append(changed)
        return Lines(kept, lines.tail)

    def line(self, raw: bytes) -> bytes | None:
        raise NotImplementedError


# -- open ------------------------------------------------------------------------------------


class RetirementOnlyLinesUnread(_MainLinesRead):
    """Open computes the high-water mark from replayed records only: a transaction holding
    nothing but retirements leaves no trace in it (JSONL-8)."""

    def line(self, raw: bytes) -> bytes | None:
        records = _records(raw)
        return None if records and all(map(_is_retirement, records)) else raw


class RetirementsNotBoundaries(_MainLinesRead):
    """Replay reads a retirement as a write of its own seq that bounds nothing, so sidecar
    records from before it come back (JSONL-16)."""

    def line(self, raw: bytes) -> bytes | None:
        records = _records(raw)
        if not any(map(_is_retirement, records)):
            return raw
        void = value("scopecheck.void", "retirement")
        out = [
            orjson.loads(encode_write(Committed(r["seq"], 0, delete_value(void))))
            if _is_retirement(r)
            else r
            for r in records
        ]
        return orjson.dumps(out[0] if len(out) == 1 else out)


class TornTailAsLine(ForwardingFileSystem):
    """Open parses an unterminated final line as data instead of dropping it (JSONL-18)."""

    def read_lines(self, path: str) -> Lines:
        lines: Lines = self.inner.read_lines(path)
        if lines.tail is None:
            return lines
        return Lines([*lines.complete, lines.tail], None)


# -- listing ---------------------------------------------------------------------------------


class SidecarListed(JsonlRepository):
    """``list()`` also reports the sidecar files it finds as Sessions (JSONL-13)."""

    def list(self) -> list[str]:
        found = super().list()
        for entry in self.fs.list_dir(self.root):
            if entry.is_dir and entry.name.endswith(
                session_paths.MAIN_SUFFIX + session_paths.SCOPES_SUFFIX
            ):
                for side in self.fs.list_dir(f"{self.root}/{entry.name}"):
                    if side.name.endswith(session_paths.SIDECAR_SUFFIX):
                        found.append(side.name[: -len(session_paths.SIDECAR_SUFFIX)])
        return sorted(found)


# -- retirement cleanup ----------------------------------------------------------------------


class UnlinkBeforeAppend(ForwardingFileSystem):
    """Unlinks the sidecars a main transaction retires *before* its line is appended and
    fsynced (JSONL-9): a crash in between loses a live scope whose retirement never happened."""

    def append(self, handle: AppendFile, data: bytes) -> None:
        if _is_main(handle.path):
            for record in _records(data):
                if _is_retirement(record):
                    try:
                        self.inner.unlink(
                            session_paths.sidecar_path(handle.path, record["scopeId"])
                        )
                    except StorageIOError as exc:
                        if fs_code(exc) != "not_found":
                            raise
        self.inner.append(handle, data)


class CleanupAtClose(ForwardingFileSystem):
    """Retirement cleanup deferred off the commit queue to a batch when the Session's main
    log is closed, which unlinks every sidecar retired meanwhile without checking it again: a
    write reusing the scope in between wrote to the same path, and loses it (JSONL-16)."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self._pending: dict[str, list[str]] = {}

    def open_append(self, path: str) -> AppendFile:
        handle: AppendFile = self.inner.open_append(path)
        if _is_main(path):
            self._pending.setdefault(path, [])
        return handle

    def unlink(self, path: str) -> None:
        main = posixpath.dirname(path).removesuffix(session_paths.SCOPES_SUFFIX)
        if path.endswith(session_paths.SIDECAR_SUFFIX) and main in self._pending:
            self._pending[main].append(path)
            return
        self.inner.unlink(path)

    def close(self, handle: AppendFile) -> None:
        self.inner.close(handle)
        for path in self._pending.pop(handle.path, []):
            with contextlib.suppress(StorageIOError):
                self.inner.unlink(path)


def _register(name: str, description: str, make: Any, caught_by: str = "machine") -> None:
    register(Mutant(name, "jsonl", description, make, caught_by))


#: The repository of each JSONL planted bug above, by catalogue name.
REPOSITORIES: dict[str, type[JsonlRepository]] = {
    "jsonl-high-water-ignores-retired": over_fs(
        "high-water-ignores-retired", RetirementOnlyLinesUnread
    ),
    "jsonl-unlink-before-retire-durable": over_fs(
        "unlink-before-retire-durable", UnlinkBeforeAppend
    ),
    "jsonl-replay-ignores-boundary": over_fs("replay-ignores-boundary", RetirementsNotBoundaries),
    "jsonl-sidecar-listed": SidecarListed,
    "jsonl-torn-tail-kept": over_fs("torn-tail-kept", TornTailAsLine),
    "jsonl-cleanup-deletes-reused": over_fs("cleanup-deletes-reused", CleanupAtClose),
}


def _make(name: str, *, unlink_fails: bool = False) -> Any:
    return lambda: jsonl_backend(
        name.removeprefix("jsonl-"), REPOSITORIES[name], unlink_fails=unlink_fails
    )


_register(
    "jsonl-high-water-ignores-retired",
    "reopen computes the high-water mark from replayed records only, ignoring retired sidecar "
    "records and retirement markers (JSONL-8)",
    _make("jsonl-high-water-ignores-retired"),
)
_register(
    "jsonl-unlink-before-retire-durable",
    "retirement unlinks the sidecar before the retire record is durable in the main log (JSONL-9)",
    _make("jsonl-unlink-before-retire-durable"),
    caught_by="crash",
)
_register(
    "jsonl-replay-ignores-boundary",
    "replay keeps sidecar records from before the latest retirement (JSONL-16)",
    _make("jsonl-replay-ignores-boundary", unlink_fails=True),
)
_register(
    "jsonl-sidecar-listed",
    "repository list() reports sidecar files as Sessions (JSONL-13)",
    _make("jsonl-sidecar-listed"),
)
_register(
    "jsonl-torn-tail-kept",
    "open parses an unterminated final line as data instead of dropping it (JSONL-18)",
    _make("jsonl-torn-tail-kept"),
    caught_by="crash",
)
_register(
    "jsonl-cleanup-deletes-reused",
    "retirement cleanup is deferred off the commit queue (batched at close) and unlinks a "
    "reused lifetime's sidecar (JSONL-16)",
    _make("jsonl-cleanup-deletes-reused"),
)
