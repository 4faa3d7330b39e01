"""The one fault checker: what a crash or power loss right after an I/O fault (or a kill) may
leave, judged the same way whatever ran the workload.

A source drives a faulted run its own way -- a factory over a pyfakefs sandbox with one
``FileSystem`` call failing (:mod:`scopecheck.crashsim.generic_faults`), a backend process
with one system call failing under strace or the FUSE layer, or killed
(``scopecheck.process.syscall_crash``), SQLite with one VFS call failing
(:mod:`scopecheck.crashsim.sqlite_sweep`) -- and knows which states the model allows at that
moment: every acknowledged step, nothing of a failed commit, a failed create or delete done
or not (CRASH-FS-9, CRASH-FS-11, CRASH-SQL-4).  What is the same for every source is here,
once:

* **the images** (:func:`fault_images`): the disk as the run left it (a process crash right
  then), and the power-loss images the one persistence model gives over the run's operations
  (CRASH-SYS-1).  An injected fsync failure is a ``syncfail`` there, so the writes it was to
  make durable are gone at power loss even if a retried fsync succeeds (CRASH-SYS-11): a
  backend that retries and acknowledges is caught on every path;
* **the judgement** (:func:`judge_images`): each image is reopened by the source's
  ``reopen`` and must hold one of the allowed states; which rule an image breaks depends on
  whether it is a power loss and whether it reopened at all (:class:`FaultRules`);
* **the words** (:func:`uncoded`, :func:`shown`): an I/O error that escaped as something other
  than a scopecheck error with a stable code, and a state as a report shows it.

A source adds its own checks around these (a handle read after a failed commit, a retry, the
JSONL sidecars), never a second copy of them.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs
import orjson

from scopecheck.crashsim.explore import NotJudged
from scopecheck.crashsim.persistence import (
    ANY_BYTE,
    POSIX,
    PROFILE_NAMES,
    Device,
    FileOp,
    Image,
    PathError,
    Profile,
    ProfiledVolume,
    profiled_volume,
)
from scopecheck.crashsim.recovery import ERROR_LIMIT, among, error_text, ours
from scopecheck.crashsim.sandbox import describe
from scopecheck.crashsim.shown import text
from scopecheck.models.records import Snapshot

_R = TypeVar("_R")

#: Torn power-loss images checked after a fault, besides ``strict``, ``data-kept``,
#: ``entries-kept`` and the ``only:``/``prefix:`` ones (each one is a reopen).
FAULT_TORN_IMAGES = 4

#: ``reopen(image)``: the Session a fresh open of ``image`` finds (``None``: no Session), or a
#: string saying why it could not be opened.
Reopen = Callable[[Image], Snapshot | str | None]


@attrs.frozen
class FaultProblem:
    """A fault or kill run broke ``rule``, as ``problem`` says; ``files`` are those of the
    disk or image that showed it."""

    rule: str
    problem: str
    files: dict[str, bytes] = attrs.field(factory=dict)
    #: It was a power-loss image that showed it, not the disk as the run left it.
    power_loss: bool = False
    #: For a power-loss image, the file-system profiles with a failing image (CRASH-SYS-15);
    #: empty: every profile.
    profiles: tuple[str, ...] = ()
    #: For an uncoded error, where it comes from (:func:`error_place`): what tells it apart
    #: from others of its rule, whatever fault it escaped on (CRASH-FS-12).
    place: str | None = None
    #: The state read holds a failed commit, and everything acknowledged: the failed commit
    #: reappeared, nothing acknowledged was lost (a failure's severity, CHECK-10).
    reappeared: bool = False
    #: The image whose reopen showed it, and the states that reopen was allowed to give
    #: (what a bundle reopens and compares with, INSTALL-24); ``None`` when the failure is in
    #: what the run's own steps answered, not in a reopen.
    image: Image | None = attrs.field(default=None, eq=False, repr=False)
    allowed: tuple[Snapshot | None, ...] = attrs.field(default=(), eq=False, repr=False)
    #: For a power-loss image, the disk it is a power loss of (the page cache then): what
    #: the story of the loss compares with.
    cache: Image | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class FaultRerun:
    """A fault or kill reproducer run once more, for its bundle (INSTALL-24): the rule it
    broke (``None``: it did not fail again, as ``why`` says), what the run did in the words a
    replay shows (its steps and what each got, the call the fault or kill hit, the files it
    left) and the disk it left."""

    problem: FaultProblem | None
    story: tuple[str, ...]
    disk: Image | None
    why: str = ""
    #: The run's operations on the files under the root, and where each step was
    #: acknowledged among them (``acked_at[i]``: operations done then; empty: not known).
    ops: tuple[FileOp, ...] = ()
    acked_at: tuple[int | None, ...] = ()


@attrs.frozen
class FaultImage:
    """One image judged after a fault: ``label`` says what it is in a report."""

    label: str
    image: Image
    power_loss: bool
    #: For a power-loss image, the file-system profiles that give it (CRASH-SYS-14).
    profiles: tuple[str, ...] = ()


@attrs.frozen
class FaultRules:
    """The rule an image breaks: ``wrong`` when the disk as left (a process crash) holds a
    state not allowed, ``lost`` when a power-loss image does; ``unopenable`` and
    ``unopenable_after_power_loss`` when the reopen itself failed."""

    wrong: str
    lost: str
    unopenable: str
    unopenable_after_power_loss: str

    @classmethod
    def one(cls, rule: str) -> FaultRules:
        """Every image breaks the same ``rule`` (the fault's step decides it)."""
        return cls(rule, rule, rule, rule)


def fault_images(
    disk: Image,
    ops: Sequence[FileOp],
    *,
    initial: Image | None = None,
    seed: str = "",
    limit: int = FAULT_TORN_IMAGES,
    device: Device = ANY_BYTE,
    disk_label: str = "a process crash",
    profiles: Sequence[Profile] = (POSIX,),
    unbuildable: Callable[[str], None] | None = None,
) -> list[FaultImage]:
    """``disk`` (what a process crash right now leaves), then the power-loss images of the
    persistence model over ``ops`` from ``initial``, each different from those before it
    on ``device`` (CRASH-SYS-1, CRASH-SYS-11); torn images are sampled down to ``limit`` with
    a generator seeded by ``seed``, so a replay rebuilds the same ones.  The power-loss images
    are those of every profile of ``profiles``, each distinct one once, saying which profiles
    give it (CRASH-SYS-14).

    An operation the volume cannot apply (:class:`PathError`: the trace and the model
    disagree) leaves only ``disk``, the one image read rather than built: ``unbuildable`` is
    told why (CRASH-SYS-17); without it the error propagates."""
    volume = profiled_volume(initial, profiles)
    found = [FaultImage(disk_label, disk, False)]
    for index, op in enumerate(ops):
        try:
            volume.apply(op)
        except PathError as exc:
            if unbuildable is None:
                raise
            unbuildable(
                f"the crash model cannot apply operation {index} of the run's trace "
                f"({op.describe()}: {exc}), so its power-loss images cannot be built"
            )
            return found
    seen = [disk]
    for variant, image in volume.power_images(
        random.Random(f"fault:{seed}"), limit=limit, device=device
    ):
        if image not in seen:
            seen.append(image)
            given = volume.profiles_of(image) if isinstance(volume, ProfiledVolume) else None
            names = given[1] if given is not None else (volume.profile.name,)
            found.append(FaultImage(f"power loss ({variant})", image, True, names))
    return found


def shown(state: Snapshot | str | None) -> str:
    """A state as a report shows it (a string is already why nothing could be read), bounded
    and escaped whatever the backend gave back (CRASH-FS-13)."""
    if isinstance(state, str):
        return text(state, 2 * ERROR_LIMIT)
    return orjson.dumps(describe(state)).decode()


#: A run of digits, or a hexadecimal address, in a message: not part of where an error comes from.
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")
#: An absolute path in a message.
_PATHS = re.compile(r"(?:/[^\s/'\"():,]+)+/?")


def error_place(exc: BaseException | str) -> str:
    """Where an uncoded error comes from, the same for every fault run it escapes in
    (CRASH-FS-12): its type and the innermost frame of its traceback outside scopecheck's own
    crash tooling (file name and function), or -- without a traceback, as a backend process
    reports it -- its text with paths and numbers left out."""
    if isinstance(exc, BaseException):
        tb, frame = exc.__traceback__, None
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if not os.path.abspath(name).startswith(_HERE + os.sep):
                frame = tb.tb_frame
            tb = tb.tb_next
        if frame is not None:
            code = frame.f_code
            return f"{type(exc).__name__} at {os.path.basename(code.co_filename)}:{code.co_name}"
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = exc
    return _NUMBERS.sub("N", _PATHS.sub("<path>", text)).strip()[:200]


_HERE = os.path.dirname(os.path.abspath(__file__))


def uncoded(what: str, fault: str, exc: BaseException | str) -> str:
    """The words for an I/O error that escaped the backend as something other than a
    scopecheck error with a stable code (CRASH-FS-9)."""
    said = exc if isinstance(exc, str) else error_text(exc)
    return (
        f"{what} failed on the injected {fault} with {said}: not a scopecheck error with a "
        "stable code (wrap OSError as StorageIOError, code io_error)"
    )


def judge_images(
    reopen: Reopen,
    images: Sequence[FaultImage],
    allowed: Sequence[Snapshot | None],
    rules: FaultRules,
    what: str,
    *,
    hint: Callable[[FaultImage], str] = lambda _: "",
    errors: tuple[type[BaseException], ...] = (Exception,),
    reappears: Sequence[Snapshot | None] = (),
) -> FaultProblem | None:
    """Reopen each of ``images`` (:func:`fault_images`) with ``reopen``; the first that does
    not open, or opens to a state not in ``allowed``, is the problem (its rule from
    ``rules``), with ``what`` saying what the image is right after and ``hint(image)`` what
    to do.  ``errors`` raised by the reopen are the backend's failing to open; an error of our
    own tooling propagates (:func:`~scopecheck.crashsim.recovery.ours`).  A problem of a
    power-loss image says under which profiles it happens: the later power-loss images of
    profiles it does not name yet are judged too, and those failing the same rule add theirs
    (CRASH-SYS-15) -- the images are all of one crash point, the end of the run.  A state
    among ``reappears`` (the allowed ones with a failed commit kept) is a failed commit that
    reappeared (:attr:`FaultProblem.reappeared`)."""
    found = judge_blind(
        reopen, images, allowed, rules, what, hint=hint, errors=errors, reappears=reappears
    )
    assert not isinstance(found, NotJudged)  # no file is blind without ``blind``
    return found


def judge_blind(
    reopen: Reopen,
    images: Sequence[FaultImage],
    allowed: Sequence[Snapshot | None],
    rules: FaultRules,
    what: str,
    *,
    hint: Callable[[FaultImage], str] = lambda _: "",
    errors: tuple[type[BaseException], ...] = (Exception,),
    blind: Mapping[str, str] | None = None,
    reappears: Sequence[Snapshot | None] = (),
) -> FaultProblem | NotJudged | None:
    """:func:`judge_images` for a run whose trace cannot see the contents of the files
    ``blind`` (path -> how they are written, CRASH-SYS-8): a built image holding one of them
    is judged with its contents as the disk the run left holds them (the first image, read,
    not built:
    every write through a mapping may have reached the disk before the power loss), or, for
    a file the disk no longer holds, only when its failure does not depend on that file
    (:func:`blind_verdict`); otherwise no failure comes of it, and when nothing else failed
    the run is :class:`NotJudged` (CRASH-SYS-17)."""
    blind = blind or {}
    disk = images[0].image if images else None

    def one(image: FaultImage) -> FaultProblem | NotJudged | None:
        hidden = [path for path in blind if path in image.image.files and image.power_loss]
        if not hidden:
            return _judge(reopen, image, allowed, rules, what, hint, errors, reappears)
        real = disk if disk is not None and all(p in disk.files for p in hidden) else None
        return blind_verdict(
            lambda built: _judge(reopen, attrs.evolve(image, image=built), allowed, rules, what,
                                 hint, errors, reappears),
            image.image, {path: blind[path] for path in hidden}, real,
            lambda a, b: (a.rule, a.problem) == (b.rule, b.problem),
        )  # fmt: skip

    unjudged: NotJudged | None = None
    found: FaultProblem | None = None
    for image in images:
        result = one(image)
        if isinstance(result, NotJudged):
            unjudged = unjudged or result
        elif result is not None:
            found = result
            break
    if found is None:
        return unjudged
    if not found.power_loss:
        return found
    # posix is the weakest profile: an image another profile admits is a posix state too
    # (CRASH-SYS-14), so posix is always among a power-loss problem's profiles.
    failing = {*found.profiles, POSIX.name}
    for image in images:
        if not image.power_loss or set(image.profiles) <= failing:
            continue
        again = one(image)
        if isinstance(again, FaultProblem) and again.rule == found.rule:
            failing.update(image.profiles)
    return attrs.evolve(found, profiles=tuple(n for n in PROFILE_NAMES if n in failing), cache=disk)


#: Each byte inverted: the other contents a blind file is tried with.
_INVERT = bytes(255 - b for b in range(256))
#: The contents tried for a blind file the trace shows empty.
_FILLED = b"\xff" * 4096


def blind_verdict(
    judge: Callable[[Image], _R | None],
    image: Image,
    hidden: Mapping[str, str],
    real: Image | None,
    same: Callable[[_R, _R], bool],
    *,
    failed: _R | None = None,
    later: Mapping[str, bytes] | None = None,
) -> _R | NotJudged | None:
    """The judgement of ``image``, built with the files ``hidden`` (path -> how they are
    written: ``written through a shared mapping``) as the trace shows them, though the trace
    cannot see what was written into them (CRASH-SYS-8).  With ``real`` (a disk read at the
    same moment), those files take its contents and that image is judged: a real state.
    Without it, a failure stands only if it does not depend on them: ``image`` fails the
    same way (``same``) with each of them removed, with its bytes inverted, and with the
    contents it had later in the run (``later``, path -> bytes, where known: real data, which
    a store that keeps its data there would not ignore) -- a lock file or a shared-memory
    index the store rebuilds on open.  Otherwise it is :class:`NotJudged`, never a failure
    (CRASH-SYS-17).  ``failed``: what ``judge(image)`` gave already, a failure."""
    if real is not None:
        files = dict(image.files)
        for path in hidden:
            files[path] = real.files[path]
        return judge(attrs.evolve(image, files=files))
    first = judge(image) if failed is None else failed
    if first is None:
        return None
    removed = {p: d for p, d in image.files.items() if p not in hidden}
    inverted = dict(image.files)
    for path in hidden:
        data = image.files[path]
        inverted[path] = data.translate(_INVERT) if data else _FILLED
    others = [removed, inverted]
    known = {path: data for path, data in (later or {}).items() if path in hidden}
    if known:
        others.append({**image.files, **known})
    for files in others:
        again = judge(attrs.evolve(image, files=files))
        if again is None or not same(first, again):
            names = [f"<root>/{path}" for path in hidden]
            how = " and ".join(dict.fromkeys(hidden.values()))
            return NotJudged(
                f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} {how}, and the "
                "failure depends on contents the trace cannot see"
            )
    return first


