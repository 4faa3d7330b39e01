"""One exception family for every misuse and every storage failure.

Every error carries a stable ``code`` that tests, the machine and the CLI compare; the message
is for people and may change.  User mistakes (:class:`UsageError`), damaged input on disk
(:class:`CorruptError`) and environmental failures (:class:`StorageIOError`) are kept apart so a
caller can tell "you did something wrong" from "the disk did".  ``ERR-1`` in ``spec/rules.toml``.
"""

from __future__ import annotations

from typing import Any

#: The stable error codes.  A code is never reused for a different meaning (ERR-1).
CODES: frozenset[str] = frozenset(
    {
        "invalid_scope",  # bad ephemeral scope ID (SCOPE-2)
        "invalid_address",  # bad namespace or key (ADDR-2)
        "invalid_payload",  # value, tag, entry or usage payload that is not storable JSON
        "invalid_transaction",  # mixed scopes, two scope IDs, a non-write item (TX-*)
        "duplicate_id",  # entry/usage id already used (WRITE-5)
        "unknown_reference",  # entry parent or usage entry that does not exist (WRITE-6)
        "invalid_query",  # bad list/scan read options (LIST-*)
        "closed",  # use after close (LIFE-2)
        "not_found",  # repository: no such session
        "already_exists",  # repository: duplicate session id
        "already_open",  # repository: session open elsewhere
        "invalid_session_id",  # repository: id that cannot name a session
        "corrupt",  # damaged or foreign file content (CORRUPT-*)
        "unsupported_version",  # a newer storage/format version than we read
        "io_error",  # the filesystem or database failed
        "locked",  # database locked by another writer
        "unusable",  # a handle made unusable after a failed write (JSONL-*)
        "outcome_unknown",  # a failed commit the backend cannot say was kept or not (CRASH-FS-14)
        "invalid_fork_options",  # ForkOptions that are not 001 §1.1 (FORK-1)
        "unknown_branch",  # branch fork of a branch with no pi.branch.tip row (FORK-2)
        "data_only_branch",  # branch fork of a tip without lane config/state (FORK-2)
        "unknown_entry",  # fork entry_id that is no entry of the source (FORK-3)
        "entry_not_on_branch",  # fork entry_id off the branch's tip ancestry (FORK-3)
        "unknown_namespace",  # current state in an undeclared reserved namespace (FORK-8)
        "legacy_not_upgraded",  # fork of an open legacy Session before its first commit (LEGACY-13)
        "protocol_error",  # a backend process that speaks the process protocol wrongly (PROC-*)
        "invalid_layout",  # a JSONL repository layout that is not one scopecheck knows (JSONL-26)
        "invalid_journal_mode",  # a SQLite journal_mode SQLite does not name (SQLITE-17)
        "invalid_synchronous",  # a SQLite synchronous level SQLite does not name (SQLITE-17)
        "not_a_repository",  # a backend factory that returned no repository (INSTALL-14)
        "command_not_found",  # an --exec command that does not exist (INSTALL-14)
        "command_not_executable",  # an --exec command that may not be run (INSTALL-14)
        "database_unreachable",  # a shared example database that does not answer (FLEET-1)
    }
)


class ScopecheckError(Exception):
    """Root of every error scopecheck raises on purpose.

    ``code`` is one of :data:`CODES`; ``details`` carries structured context (the offending
    value, the file and 1-based line of a corrupt record, the write index in a transaction).
    """

    code: str

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in CODES:  # pragma: no cover - programming error in scopecheck itself
            raise AssertionError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self.code, self.message, self.details))


def _rebuild(cls: type[ScopecheckError], code: str, message: str, details: dict[str, Any]) -> Any:
    return cls(code, message, **details)


class UsageError(ScopecheckError, ValueError):
    """The caller asked for something the contract forbids; nothing was changed."""


class ClosedError(UsageError):
    """The storage or repository handle was closed (LIFE-2)."""

    def __init__(self, message: str = "storage is closed", **details: Any) -> None:
        super().__init__("closed", message, **details)


class CorruptError(ScopecheckError):
    """Bytes on disk that are not a valid session: ``details`` names the file and line."""


class StorageIOError(ScopecheckError, OSError):
    """The filesystem or database failed underneath a backend."""


class ProtocolError(ScopecheckError):
    """A backend in another process answered something the process protocol does not allow
    (malformed JSON, a wrong id, a missing field, an exit): the backend's fault, not a
    storage result, so it is never compared with the model."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__("protocol_error", message, **details)


def usage(code: str, message: str, **details: Any) -> UsageError:
    """Build a :class:`UsageError`; a helper so call sites read as ``raise usage(...)``."""
    return UsageError(code, message, **details)
