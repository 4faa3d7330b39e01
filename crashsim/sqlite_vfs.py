"""A recording, fault-injecting APSW VFS.

Every ``xWrite``/``xSync``/``xTruncate`` of every file SQLite opens through the VFS, and every
``xDelete``, is one numbered I/O call (``xRead`` too when ``count_reads`` is set, for the
recovery sweep).  Real I/O passes through to the default VFS in a temp directory, so SQLite
behaves as it does in production.  A :class:`FaultPlan` makes call *k* raise:

* ``crash``: :class:`SimulatedCrash` (a ``BaseException``, so no ``except Exception`` swallows
  it) at call *k* and every later call — the process died (CRASH-SQL-1);
* ``once`` / ``persistent``: ``apsw.IOError`` (SQLITE_IOERR) at call *k* only, or at *k* and
  every later call — the disk failed and the process lives on (CRASH-SQL-4).

:func:`scopecheck.crashsim.vfs_source.file_ops` turns the trace into the file operations of
the one persistence model (:mod:`scopecheck.crashsim.persistence`), which builds every crash and
power-loss image from them (CRASH-SQL-2); :data:`SECTOR_TEARS` is the device the SQLite sweeps
use: writes tear at 512-byte sectors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

import apsw
import attrs

from scopecheck.crashsim.persistence import Device

SECTOR = 512
#: The disk under the SQLite sweeps: an unsynced write may be cut at any 512-byte sector
#: boundary, and writes to different files may reach the disk out of order (CRASH-SQL-2).
SECTOR_TEARS = Device(tear=SECTOR)
#: Files the unix VFS opens with ``UNIXFILE_DIRSYNC`` when it creates them: the first
#: ``xSync`` after such an open also fsyncs their directory (``unixOpen``/``unixSync``).
_DIRSYNC_KINDS = (
    apsw.SQLITE_OPEN_MAIN_JOURNAL | apsw.SQLITE_OPEN_SUPER_JOURNAL | apsw.SQLITE_OPEN_WAL
)

CallKind = Literal["write", "sync", "truncate", "delete", "read"]
FaultMode = Literal["crash", "once", "persistent"]


class SimulatedCrash(BaseException):
    """The simulated process died at an I/O call; nothing after it reaches the disk."""


@attrs.frozen
class IOCall:
    """One I/O call as SQLite issued it.  ``path`` is absolute."""

    index: int
    kind: CallKind
    path: str
    offset: int = 0
    data: bytes = b""
    size: int = 0
    #: A delete whose directory is synced after it, or a sync that also syncs the file's
    #: directory (the first one after the unix VFS created a journal or WAL).
    sync_dir: bool = False
    #: The call raised an injected I/O error and had no effect.
    failed: bool = False


@attrs.define
class FaultPlan:
    """Which call fails and how; ``at=None`` injects nothing."""

    at: int | None = None
    mode: FaultMode = "crash"
    fired: bool = False
    #: Optional filter: the fault fires at the first call at or after ``at`` it accepts
    #: (``at`` is then moved there), e.g. "the first write to the main database file".
    match: Callable[[IOCall], bool] | None = None

    def check(self, call: IOCall) -> None:
        index = call.index
        if self.at is None or index < self.at:
            return
        if self.match is not None and not self.fired and index >= self.at:
            if not self.match(call):
                return
            self.at = index
        if self.mode == "crash":
            self.fired = True
            raise SimulatedCrash(f"simulated crash at I/O call {index}")
        if self.mode == "persistent" or index == self.at:
            self.fired = True
            raise apsw.IOError(f"injected I/O error at call {index} ({self.mode})")


class RecordingVFS(apsw.VFS):
    """Pass-through VFS that numbers, records and optionally fails I/O calls.

    Register it with a unique ``name``; call :meth:`unregister` when done.
    """

    def __init__(self, name: str, *, count_reads: bool = False, real_sync: bool = False) -> None:
        super().__init__(name, "")
        self.vfs_name = name
        self.count_reads = count_reads
        #: Durability is simulated from the trace, so a real fsync of the scratch directory
        #: buys nothing; ``True`` passes syncs through (for runs on a real disk).
        self.real_sync = real_sync
        self.calls: list[IOCall] = []
        self.plan = FaultPlan()
        self.recording = True

    def reset(self, plan: FaultPlan | None = None) -> None:
        self.calls = []
        self.plan = plan or FaultPlan()

    @property
    def next_index(self) -> int:
        return len(self.calls)

    def call(self, kind: CallKind, path: str, **fields: object) -> None:
        """Number the call, fire the fault if it is due, then record it as performed."""
        index = len(self.calls)
        record = IOCall(index, kind, path, **fields)  # type: ignore[arg-type]
        try:
            self.plan.check(record)
        except SimulatedCrash:
            # The crashing call may itself have been partly performed: keep it, flagged by
            # index == plan.at, so images may include (a torn part of) it.
            if index == self.plan.at and kind != "read":
                self.calls.append(record)
            raise
        except apsw.IOError:
            self.calls.append(attrs.evolve(record, failed=True))
            raise
        self.calls.append(record)

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        return RecordingFile(self, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        self.call("delete", os.path.abspath(filename), sync_dir=bool(syncdir))
        super().xDelete(filename, syncdir)


class RecordingFile(apsw.VFSFile):
    """One open file; every mutating method reports to the owning :class:`RecordingVFS`."""

    def __init__(
        self, vfs: RecordingVFS, name: str | apsw.URIFilename | None, flags: list[int]
    ) -> None:
        self._vfs = vfs
        path = name.filename() if isinstance(name, apsw.URIFilename) else (name or "")
        self._path = os.path.abspath(path) if path else ""
        #: The unix VFS's ``UNIXFILE_DIRSYNC``: set when a journal or WAL is opened with
        #: ``SQLITE_OPEN_CREATE``, cleared by the first sync (which fsyncs the directory too).
        self._dirsync = bool(flags[0] & _DIRSYNC_KINDS and flags[0] & apsw.SQLITE_OPEN_CREATE)
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._vfs.call("write", self._path, offset=offset, data=bytes(data))
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._vfs.call("sync", self._path, sync_dir=self._dirsync)
        self._dirsync = False
        if self._vfs.real_sync:
            super().xSync(flags)

    def xTruncate(self, newsize: int) -> None:
        self._vfs.call("truncate", self._path, size=newsize)
        super().xTruncate(newsize)

    def xRead(self, amount: int, offset: int) -> bytes:
        if self._vfs.count_reads:
            self._vfs.call("read", self._path, offset=offset, size=amount)
        result: bytes = super().xRead(amount, offset)
        return result