def _judge(
    reopen: Reopen,
    image: FaultImage,
    allowed: Sequence[Snapshot | None],
    rules: FaultRules,
    what: str,
    hint: Callable[[FaultImage], str],
    errors: tuple[type[BaseException], ...],
    reappears: Sequence[Snapshot | None] = (),
) -> FaultProblem | None:
    try:
        got = reopen(image.image)
    except errors as exc:
        if ours(exc):
            raise
        got = f"reopening raised {error_text(exc)}"
    if isinstance(got, str):
        rule = rules.unopenable_after_power_loss if image.power_loss else rules.unopenable
        return FaultProblem(
            rule,
            f"{image.label} right after {what}: {got}{hint(image)}",
            dict(image.image.files),
            image.power_loss,
            image.profiles,
            image=image.image,
            allowed=tuple(allowed),
        )
    if among(got, allowed) is None:
        return FaultProblem(
            rules.lost if image.power_loss else rules.wrong,
            f"{image.label} right after {what} reopens to {shown(got)}, not the "
            f"acknowledged state {' or '.join(shown(s) for s in allowed)}{hint(image)}",
            dict(image.image.files),
            image.power_loss,
            image.profiles,
            reappeared=among(got, reappears) is not None,
            image=image.image,
            allowed=tuple(allowed),
        )
    return None
