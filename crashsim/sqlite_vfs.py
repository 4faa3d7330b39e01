"""A recording, fault-injecting APSW VFS and the post-crash disk images it implies.

Every ``xWrite``/``xSync``/``xTruncate`` of every file SQLite opens through the VFS, and every
``xDelete``, is one numbered I/O call (``xRead`` too when ``count_reads`` is set, for the
recovery sweep).  Real I/O passes through to the default VFS in a temp directory, so SQLite
behaves as it does in production.  A :class:`FaultPlan` makes call *k* raise:

* ``crash``: :class:`SimulatedCrash` (a ``BaseException``, so no ``except Exception`` swallows
  it) at call *k* and every later call — the process died (CRASH-SQL-1);
* ``once`` / ``persistent``: ``apsw.IOError`` (SQLITE_IOERR) at call *k* only, or at *k* and
  every later call — the disk failed and the process lives on (CRASH-SQL-4).

:func:`disk_model` turns the trace into, per file, the *durable* bytes (base image plus every
write/truncate followed by an ``xSync`` of that file) and the *pending* operations since;
:func:`post_crash_images` draws the files a power loss may leave: durable data plus a subset of
pending operations in order, some writes torn at 512-byte sector boundaries (CRASH-SQL-2).
``-shm`` files are never part of an image: they are shared memory, rebuilt from the WAL.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

import apsw
import attrs

SECTOR = 512

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
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._vfs.call("write", self._path, offset=offset, data=bytes(data))
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._vfs.call("sync", self._path)
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


# -- disk model ----------------------------------------------------------------------------


@attrs.define
class FileModel:
    """One path: its durable content (``None`` = absent) and operations not yet synced."""

    durable: bytes | None
    pending: list[IOCall] = attrs.field(factory=list)
    #: An unsynced delete: the name may or may not survive power loss.
    delete_pending: bool = False


def _apply(content: bytes | None, call: IOCall, sectors: Sequence[int] | None = None) -> bytes:
    data = bytearray(content or b"")
    if call.kind == "truncate":
        if call.size < len(data):
            del data[call.size :]
        else:
            data.extend(b"\0" * (call.size - len(data)))
        return bytes(data)
    assert call.kind == "write"
    end = call.offset + len(call.data)
    if len(data) < end:
        data.extend(b"\0" * (end - len(data)))
    if sectors is None:
        data[call.offset : end] = call.data
    else:
        for start, stop in sectors_of(call):
            if start in sectors:
                data[start:stop] = call.data[start - call.offset : stop - call.offset]
    return bytes(data)


def sectors_of(call: IOCall) -> Iterator[tuple[int, int]]:
    """The absolute ``[start, stop)`` pieces of a write cut at 512-byte sector boundaries."""
    start = call.offset
    end = call.offset + len(call.data)
    while start < end:
        stop = min(end, (start // SECTOR + 1) * SECTOR)
        yield start, stop
        start = stop


def disk_model(base: Mapping[str, bytes], calls: Sequence[IOCall]) -> dict[str, FileModel]:
    """Durable content and pending operations per path after ``calls`` (CRASH-SQL-2)."""
    files = {path: FileModel(content) for path, content in base.items()}
    for call in calls:
        if call.kind == "read" or call.failed:
            continue
        model = files.setdefault(call.path, FileModel(None))
        if call.kind in ("write", "truncate"):
            if model.delete_pending:  # recreated after an unsynced delete
                model.delete_pending = False
            model.pending.append(call)
        elif call.kind == "sync":
            content = model.durable
            for op in model.pending:
                content = _apply(content, op)
            model.durable = content
            model.pending.clear()
        elif call.kind == "delete":
            if call.sync_dir:
                model.durable = None
                model.pending.clear()
                model.delete_pending = False
            else:
                model.pending.clear()  # unsynced data of a deleted file is gone either way
                model.delete_pending = True
    return files


@attrs.frozen
class Image:
    """Files a crash may leave, keyed by absolute path, and how they were drawn."""

    files: dict[str, bytes]
    label: str


def post_crash_images(
    files: Mapping[str, FileModel], rng: random.Random, variants: int
) -> list[Image]:
    """Images a power loss may leave: durable data only, everything written, and ``variants``
    random draws where each pending operation is kept, dropped or (writes) torn by sector."""
    images = [_image(files, "durable-only", lambda _: "drop", rng)]
    if any(m.pending or m.delete_pending for m in files.values()):
        images.append(_image(files, "all-written", lambda _: "keep", rng))
        for number in range(variants):
            images.append(
                _image(
                    files,
                    f"random-{number}",
                    lambda op: rng.choice(("keep", "drop", "tear")),
                    rng,
                )
            )
    return images


def _image(
    files: Mapping[str, FileModel],
    label: str,
    pick: Callable[[IOCall | None], str],
    rng: random.Random,
) -> Image:
    result: dict[str, bytes] = {}
    notes: list[str] = []
    for path, model in files.items():
        if path.endswith("-shm"):
            continue
        content = model.durable
        if model.delete_pending and pick(None) == "keep":  # the unsynced delete happened
            content = None
        for op in model.pending:
            decision = pick(op)
            # After a dropped op the OS may still have flushed later ones (no ordering).
            if decision == "keep":
                content = _apply(content, op)
            elif decision == "tear" and op.kind == "write":
                pieces = [start for start, _ in sectors_of(op)]
                chosen = [p for p in pieces if rng.random() < 0.5]
                content = _apply(content, op, chosen)
                notes.append(f"tore#{op.index}:{len(chosen)}/{len(pieces)}")
        if content is not None:
            result[path] = content
    return Image(result, label + ("" if not notes else " " + ",".join(notes)))


def materialise(image: Image, source_root: str, target_root: str) -> None:
    """Write ``image`` under ``target_root``, mapping paths below ``source_root``; any file
    already in ``target_root`` is removed first."""
    for name in os.listdir(target_root):
        os.unlink(os.path.join(target_root, name))
    for path, content in image.files.items():
        relative = os.path.relpath(path, source_root)
        with open(os.path.join(target_root, relative), "wb") as handle:
            handle.write(content)


def read_tree(root: str) -> dict[str, bytes]:
    """Every regular file directly under ``root`` by absolute path (a base image)."""
    result = {}
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isfile(path) and not name.endswith("-shm"):
            with open(path, "rb") as handle:
                result[path] = handle.read()
    return result
