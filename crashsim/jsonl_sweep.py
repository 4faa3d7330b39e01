"""Every crash state of a JSONL workload on pyfakefs, reopened and checked against the model.

How it works (ALICE's prefixes, LazyFS's lost unsynced data, SQLite's crash-during-
recovery): :func:`trace` runs a workload once through
:class:`~scopecheck.crashsim.fs_recorder.RecordingFs` and the model
(``scopecheck.models.reference``) once beside it, giving the mutating operations and the
logical state after every step.
:mod:`scopecheck.crashsim.fs_source` turns the recorded calls into the persistence model's
operations (``Trace.file_ops``), and the images of
:func:`~scopecheck.crashsim.explore.point_images` on a
:class:`~scopecheck.crashsim.persistence.Volume` -- the one model every recorder is judged by
(CRASH-SYS-1) -- are, before every mutating operation *k* and at the end:

* ``process`` — a process crash: every completed call kept;
* ``torn-call:<path>:<cut>`` — a process crash while operation *k*, a write (or append), was in
  flight: its first *cut* bytes reached the file (every byte of a short write, line ends,
  4 KiB boundaries and a seeded sample of a long one);
* with ``mode="unsynced"`` also the power-loss images of
  :meth:`~scopecheck.crashsim.persistence.Volume.power_images` (``strict``, ``data-kept``,
  ``entries-kept``, ``only:<path>``, ``torn@1:<path>:<n>:<cut>``: a torn write is an unsynced
  write cut at a power loss).

Each state is written into one reused fake filesystem from ``{path: bytes}`` and checked by
:class:`Checker` (rules CRASH-1..CRASH-9 in ``spec/rules/crash_jsonl.toml``): the reopened
Session equals the model after step *s* or *s + 1* when op *k* ran in step *s* (all acknowledged
work present, nothing partial); the next commit's seq is above every complete record on disk;
a second open gives the same state and the same files; retired sidecars with no later records
are gone; and a crash at every mutating op of the recovery itself, reopened, gives the same
state again.  :func:`fault_sweep` injects single I/O faults without a crash (CRASH-10..12).

:class:`JsonlRound` and :class:`JsonlSource` are how the exploration loop
(:mod:`scopecheck.crashsim.explore`) sees this sweep: :func:`explore_workload` checks every
crash point of one workload in one pass, :func:`explore_with_faults` explores generated
workloads in coverage order for a budget (the JSONL half of ``scopecheck fuzz``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import posixpath
import random
import re
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol

import attrs
import orjson
from pyfakefs.fake_file import FakeDirectory, FakeFile

from scopecheck.crashsim.coverage import crash_points
from scopecheck.crashsim.explore import (
    MAX_FAILURES,
    Exploration,
    Findings,
    Images,
    check_passes,
    point_images,
)
from scopecheck.crashsim.explore import explore as explore_rounds
from scopecheck.crashsim.failure import BadReproducer, CrashFailure, Evidence
from scopecheck.crashsim.faults import OneFault, faults_for
from scopecheck.crashsim.fs_recorder import Op, RecordingFs
from scopecheck.crashsim.fs_source import absolute, acknowledged_at, file_ops, image_of
from scopecheck.crashsim.jsonl_workloads import Step, Workload
from scopecheck.crashsim.persistence import (
    TORN_CALL,
    FileOp,
    Image,
    Volume,
    call_cuts,
    process_crash,
)
from scopecheck.crashsim.recovery import Broken, Expected, Extra, judge
from scopecheck.impl.fs import DirEntry, OsFileSystem, fs_error
from scopecheck.impl.jsonl import JsonlRepository, layout
from scopecheck.models.addresses import value
from scopecheck.models.errors import ScopecheckError, StorageIOError, UsageError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value

Mode = Literal["prefix", "unsynced"]
#: Sampled cuts per torn write in this sweep: a JSONL reopen is cheap, and torn tails are
#: what its recovery repairs (CRASH-8), so it cuts each unsynced write at more points than
#: the generic sweep.
JSONL_CUTS = 12
#: A JSONL write in flight at a process crash is cut at every byte up to this size (a
#: commit's record line), at line ends, 4 KiB boundaries and this many samples beyond it.
JSONL_SHORT_CALL = 256
JSONL_CALL_SAMPLES = 12
MODES: tuple[Mode, ...] = ("prefix", "unsynced")
ROOT = "/sessions"
SESSION = "s"
MAIN = f"{ROOT}/{SESSION}.jsonl"
SCOPES = MAIN + ".scopes"
BASE_TIME = 1_700_000_000_000
_SEQ = re.compile(rb'"seq":(\d+)')
_NEXT = re.compile(rb'"nextSeq":(\d+)')
_RETIRE = re.compile(rb'"kind":"scope","op":"retire","seq":(\d+),"scopeId":"((?:[^"\\]|\\.)*)"')


class StepClock:
    """Timestamps depend only on the step index, so the model and every run agree."""

    def __init__(self) -> None:
        self.now = BASE_TIME

    def at(self, step: int) -> None:
        self.now = BASE_TIME + 1000 * step

    def __call__(self) -> int:
        return self.now


class FakeFs(OsFileSystem):
    """:class:`~scopecheck.impl.fs.OsFileSystem` over a pyfakefs filesystem whose read-only lookups
    walk the fake tree directly.

    Through the fake ``os`` module every call normalises and resolves its path (≈0.2 ms); our
    paths are already absolute and normal, so reads, ``exists``/``is_dir``/``file_size``,
    ``list_dir`` and an already-present ``create_dir`` skip that, and ``open_append`` takes
    :func:`~scopecheck.crashsim.fake_disk.pyfakefs_appender`.  Every mutating call still
    goes through the fake ``os`` module unchanged.
    """

    def __init__(self, fake: Any) -> None:
        from pyfakefs.fake_os import FakeOsModule

        from scopecheck.crashsim.fake_disk import pyfakefs_appender

        appender = pyfakefs_appender(fake)
        super().__init__(FakeOsModule(fake), sync=False, reader=self._read, appender=appender)
        self.fake = fake

    def _lookup(self, path: str) -> Any:
        node = self.fake.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, FakeDirectory):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
            node = node.entries.get(part)
            if node is None:
                return None
        return node

    def _read(self, path: str) -> bytes:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if isinstance(node, FakeDirectory):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        contents = node.byte_contents
        return bytes(contents) if contents else b""

    def exists(self, path: str) -> bool:
        try:
            return self._lookup(path) is not None
        except NotADirectoryError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return isinstance(self._lookup(path), FakeDirectory)
        except NotADirectoryError:
            return False

    def file_size(self, path: str) -> int:
        return len(self.read_bytes(path))

    def list_dir(self, path: str) -> list[DirEntry]:
        try:
            node = self._lookup(path)
        except NotADirectoryError as exc:
            raise fs_error("list_dir", path, exc) from exc
        if node is None:
            raise fs_error("list_dir", path, FileNotFoundError(errno.ENOENT, "missing", path))
        if not isinstance(node, FakeDirectory):
            raise fs_error("list_dir", path, NotADirectoryError(errno.ENOTDIR, "not a dir", path))
        return [
            DirEntry(name, isinstance(child, FakeDirectory), not isinstance(child, FakeDirectory))
            for name, child in node.entries.items()
        ]

    def create_dir(self, path: str, recursive: bool = True) -> None:
        if recursive and self.is_dir(path):
            return
        super().create_dir(path, recursive)

    # Whole-file writes, renames and unlinks of regular files act on the fake tree directly
    # (same effect as the fake os module: same inode kept on rewrite, target replaced on
    # rename); anything unusual falls back to the fake os module and its errors.
    def _parent(self, path: str) -> tuple[Any, str]:
        directory, name = posixpath.split(path)
        try:
            node = self._lookup(directory)
        except NotADirectoryError:
            return None, name
        return (node if isinstance(node, FakeDirectory) else None), name

    def write_file(self, path: str, data: bytes) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name) if parent is not None else None
        if parent is None or isinstance(node, FakeDirectory):
            super().write_file(path, data)
        elif node is not None:
            node.set_contents(data)
        else:
            parent.add_entry(FakeFile(name, contents=data, filesystem=self.fake))  # type: ignore[type-var]

    def rename(self, source: str, target: str) -> None:
        src_dir, src_name = self._parent(source)
        dst_dir, dst_name = self._parent(target)
        node = src_dir.entries.get(src_name) if src_dir is not None else None
        if node is None or dst_dir is None or isinstance(node, FakeDirectory):
            super().rename(source, target)
            return
        existing = dst_dir.entries.get(dst_name)
        if isinstance(existing, FakeDirectory):
            super().rename(source, target)
            return
        if existing is not None and existing is not node:
            dst_dir.remove_entry(dst_name)
        del src_dir._entries[src_name]
        node.name = dst_name
        dst_dir._entries[dst_name] = node
        node.parent_dir = weakref.ref(dst_dir)

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name) if parent is not None else None
        if node is None or isinstance(node, FakeDirectory):
            super().unlink(path)
        else:
            parent.remove_entry(name)


class Sandbox:
    """One pyfakefs filesystem reused for every state (a fake FS cannot be copied; rebuilding
    it from ``{path: bytes}`` is the cheap way, REFERENCE §7).  :meth:`load` changes only the
    files and directories that differ from what is there."""

    def __init__(self) -> None:
        from pyfakefs.fake_filesystem import FakeFilesystem

        self.fake: Any = FakeFilesystem()
        self.fs = FakeFs(self.fake)
        self.fake.create_dir(ROOT)

    def load(self, image: Image) -> None:
        """Make the files under the root those of ``image`` (paths relative to the root)."""
        fake, fs = self.fake, self.fs
        files = absolute(image, ROOT)
        dirs = {ROOT, *(f"{ROOT}/{d}" for d in image.dirs if d)}
        # One walk of the fake tree gives every node; contents are compared on the nodes
        # rather than read back through paths (a state differs from the last in a file or two).
        present: dict[str, Any] = {}
        current: dict[str, Any] = {}
        stack = [(ROOT, fs._lookup(ROOT))]
        while stack:
            path, node = stack.pop()
            present[path] = node
            for name, child in node.entries.items():
                if isinstance(child, FakeDirectory):
                    stack.append((f"{path}/{name}", child))
                else:
                    current[f"{path}/{name}"] = child
        for path in current:
            if path not in files:
                fake.remove_object(path)
        for directory in sorted(present.keys() - dirs, reverse=True):
            if fs.is_dir(directory):
                fake.remove_object(directory)
        for directory in sorted(dirs - present.keys()):
            if not fs.is_dir(directory):
                fake.create_dir(directory)
        for path, data in files.items():
            node = current.get(path)
            if node is None:
                fs.write_file(path, data)
            elif (node.byte_contents or b"") != data:
                node.set_contents(data)

    def tree(self) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for directory, _, files in _walk(self.fs, ROOT):
            for name in files:
                path = f"{directory}/{name}"
                found[path] = self.fs.read_bytes(path)
        return found

    def state(self) -> Image:
        """The files under the root now, as an image relative to it."""
        return image_of(self.tree(), _dirs(self.fs, ROOT), ROOT)


def _walk(fs: FakeFs, top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    node = fs._lookup(top)
    if not isinstance(node, FakeDirectory):
        return
    dirs = [n for n, c in node.entries.items() if isinstance(c, FakeDirectory)]
    files = [n for n, c in node.entries.items() if not isinstance(c, FakeDirectory)]
    yield top, dirs, files
    for d in dirs:
        yield from _walk(fs, f"{top}/{d}")


def _dirs(fs: FakeFs, top: str) -> list[str]:
    return [d for d, _, _ in _walk(fs, top)]


class Traced(Protocol):
    """What :func:`allowed_for` reads of a trace (this module's or the generic sweep's)."""

    @property
    def workload(self) -> Workload: ...

    @property
    def file_ops(self) -> tuple[FileOp, ...]: ...


class TracedOps(Traced, Protocol):
    """What a :class:`SandboxRound` reads of a trace (this module's or the generic sweep's)."""

    @property
    def acked_at(self) -> tuple[int | None, ...]: ...

    @property
    def initial(self) -> Image: ...


class StateChecker(Protocol):
    """What a :class:`SandboxRound` asks of its checker."""

    states: int
    recovery_states: int

    def check(self, crash: CrashState) -> CrashFailure | None: ...


@attrs.frozen
class Trace:
    workload: Workload
    ops: tuple[Op, ...]
    #: ``states[i]`` is the model's Session after the first ``i`` steps (``None``: no Session).
    states: tuple[Snapshot | None, ...]
    initial: Image
    #: ``ops`` as the persistence model's operations (:mod:`scopecheck.crashsim.fs_source`).
    file_ops: tuple[FileOp, ...] = ()
    #: ``acked_at[i]``: how many of ``file_ops`` had completed when step ``i`` returned.
    acked_at: tuple[int | None, ...] = ()
    #: ``next_seqs[i]``: the lowest seq a commit after the first ``i`` steps may get (SEQ-7).
    next_seqs: tuple[int, ...] = ()


def drive_steps(
    new_repo: Callable[[], Any],
    steps: Sequence[Step],
    clock: StepClock,
    on_step: Callable[[int], None] | None = None,
    restart_on_reopen: bool = False,
) -> tuple[Any, Any]:
    """Run ``steps`` on the repository ``new_repo()`` builds; returns ``(repository, open
    storage or None)``.  ``restart_on_reopen``: a ``reopen`` also closes the repository and
    builds a new one (a process restart; the generic sweep's third-party backends)."""
    repo = new_repo()
    storage: Any = None
    for index, step in enumerate(steps):
        clock.at(index)
        if on_step is not None:
            on_step(index)
        if step.op == "create":
            storage = repo.create(SESSION)
        elif step.op == "commit":
            storage.commit(step.writes)
        elif step.op == "reopen":
            storage.close()
            if restart_on_reopen:
                close = getattr(repo, "close", None)
                if callable(close):
                    close()
                repo = new_repo()
            storage = repo.open(SESSION)
        elif step.op == "delete":
            storage.close()
            storage = None
            repo.delete(SESSION)
    return repo, storage


def run_steps(
    repo_class: type[JsonlRepository],
    fs: Any,
    steps: Sequence[Step],
    clock: StepClock,
    on_step: Callable[[int], None] | None = None,
) -> Any:
    """Run ``steps`` on a repository over ``fs``; returns the open storage (or ``None``)."""
    return drive_steps(lambda: repo_class(ROOT, fs, clock, cwd="/crash"), steps, clock, on_step)[1]


def fold_model(workload: Workload, observe: Callable[[Any], None]) -> None:
    """Drive the reference model through ``workload``, calling ``observe(session or None)``
    before any step and after each one."""
    repo = ReferenceRepository()
    session: Any = None
    observe(None)
    for index, step in enumerate(workload.steps):
        if step.op == "create":
            session = repo.create(SESSION)
        elif step.op == "commit":
            session.commit(step.writes, BASE_TIME + 1000 * index)
        elif step.op == "delete":
            repo.close_session(SESSION)
            repo.delete(SESSION)
            session = None
        observe(session)


@attrs.frozen
class ModelStates:
    """``snapshots[i]``: the model's Session after the first ``i`` steps (``None``: none);
    ``next_seqs[i]``: the lowest seq the next commit may get then (SEQ-7)."""

    snapshots: tuple[Snapshot | None, ...]
    next_seqs: tuple[int, ...]


def model_states(wl: Workload) -> ModelStates:
    """The model's Session and next sequence after each prefix of ``wl``'s steps."""
    snapshots: list[Snapshot | None] = []
    next_seqs: list[int] = []

    def observe(session: Any) -> None:
        snapshots.append(None if session is None else session.snapshot())
        log = session.log if session is not None else []
        next_seqs.append(log[-1].first_seq + len(log[-1].writes) if log else 1)

    fold_model(wl, observe)
    return ModelStates(tuple(snapshots), tuple(next_seqs))


def trace(workload: Workload, repo_class: type[JsonlRepository] = JsonlRepository) -> Trace:
    box = Sandbox()
    initial = box.state()
    recorder = RecordingFs(box.fs)

    def on_step(index: int) -> None:
        recorder.step = index

    storage = run_steps(repo_class, recorder, workload.steps, StepClock(), on_step)
    if storage is not None:
        storage.close()
    ops = tuple(recorder.ops)
    converted = file_ops(ops, ROOT, initial)
    model = model_states(workload)
    return Trace(
        workload, ops, model.snapshots, initial, converted,
        acknowledged_at(converted, len(workload.steps)), model.next_seqs,
    )  # fmt: skip


# -- crash states ----------------------------------------------------------------------------


@attrs.frozen
class CrashState:
    """A crash before ``file_ops[op_index]``: ``variant`` is ``process`` or a power-loss
    variant of :meth:`~scopecheck.crashsim.persistence.Volume.power_images`."""

    op_index: int
    variant: str
    state: Image
    #: Indices into ``Trace.states`` the recovered Session may equal.
    allowed: tuple[int, ...]

    @property
    def offset(self) -> int | None:
        """The bytes a torn write kept (``torn@<g>:<path>:<n>:<cut>``,
        ``torn-call:<path>:<cut>``)."""
        if self.variant.startswith(("torn@", TORN_CALL)):
            return int(self.variant.rsplit(":", 1)[1])
        return None

    @property
    def power_loss(self) -> bool:
        return not process_crash(self.variant)

    @property
    def family(self) -> str:
        """The kind of crash point: ``process``, ``strict``, ``only``, ``torn``, ..."""
        return self.variant.split(":", 1)[0].split("@", 1)[0]


def crash_states(
    ops: Sequence[FileOp],
    initial: Image,
    mode: Mode,
    allowed_at: Callable[[int], tuple[int, ...]],
    seed: int = 0,
    points: Sequence[int] | None = None,
    cuts: int = 3,
    call_cuts_of: Callable[[bytes, random.Random], list[int]] = call_cuts,
) -> Iterator[CrashState]:
    """The crash states of ``ops`` at ``points`` (sorted; default every crash point: before
    each mutating operation, and at the end), in one sweep over the operations: the images of
    :func:`~scopecheck.crashsim.explore.point_images` -- the process crash, the write in
    flight torn at ``call_cuts_of`` its bytes, and in ``unsynced`` mode every power-loss image
    that differs from the process image (CRASH-SYS-1), ``cuts`` sampled cut points per torn
    unsynced write besides the first, middle and last byte."""
    images = Images(power=mode == "unsynced", cuts=cuts, call_cuts_of=call_cuts_of)
    volume = Volume(initial)
    done = 0
    for k in crash_points(ops) if points is None else points:
        while done < k:
            volume.apply(ops[done])
            done += 1
        allowed = allowed_at(k)
        for variant, image in point_images(volume, ops, k, seed, images):
            yield CrashState(k, variant, image, allowed)


def jsonl_call_cuts(data: bytes, rng: random.Random) -> list[int]:
    """Cut points of a JSONL write in flight (every byte of a record line)."""
    return call_cuts(data, rng, JSONL_SHORT_CALL, JSONL_CALL_SAMPLES)


def middle_cut(data: bytes, rng: random.Random) -> list[int]:
    """One cut point, the middle, for a write in flight during a recovery (CRASH-5)."""
    del rng
    return [len(data) // 2]


def crash_state(
    ops: Sequence[FileOp],
    initial: Image,
    k: int,
    variant: str,
    allowed: tuple[int, ...],
) -> CrashState | None:
    """The crash state ``(k, variant)`` rebuilt by its name alone
    (:func:`~scopecheck.crashsim.persistence.power_image`), for a replay; ``None`` when the
    operations have no such state (a replay after the backend changed)."""
    from scopecheck.crashsim.persistence import power_image

    if k not in crash_points(ops):
        return None
    try:
        image = power_image(ops, k, variant, start=initial)
    except ValueError:
        return None
    return CrashState(k, variant, image, allowed)


def allowed_for(tr: Traced) -> Callable[[int], tuple[int, ...]]:
    """Operation *k* ran inside step *s*: the Session may be as before or as after that step."""
    ops, final = tr.file_ops, len(tr.workload.steps)

    def allowed(k: int) -> tuple[int, ...]:
        if k >= len(ops):
            return (final,)
        step = ops[k].step
        return (step, step + 1)

    return allowed


# -- checking --------------------------------------------------------------------------------


def describe(snapshot: Snapshot | None) -> Any:
    """A compact JSON view of a Session state for reports (``None``: no Session)."""
    if snapshot is None:
        return None
    return {
        "entries": [e.id for e in snapshot.entries],
        "usage": [u.id for u in snapshot.usage],
        "values": {
            f"{k[0] or '-'}/{k[1]}/{k[2]}": orjson.loads(v.value_json) for k, v in snapshot.values
        },
        "lists": {f"{k[0] or '-'}/{k[1]}/{k[2]}": len(v) for k, v in snapshot.lists},
        "next_seq_hint": max(
            [0]
            + [e.seq for e in snapshot.entries]
            + [u.seq for u in snapshot.usage]
            + [v.seq for _, v in snapshot.values]
            + [el.seq for _, els in snapshot.lists for el in els]
        ),
    }


def show_files(files: dict[str, bytes], limit: int = 400) -> dict[str, str]:
    out = {}
    for path, data in sorted(files.items()):
        text = data.decode("utf-8", "replace")
        out[path] = text if len(text) <= limit else text[:limit] + f"… ({len(data)} bytes)"
    return out


def max_seq_on_disk(files: dict[str, bytes]) -> int:
    """The highest seq of any *complete* line in the Session's files (temp files excluded)."""
    top = 0
    for path, data in files.items():
        if path.endswith(layout.TEMP_SUFFIX) or not (path == MAIN or path.startswith(SCOPES)):
            continue
        end = data.rfind(b"\n")
        if end < 0:
            continue
        complete = data[: end + 1]
        for match in _SEQ.finditer(complete):
            top = max(top, int(match.group(1)))
        first = complete[: complete.find(b"\n")]
        for match in _NEXT.finditer(first):
            top = max(top, int(match.group(1)) - 1)
    return top


def dead_sidecars(files: dict[str, bytes]) -> list[str]:
    """Sidecars with no complete record after their scope's latest retirement in the main
    log: open must have removed them (000 §6.3 stage 9)."""
    main = files.get(MAIN, b"")
    main = main[: main.rfind(b"\n") + 1]
    boundaries: dict[str, int] = {}
    for match in _RETIRE.finditer(main):
        scope_id = orjson.loads(b'"' + match.group(2) + b'"')
        boundaries[scope_id] = max(boundaries.get(scope_id, 0), int(match.group(1)))
    dead = []
    for path, data in files.items():
        if not path.startswith(SCOPES + "/") or not path.endswith(layout.SIDECAR_SUFFIX):
            continue
        scope_id = layout.decode_sidecar_name(posixpath.basename(path))
        if scope_id is None:
            continue
        complete = data[: data.rfind(b"\n") + 1]
        seqs = [int(m.group(1)) for m in _SEQ.finditer(complete)]
        if not seqs or max(seqs) <= boundaries.get(scope_id, 0):
            dead.append(path)
    return dead


class Checker:
    """Reopens crash states on one sandbox and checks them against a trace's model states."""

    def __init__(
        self,
        tr: Trace,
        mode: Mode,
        repo_class: type[JsonlRepository] = JsonlRepository,
        *,
        recovery: bool = True,
        invariants: Callable[[Any, int], list[str]] | None = None,
        seed: int = 0,
    ) -> None:
        self.trace = tr
        self.seed = seed
        #: ``invariants(storage, steps)``: extra checks of the reopened Session taken as the
        #: model after the first ``steps`` workload steps (the lifecycle's, OP-21); ``[]`` = ok.
        self.invariants = invariants
        self.mode = mode
        self.repo_class = repo_class
        self.box = Sandbox()
        self.clock = StepClock()
        self.clock.at(len(tr.workload.steps) + 1)
        self.recovery = recovery
        #: States checked, including crash-during-recovery states (also counted alone).
        self.states = 0
        self.recovery_states = 0

    def _repo(self, fs: Any) -> JsonlRepository:
        return self.repo_class(ROOT, fs, self.clock, cwd="/crash")

    def failure(
        self, k: int, variant: str, rule: str, problem: str, *,
        recovery: tuple[int, str] | None = None, shown: dict[str, Any] | None = None,
    ) -> CrashFailure:  # fmt: skip
        """A failure of the crash image ``(k, variant)`` of this trace."""
        return trace_failure("jsonl", self.trace, self.mode, self.seed, k, variant, rule,
                             problem, recovery=recovery, shown=shown)  # fmt: skip

    def check(self, crash: CrashState) -> CrashFailure | None:
        """Reopen the crash image and judge it with the one recovery checker
        (:func:`~scopecheck.crashsim.recovery.judge`) under the JSONL rules, adding this
        format's own checks: the lifecycle invariants (OP-21), no dead sidecar left (CRASH-6),
        the probe commit above every record on disk (CRASH-3), a second open changing no file
        (CRASH-4); then crash the recovery (CRASH-5)."""
        self.states += 1
        box = self.box
        before = absolute(crash.state, ROOT)
        box.load(crash.state)
        tr = self.trace
        expected = Expected(
            tr.states, tr.next_seqs, [s.op for s in tr.workload.steps], crash.allowed
        )

        def failure(
            rule: str, problem: str, recovered: Any = None, recovery: tuple[int, str] | None = None
        ) -> CrashFailure:
            return self.failure(
                crash.op_index, crash.variant, rule, problem, recovery=recovery,
                shown={
                    "expected": [describe(s) for s in expected.states],
                    "recovered": recovered,
                    "files_before": show_files(before),
                    "files_after": show_files(box.tree()),
                },
            )  # fmt: skip

        recorders: list[RecordingFs] = []
        recovery_end: list[int] = []
        files: list[dict[str, bytes]] = []

        def reopen() -> JsonlRepository:
            recorders.append(RecordingFs(box.fs))
            return self._repo(recorders[-1])

        def recovered(storage: Any, state: Snapshot, matched: int) -> Broken | None:
            recovery_end.append(len(recorders[0].ops))
            broken = self._invariants(storage, crash.allowed)
            if broken:
                return Broken("OP-21", "lifecycle invariants broken — " + " | ".join(broken))
            dead = dead_sidecars(box.tree())
            if dead:
                return Broken("CRASH-6", f"retired sidecars left after recovery: {dead}", state)
            return None

        def committed(results: Sequence[Any], state: Snapshot) -> Broken | None:
            top = max_seq_on_disk(before)
            files.append(box.tree())
            if results[0].seq <= top:
                problem = f"the next commit got seq {results[0].seq}, not above seq {top} on disk"
                return Broken("CRASH-3", problem, state)
            return None

        def mismatched(storage: Any, state: Snapshot | None) -> str:
            broken = self._invariants(storage, crash.allowed)
            return "; lifecycle invariants broken — " + " | ".join(broken) if broken else ""

        def reopened() -> Broken | None:
            if box.tree() != files[0]:
                return Broken("CRASH-4", "a second reopen changed the files again")
            return None

        verdict = judge(
            reopen, expected, session=SESSION, probe=_PROBE,
            recreate=_created(),
            extra=Extra(recovered, committed, reopened, mismatched), rules=JSONL_RULES,
            errors=(ScopecheckError,),
        )  # fmt: skip
        if isinstance(verdict, Broken):
            shown = verdict.recovered
            return failure(
                verdict.rule, verdict.problem, shown if isinstance(shown, str) else describe(shown)
            )
        recovery_ops = recorders[0].ops[: recovery_end[0]] if recovery_end else []
        if self.recovery and recovery_ops and verdict.state is not None:
            return self._crash_recovery(crash, recovery_ops, verdict.state, failure)
        return None

    def _invariants(self, storage: Any, allowed: tuple[int, ...]) -> list[str]:
        """The lifecycle's invariants (OP-21) of the reopened Session taken as the model after
        each allowed number of steps: ``[]`` when they hold for one, else what broke for each."""
        if self.invariants is None:
            return []
        broken: list[str] = []
        for index in allowed:
            try:
                problems = self.invariants(storage, index)
            except ScopecheckError as exc:
                problems = [f"reads of the recovered Session failed: {exc.code}: {exc}"]
            if not problems:
                return []
            broken.append(f"as {index} steps: " + "; ".join(problems))
        return broken

    def _crash_recovery(
        self,
        crash: CrashState,
        recorded: list[Op],
        recovered: Snapshot,
        failure: Callable[..., CrashFailure],
    ) -> CrashFailure | None:
        """Crash at every mutating op of the recovery itself, through the same persistence
        model; reopening must still give ``recovered`` (CRASH-5)."""
        ops = file_ops(recorded, ROOT, crash.state)
        inners = crash_states(
            ops, crash.state, self.mode, lambda _: (), seed=crash.op_index, call_cuts_of=middle_cut
        )
        for inner in inners:
            if inner.state == crash.state:
                continue  # the crash state itself, checked already
            self.states += 1
            self.recovery_states += 1
            self.box.load(inner.state)
            label = (
                f"recovery op {inner.op_index} ({_op_desc(ops, inner.op_index)}) {inner.variant}"
            )
            try:
                repo = self._repo(self.box.fs)
                during = (inner.op_index, inner.variant)
                if SESSION not in repo.list():
                    return failure("CRASH-5", f"{label}: the Session vanished", recovery=during)
                storage = repo.open(SESSION)
                again = storage.snapshot()
                storage.close()
            except ScopecheckError as exc:
                return failure(
                    "CRASH-5", f"{label}: reopen failed: {exc.code}: {exc}", recovery=during
                )
            if again != recovered:
                return failure(
                    "CRASH-5",
                    f"{label}: another state than the first recovery",
                    describe(again),
                    recovery=during,
                )
        return None


#: The JSONL crash rule (``spec/rules/crash_jsonl.toml``) each check of the recovery checker
#: enforces for our own backend.
JSONL_RULES = {
    "reopen": "CRASH-1",
    "vanished": "CRASH-1",
    "state": "CRASH-2",
    "recreate": "CRASH-9",
    "recreate-raised": "CRASH-1",
    "seq": "CRASH-3",
    "again": "CRASH-4",
}
_PROBE = set_value(value("crash.probe", "k"), 1)


def _op_desc(ops: Sequence[FileOp], k: int) -> str:
    return ops[k].describe() if k < len(ops) else "end"


def _just_create() -> Workload:
    return Workload("create", (Step("create"),))


@functools.cache
def _created() -> Snapshot | None:
    """The model's Session right after its create: what creating it again must give."""
    return model_states(_just_create()).snapshots[1]


# -- exploring -------------------------------------------------------------------------------


@attrs.define
class WorkloadReport:
    name: str
    mode: str
    ops: int = 0
    states: int = 0
    #: Of ``states``: crashes inside the recovery of another crash state (CRASH-5).
    recovery_states: int = 0
    faults: int = 0
    failures: list[CrashFailure] = attrs.field(factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "ops": self.ops,
            "states": self.states,
            "recovery_states": self.recovery_states,
            "fault_runs": self.faults,
            "failures": len(self.failures),
            "seconds": round(self.seconds, 3),
        }


def jsonl_states(tr: Trace, mode: Mode, seed: int = 0) -> Iterator[CrashState]:
    """Every crash state of a JSONL trace, with this sweep's cut points."""
    return crash_states(
        tr.file_ops,
        tr.initial,
        mode,
        allowed_for(tr),
        seed,
        cuts=JSONL_CUTS,
        call_cuts_of=jsonl_call_cuts,
    )


def count_states(tr: Trace, mode: Mode, seed: int = 0) -> int:
    states = jsonl_states(tr, mode, seed)
    return sum(1 for _ in states)


class SandboxRound:
    """A round of the exploration loop (:mod:`scopecheck.crashsim.explore`) over a traced
    workload on the pyfakefs sandbox, judged by a checker that reopens a :class:`CrashState`
    and crashes each recovery itself (CRASH-5, CRASH-FS-5), so the loop has none to crash.
    Subclasses give the checker and the fault runs."""

    def __init__(self, tr: TracedOps, checker: StateChecker, images: Images, seed: int) -> None:
        self.ops = tr.file_ops
        self.acked_at = tr.acked_at
        self.base = tr.initial
        self.seed = seed
        self.checker = checker
        self._allowed = allowed_for(tr)
        self._images = images

    @property
    def states(self) -> int:
        return self.checker.states

    @property
    def recovery_states(self) -> int:
        return self.checker.recovery_states

    def images(self, volume: Volume, ops: Sequence[FileOp], k: int) -> Iterable[tuple[str, Image]]:
        return point_images(volume, ops, k, self.seed, self._images)

    def check(self, k: int, variant: str, image: Image) -> CrashFailure | None:
        return self.checker.check(CrashState(k, variant, image, self._allowed(k)))

    def recovers(self, variant: str, image: Image) -> bool:
        return False  # the checker crashes every recovery itself

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        return None

    def check_recovery(
        self, k: int, variant: str, recovery_ops: Sequence[FileOp], j: int, during: str,
        image: Image,
    ) -> CrashFailure | None:  # fmt: skip
        return None


class JsonlRound(SandboxRound):
    """One traced JSONL workload as a round: this sweep's images (more cuts per torn write
    and every byte of a record line in flight), checked by :class:`Checker`; its fault runs
    are :func:`fault_sweep`'s."""

    def __init__(
        self,
        tr: Trace,
        mode: Mode,
        repo_class: type[JsonlRepository],
        seed: int,
        *,
        recovery: bool = True,
        invariants: Callable[[Any, int], list[str]] | None = None,
    ) -> None:
        checker = Checker(tr, mode, repo_class, recovery=recovery, invariants=invariants, seed=seed)
        images = Images(power=mode == "unsynced", cuts=JSONL_CUTS, call_cuts_of=jsonl_call_cuts)
        super().__init__(tr, checker, images, seed)
        self.trace = tr
        self.repo_class = repo_class

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        runs, failures = fault_sweep(
            self.trace.workload, self.repo_class, deadline=deadline, start=start, limit=limit,
            at_least=at_least, seed=self.seed, tr=self.trace,
        )  # fmt: skip
        for failure in failures:
            findings.add(failure)
        return runs


def explore_workload(
    workload: Workload,
    *,
    mode: Mode = "unsynced",
    repo_class: type[JsonlRepository] = JsonlRepository,
    seed: int = 0,
    max_failures: int = 10,
    recovery: bool = True,
    faults: bool = True,
    on_state: Callable[[int], None] | None = None,
    deadline: float | None = None,
    invariants: Callable[[Any, int], list[str]] | None = None,
) -> WorkloadReport:
    """Check every crash state of ``workload`` in trace order (one pass of every crash point,
    in the exploration loop) and, with ``faults``, every single I/O fault, until
    ``max_failures`` failures or ``deadline``."""
    started = time.perf_counter()
    report = WorkloadReport(workload.name, mode)
    tr = trace(workload, repo_class)
    report.ops = len(tr.ops)
    rnd = JsonlRound(tr, mode, repo_class, seed, recovery=recovery, invariants=invariants)
    findings = Findings(max_failures)
    until = float("inf") if deadline is None else deadline
    check_passes(
        rnd, findings, until=until, first=False, passes=[crash_points(tr.file_ops)],
        on_state=None if on_state is None else lambda: on_state(rnd.states),
    )  # fmt: skip
    report.states = rnd.states
    report.recovery_states = rnd.recovery_states
    if faults and not findings.full and time.perf_counter() < until:
        report.faults = rnd.fault_runs(findings, until, start=0, limit=None, at_least=0)
    report.failures = findings.failures
    report.seconds = time.perf_counter() - started
    return report


# -- I/O faults without a crash ----------------------------------------------------------------


def fault_plan(tr: Trace) -> list[tuple[int, str]]:
    """``(recorded call, fault)`` for every fault each mutating call of a commit, reopen or
    delete step can have, in trace order."""
    return [
        (target, fault)
        for target, op in enumerate(tr.ops)
        if tr.workload.steps[op.step].op in ("commit", "reopen", "delete")
        for fault in faults_for(op.kind)
    ]


def fault_sweep(
    workload: Workload,
    repo_class: type[JsonlRepository] = JsonlRepository,
    *,
    deadline: float | None = None,
    start: int = 0,
    limit: int | None = None,
    at_least: int = 0,
    seed: int = 0,
    tr: Trace | None = None,
) -> tuple[int, list[CrashFailure]]:
    """Fail each mutating op of the commit, reopen and delete steps once, with each fault its
    kind can have (:func:`fault_plan` from its ``start``-th run, at most ``limit``), and run
    the workload on (CRASH-9..12) until ``deadline`` (at least ``at_least`` runs); returns
    (runs, failures)."""
    tr = trace(workload, repo_class) if tr is None else tr
    failures: list[CrashFailure] = []
    runs = 0
    plan = fault_plan(tr)[start:]
    for target, fault in plan if limit is None else plan[:limit]:
        if deadline is not None and time.perf_counter() > deadline and runs >= at_least:
            break
        runs += 1
        problem = _run_with_fault(workload, repo_class, OneFault(target, fault))
        if problem is not None:
            failures.append(_fault_failure(tr, target, fault, problem, seed))
    return runs, failures


def _fault_failure(
    tr: Trace, target: int, fault: str, problem: tuple[str, str, dict[str, bytes]], seed: int
) -> CrashFailure:
    rule, text, files = problem
    op = tr.ops[target]
    return CrashFailure(
        source="jsonl", rule=rule, problem=text, run="fault", kind=f"fault:{op.kind}:{fault}",
        seed=seed, workload=tr.workload.to_json(), point=target, variant=f"fault:{fault}",
        shown={"op": op.describe(), "files_after": show_files(files)},
    )  # fmt: skip


def _run_with_fault(
    workload: Workload, repo_class: type[JsonlRepository], fault: OneFault
) -> tuple[str, str, dict[str, bytes]] | None:
    box = Sandbox()
    clock = StepClock()
    fs = RecordingFs(box.fs, fault=fault)
    repo = repo_class(ROOT, fs, clock, cwd="/crash")
    model = ReferenceRepository()
    session: Any = None
    storage: Any = None
    for index, step in enumerate(workload.steps):
        clock.at(index)
        if step.op == "create":
            storage = repo.create(SESSION)
            session = model.create(SESSION)
        elif step.op == "delete":
            storage.close()
            try:
                repo.delete(SESSION)
            except StorageIOError:
                # Rejected deletion (000 §6.5): the Session is intact or gone, never changed;
                # the fault was transient, so deleting again finishes the job (CRASH-9).
                if SESSION in repo.list():
                    probe = repo.open(SESSION)
                    intact = probe.snapshot() == session.snapshot()
                    probe.close()
                    if not intact:
                        return "CRASH-9", "a failed delete left a changed Session", box.tree()
                    repo.delete(SESSION)
            if SESSION in repo.list():
                return "CRASH-9", "the Session is still listed after delete", box.tree()
            model.close_session(SESSION)
            model.delete(SESSION)
            storage = session = None
        elif step.op == "reopen":
            storage.close()
            try:
                storage = repo.open(SESSION)
            except StorageIOError:
                storage = repo.open(SESSION)  # the fault was transient
        elif step.op == "commit":
            hit_before = fault.hit
            try:
                try:
                    storage.commit(step.writes)
                except StorageIOError as exc:
                    if exc.code != "unusable" or fault.hit != hit_before:
                        raise
                    # The handle refused after an earlier failure (allowed): reopen, retry.
                    storage.close()
                    storage = repo.open(SESSION)
                    storage.commit(step.writes)
            except StorageIOError as exc:
                if fault.hit == "unlink":
                    return (
                        "CRASH-10",
                        f"a failed sidecar unlink rejected the commit: {exc}",
                        box.tree(),
                    )
                if fault.hit is None:
                    raise
                # The failed commit must be invisible on this handle, or the handle refuses.
                if _handle_matches(storage, session) is False:
                    return (
                        "CRASH-12",
                        "after a failed commit the handle is silently wrong",
                        box.tree(),
                    )
                continue
            except UsageError as exc:
                if exc.code in ("unknown_reference", "duplicate_id"):
                    continue  # depends on a transaction that failed: rejected on both sides
                raise
            try:
                session.commit(step.writes, BASE_TIME + 1000 * index)
            except UsageError:
                return "CRASH-12", "the backend acknowledged a commit the model rejects", box.tree()
            if storage.snapshot() != session.snapshot():
                return (
                    "CRASH-12",
                    "after the fault the handle's state differs from the model",
                    box.tree(),
                )
    if storage is not None:
        storage.close()
    # A clean reopen: every acknowledged commit, nothing of the failed ones (CRASH-11), and a
    # sidecar whose unlink failed is gone now (CRASH-10).
    clean = repo_class(ROOT, box.fs, clock, cwd="/crash")
    if session is None:
        return None
    try:
        reopened = clean.open(SESSION)
    except ScopecheckError as exc:
        return "CRASH-11", f"reopen after the fault failed: {exc.code}: {exc}", box.tree()
    got = reopened.snapshot()
    reopened.close()
    if got != session.snapshot():
        return (
            "CRASH-11",
            "after a clean reopen the state is not the acknowledged commits",
            box.tree(),
        )
    dead = dead_sidecars(box.tree())
    if dead:
        return "CRASH-10", f"retired sidecars still on disk after the next open: {dead}", box.tree()
    return None


def _handle_matches(storage: Any, session: Any) -> bool | None:
    """``True``/``False``: the handle reads the model's state or not; ``None``: unusable."""
    try:
        return bool(storage.snapshot() == session.snapshot())
    except ScopecheckError:
        return None


@attrs.frozen
class JsonlSource:
    """The rounds of :func:`explore_with_faults`: a generated workload per seed, traced on a
    pyfakefs sandbox."""

    repo_class: type[JsonlRepository] = JsonlRepository
    mode: Mode = "unsynced"

    @contextlib.contextmanager
    def round(self, seed: int, findings: Findings) -> Iterator[JsonlRound | None]:
        from scopecheck.crashsim.jsonl_workloads import generated

        workload = generated(seed, 6, reopen_every=4)
        yield JsonlRound(trace(workload, self.repo_class), self.mode, self.repo_class, seed)


def explore_with_faults(
    *,
    budget: float = 10.0,
    seed: int = 0,
    repo_class: type[JsonlRepository] = JsonlRepository,
    mode: Mode = "unsynced",
    max_failures: int = MAX_FAILURES,
) -> Exploration:
    """Crash exploration of fresh generated workloads for about ``budget`` seconds (the JSONL
    half of ``scopecheck fuzz``), through the exploration loop: crash states in coverage
    order, single I/O faults (CRASH-10..12) with their share, distinct failures kept."""
    return explore_rounds(
        JsonlSource(repo_class, mode), budget=budget, seed=seed, max_failures=max_failures
    )


# -- replay ----------------------------------------------------------------------------------


def render_files(title: str, files: dict[str, Any]) -> list[str]:
    lines = [f"{title}:"]
    if not files:
        lines.append("  (no files)")
    for path, data in sorted(files.items()):
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        lines.append(f"  {path}" + ("   (empty)" if not text else ""))
        for line in text.splitlines(keepends=True)[:12]:
            shown = line.rstrip("\n")
            lines.append(
                f"    | {shown[:160]}" + ("" if line.endswith("\n") else "   <- no newline")
            )
    return lines


def replay_record(
    record: dict[str, Any], repo_class: type[JsonlRepository] = JsonlRepository
) -> tuple[bool, str]:
    """Replay a crash reproducer of source ``jsonl``: (still failing, text).  A crash image is
    rebuilt by its name from a new trace of the workload (the recorded operations, when the
    backend makes them again: our backend is deterministic); a fault run reruns the workload
    with that call failing."""
    from scopecheck.crashsim.jsonl_workloads import workload_from_json

    try:
        failure = CrashFailure.from_json(record)
        workload = workload_from_json(failure.workload)
    except (BadReproducer, KeyError, TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"not a JSONL crash reproducer: {exc}") from None
    if failure.point is None:
        raise UsageError("invalid_payload", "a JSONL crash reproducer without its point")
    op_index, variant = failure.point, failure.variant
    head = f"replaying {failure.what}"
    if failure.run == "fault":
        problem = _run_with_fault(workload, repo_class, OneFault(op_index, variant[6:]))
        if problem is None:
            return False, f"{head}\nfault {variant[6:]} at op {op_index}: the workload now passes"
        rule, text, files = problem
        return True, "\n".join(
            [head, f"{rule}: {text}", *render_files("files on disk after the run", files)]
        )
    mode: Mode = "prefix" if failure.target.get("mode") == "prefix" else "unsynced"
    tr = trace(workload, repo_class)
    evidence = failure.evidence
    same = evidence is not None and evidence.ops == tr.file_ops
    checker = Checker(tr, mode, repo_class)
    crash = crash_state(tr.file_ops, tr.initial, op_index, variant, allowed_for(tr)(op_index))
    if crash is None:
        return False, (
            f"{head}\n{workload.name}: the trace has no crash state (op {op_index}, {variant}) "
            f"any more ({len(tr.file_ops)} ops); the recorded crash point is gone"
        )
    result = checker.check(crash)
    after = checker.box.tree()
    ops = tr.file_ops
    op = ops[op_index].describe() if op_index < len(ops) else "(end of trace)"
    lines = [
        head,
        "the backend makes the recorded operations again"
        if same
        else "the backend now makes other operations than the recorded ones",
        f"{workload.name}: crash at op {op_index} ({op}), {variant}, mode {mode}",
        *render_files(
            "files on disk after the crash (before recovery)", absolute(crash.state, ROOT)
        ),
        *render_files("files on disk after recovery (and one probe commit)", after),
    ]
    return replay_verdict(result, lines)


def replay_verdict(found: CrashFailure | None, lines: list[str]) -> tuple[bool, str]:
    """A crash-image replay's outcome: ``lines``, then the check that passed or what broke
    (the expected and recovered states)."""
    if found is None:
        return False, "\n".join([*lines, "recovered state is allowed; every check passes"])
    return True, "\n".join([
        *lines,
        f"FAILED {found.rule}: {found.problem}",
        f"expected one of: {orjson.dumps(found.shown.get('expected')).decode()}",
        f"recovered: {orjson.dumps(found.shown.get('recovered')).decode()}",
    ])  # fmt: skip


def trace_failure(
    source: str, tr: TracedOps, mode: str, seed: int, k: int, variant: str, rule: str,
    problem: str, *, recovery: tuple[int, str] | None = None,
    shown: dict[str, Any] | None = None, recovery_ops: Sequence[FileOp] = (),
) -> CrashFailure:  # fmt: skip
    """A failure of the crash image ``(k, variant)`` of a trace on the pyfakefs sandbox (and,
    with ``recovery_ops``, of a crash during its recovery), rerun in ``mode``."""
    return CrashFailure.of_image(
        source, rule, problem, seed=seed, workload=tr.workload.to_json(), point=k,
        variant=variant,
        evidence=Evidence(tr.file_ops, tr.initial, tr.acked_at, tuple(recovery_ops)),
        recovery=recovery, target={"mode": mode}, shown=shown,
    )  # fmt: skip
