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

import random
from collections.abc import Callable, Sequence

import attrs
import orjson

from scopecheck.crashsim.persistence import (
    ANY_BYTE,
    POSIX,
    PROFILE_NAMES,
    Device,
    FileOp,
    Image,
    Profile,
    ProfiledVolume,
    profiled_volume,
)
from scopecheck.crashsim.recovery import ERROR_LIMIT, among, error_text, ours
from scopecheck.crashsim.sandbox import describe
from scopecheck.crashsim.shown import text
from scopecheck.models.records import Snapshot

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
) -> list[FaultImage]:
    """``disk`` (what a process crash right now leaves), then the power-loss images of the
    persistence model over ``ops`` from ``initial``, each different from those before it
    on ``device`` (CRASH-SYS-1, CRASH-SYS-11); torn images are sampled down to ``limit`` with
    a generator seeded by ``seed``, so a replay rebuilds the same ones.  The power-loss images
    are those of every profile of ``profiles``, each distinct one once, saying which profiles
    give it (CRASH-SYS-14)."""
    volume = profiled_volume(initial, profiles)
    for op in ops:
        volume.apply(op)
    found = [FaultImage(disk_label, disk, False)]
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
) -> FaultProblem | None:
    """Reopen each of ``images`` (:func:`fault_images`) with ``reopen``; the first that does
    not open, or opens to a state not in ``allowed``, is the problem (its rule from
    ``rules``), with ``what`` saying what the image is right after and ``hint(image)`` what
    to do.  ``errors`` raised by the reopen are the backend's failing to open; an error of our
    own tooling propagates (:func:`~scopecheck.crashsim.recovery.ours`).  A problem of a
    power-loss image says under which profiles it happens: the later power-loss images of
    profiles it does not name yet are judged too (CRASH-SYS-15)."""
    found = _judge(reopen, images, allowed, rules, what, hint, errors)
    if found is None or not found.power_loss:
        return found
    # posix is the weakest profile: an image another profile admits is a posix state too
    # (CRASH-SYS-14), so posix is always among a power-loss problem's profiles.
    failing = {*found.profiles, POSIX.name}
    for image in images:
        if not image.power_loss or set(image.profiles) <= failing:
            continue
        if _judge(reopen, [image], allowed, rules, what, hint, errors) is not None:
            failing.update(image.profiles)
    return attrs.evolve(found, profiles=tuple(n for n in PROFILE_NAMES if n in failing))


def _judge(
    reopen: Reopen,
    images: Sequence[FaultImage],
    allowed: Sequence[Snapshot | None],
    rules: FaultRules,
    what: str,
    hint: Callable[[FaultImage], str],
    errors: tuple[type[BaseException], ...],
) -> FaultProblem | None:
    for image in images:
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
            )
        if among(got, allowed) is None:
            return FaultProblem(
                rules.lost if image.power_loss else rules.wrong,
                f"{image.label} right after {what} reopens to {shown(got)}, not the "
                f"acknowledged state {' or '.join(shown(s) for s in allowed)}{hint(image)}",
                dict(image.image.files),
                image.power_loss,
                image.profiles,
            )
    return None
