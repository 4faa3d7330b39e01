"""Single transient I/O faults injected into a recorded workload (SQLite's ``ioerr-transient``).

One concept: which failures each mutating :class:`~scopecheck.crashsim.fs_recorder.RecordingFs` call
can be given, and a fault hook that fails exactly one call.  The fault runs of
:mod:`scopecheck.crashsim.generic_faults` (CRASH-FS-9..11; the JSONL sweep's
:func:`scopecheck.crashsim.jsonl_sweep.fault_sweep`, CRASH-10..12, is the same runs with the
JSONL checks added) use it.

Why these faults: ``EACCES`` for the directory-entry calls (a rename, unlink or mkdir refused),
``ENOSPC`` and ``EIO`` for a whole-file write, a partial ``ENOSPC`` append (the first
:data:`PARTIAL_BYTES` bytes land, then the call fails: REFERENCE §1's "known weak spot") and
``EIO`` for every fsync (after which, as PostgreSQL's fsyncgate showed, the dirty data may be
gone and a retry can lie).  ``truncate`` gets none: it is how backends undo a failed append,
and a second fault inside the handling of the first is outside single-fault injection.
"""

from __future__ import annotations

import errno
from typing import Any

from scopecheck.crashsim.fs_recorder import Op

#: Bytes of a partial ``enospc-partial`` append written before the call fails.
PARTIAL_BYTES = 7

_FAULTS: dict[str, tuple[str, ...]] = {
    "unlink": ("eacces",),
    "rename": ("eacces",),
    "create_dir": ("eacces",),
    "write": ("enospc", "eio"),
    "append": ("enospc-partial", "eio"),
    "fsync": ("eio",),
    "fsync_file": ("eio",),
    "fsync_dir": ("eio",),
    "truncate": (),
    "remove": ("eacces",),
}


def faults_for(op: str) -> tuple[str, ...]:
    """The faults a mutating call of kind ``op`` is given, one run each."""
    return _FAULTS.get(op, ())


class OneFault:
    """Fail mutating call number ``target`` (0-based, in trace order) once with ``fault``
    (transient: the same call made again later succeeds).  ``hit`` is the kind of the call
    that failed, ``None`` until it fired."""

    def __init__(self, target: int, fault: str) -> None:
        self.target = target
        self.fault = fault
        self.hit: str | None = None

    def __call__(self, index: int, op: Op) -> Any:
        if index != self.target or self.fault not in faults_for(op.kind):
            return None
        self.hit = op.kind
        if self.fault == "eacces":
            return PermissionError(errno.EACCES, "injected: permission denied")
        if self.fault == "enospc":
            return OSError(errno.ENOSPC, "injected: no space left on device")
        if self.fault == "enospc-partial":
            return (OSError(errno.ENOSPC, "injected: no space left on device"), PARTIAL_BYTES)
        return OSError(errno.EIO, "injected: I/O error")
