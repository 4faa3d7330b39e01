"""The one exploration loop every source of crash states runs through.

A *source* (the system calls of a process, the ``FileSystem`` calls of a factory, the SQLite
VFS, the JSONL sweep) records a workload as the persistence model's operations and knows how
to reopen an image and judge it; everything else is here, once:

* **rounds** (:func:`explore`): a fresh seeded workload per round until the budget is spent;
  each round's crash states get :attr:`Plan.state_share` of what is left, its fault and kill
  runs the rest, and a few fault runs come right after the priority passes so a fault-only
  bug is found as early as a crash-only one (CRASH-COV-4);
* **crash points in coverage order** (:func:`check_passes`, CRASH-COV-1): after every
  acknowledgement, before it, around syncs, renames and unlinks, then the rest spread by
  bit reversal; the first round's first pass runs to its end even past the budget, by at most
  an ``overrun`` (CRASH-COV-2), and :class:`~scopecheck.crashsim.coverage.CrashCoverage` says
  what was covered;
* **the images of a crash point** (:func:`point_images`): the process crash, the write in
  flight torn at a process crash, and the power-loss images of the device;
* **crashing recovery** (:func:`crash_recoveries`): images whose reopen writes are reopened
  once under the recorder, and crashed at :data:`RECOVERY_POINTS` of that reopen's crash
  points, taken in coverage order (CRASH-FS-5, CRASH-SQL-9);
* **distinct failures** (:class:`Findings`): a failure does not end the search; the first of
  each rule and kind is kept, up to a maximum (CRASH-COV-4).
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import attrs

from scopecheck.crashsim.coverage import (
    CrashCoverage,
    acknowledgement_points,
    crash_points,
    ordered_passes,
)
from scopecheck.crashsim.failure import CrashFailure
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
    Volume,
    call_cuts,
    profiled_volume,
)
from scopecheck.crashsim.points import ProcessCrash, Torn, Variant
from scopecheck.crashsim.shards import Shard, Units, workload_digest
from scopecheck.crashsim.story import with_lost

#: Distinct failures (by rule and kind) an exploration keeps before it looks only for rules
#: not yet found (CRASH-COV-6).
MAX_FAILURES = 8
#: Failures that end the search, and why: a backend that broke the process protocol answers
#: nothing a crash rule can be judged on after that -- it is one failure, said once (PROC-2).
STOPPING = {
    "PROC-2": "the backend broke the process protocol (PROC-2), and nothing it answers after "
    "that can be judged"
}
#: A crash during recovery is tried at this many of the recovery's crash points, in coverage
#: order (its end and around its syncs, renames and unlinks first): where a repair lands.
RECOVERY_POINTS = 16
#: How long the first pass over a source's states after every acknowledgement may run past
#: the budget before the phase is left incomplete (CRASH-COV-2); a caller bound by wall time
#: (``validate``) passes less.
OVERRUN = 30.0
#: Fault runs made right after the priority passes of a round (the first round always).
EARLY_FAULT_RUNS = 3
#: Recoveries crashed by a fixed amount of work (``explore`` with an infinite budget).
FIXED_RECOVERIES = 8


# -- the images of one crash point ----------------------------------------------------------


def point_rng(seed: int, k: int) -> random.Random:
    """The generator of one crash point's power-loss samples: seeded by the point alone, so a
    point gives the same images in whatever order the points are visited."""
    return random.Random(f"{seed}:{k}")


def call_rng(seed: int, k: int) -> random.Random:
    """The generator of the cut points of the write in flight at crash point ``k``."""
    return random.Random(f"{seed}:{k}:call")


@attrs.frozen
class Images:
    """Which images a crash point gives (CRASH-SYS-1, CRASH-SYS-12): the device; whether
    power loss is crashed at all (``power``: no, for a sweep of process crashes only); at
    most ``torn`` torn unsynced writes, each cut at its first, middle and last byte and
    ``cuts`` sampled bytes; and the cut points of a write in flight at a process crash
    (``call_cuts_of``, ``None``: no such image).  ``unread`` names the files no reopen
    reads: each is torn once (CRASH-SYS-19)."""

    device: Device = ANY_BYTE
    power: bool = True
    torn: int = 64
    cuts: int = 3
    call_cuts_of: Callable[[bytes, random.Random], list[int]] | None = call_cuts
    unread: Callable[[str], bool] | None = None


def point_images(
    volume: Volume, ops: Sequence[FileOp], k: int, seed: int, images: Images = Images()
) -> Iterator[tuple[Variant, Image]]:
    """The images of a crash before ``ops[k]`` (``volume`` holds ``ops[:k]`` applied), as
    ``(variant, image)``: the process crash, the write ``ops[k]`` torn in flight, and the
    power losses that differ from the process crash; a file ``images.unread`` names is torn
    once (CRASH-SYS-19).  Every variant rebuilds its image
    (:func:`~scopecheck.crashsim.persistence.power_image`)."""
    process = volume.process_image()
    yield ProcessCrash(), process
    if images.call_cuts_of is not None and k < len(ops) and ops[k].kind == "write":
        cuts = images.call_cuts_of(ops[k].data, call_rng(seed, k))
        tears = list(volume.torn_calls(ops[k], cuts))
        if tears and images.unread is not None and images.unread(tears[0][0].path):
            tears = [tears[len(tears) // 2]]  # CRASH-SYS-19
        yield from tears
    if images.power:
        lost = volume.power_images(
            point_rng(seed, k), images.cuts, device=images.device, limit=images.torn,
            unread=images.unread,
        )  # fmt: skip
        for variant, image in lost:
            if image != process:
                yield variant, image


def with_profiles(
    failure: CrashFailure, volume: Volume, variant: Variant, image: Image
) -> CrashFailure:
    """``failure`` of ``image`` -- the crash ``variant`` at the point ``volume`` stands at --
    saying under which file-system profiles it happens (CRASH-SYS-15): for a power-loss image,
    every profile whose images of the point include it, and the one that builds it; a
    process crash happens under every profile alike."""
    if not variant.power_loss or failure.rule in STOPPING:  # the wire fails under every one
        return failure
    given = volume.profiles_of(image) if isinstance(volume, ProfiledVolume) else None
    built, names = given if given is not None else (volume.profile.name, (volume.profile.name,))
    # posix is the weakest profile: every image a stronger one admits is a posix state too,
    # though posix's own sample of the point's images may not hold it (CRASH-SYS-14).
    names = tuple(n for n in PROFILE_NAMES if n in {*names, POSIX.name})
    return attrs.evolve(failure, profiles=names, built_under=built)


# -- distinct failures ---------------------------------------------------------------------


@attrs.frozen
class NotJudged:
    """A crash image a source could not judge, and why (CRASH-SYS-17): it was built from a
    file whose contents the trace cannot see (a shared writable mapping) and its failure
    depends on them, or from a trace missing a call (a line the reader could not read).  It is
    never a failure; the loop counts its crash point as not judgeable."""

    why: str


def _profiles_union(profiles: Iterable[str]) -> tuple[str, ...]:
    names = set(profiles)
    return tuple(n for n in PROFILE_NAMES if n in names)


@attrs.define
class Findings:
    """The failures an exploration keeps: the first of each rule and kind (CRASH-COV-4), up
    to ``limit``; what it could not judge (limits, each said once); and the crash points,
    recovery states and fault runs it could not judge, by why (CRASH-SYS-17).

    Only failures of images posix builds count towards ``limit`` (every failure of a process
    crash, a fault run or a posix image): the images another profile adds (CRASH-SYS-14) are
    kept beside them, up to ``limit`` more per other profile, so the profiles never end a
    search sooner than posix alone would, nor let it run unbounded (CRASH-SYS-15).

    Reaching ``limit`` (:attr:`full`) does not end the search when ``keep_looking`` (as
    :func:`explore` asks): from then on only a failure of a rule none of the kept ones broke
    is kept, so the cap never hides a rule (CRASH-COV-6); without it (a sweep that wants its
    first failures) the search stops there."""

    limit: int = MAX_FAILURES
    failures: list[CrashFailure] = attrs.field(factory=list)
    limits: list[str] = attrs.field(factory=list)
    #: How many profiles the images come from: the bound on all failures kept is
    #: ``limit * profiles``.
    profiles: int = 1
    keep_looking: bool = False
    #: What could not be judged: why -> {"crash points": n, "recovery states": n,
    #: "fault runs": n} (CRASH-SYS-17).
    unjudged: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: How many failures were kept when :attr:`full` was first reached (``None``: never).
    capped_at: int | None = None
    #: Fault and kill runs a source tried but dropped, not judged (CRASH-COV-3).
    runs_dropped: int = 0
    #: Why the search ended before its work: a failure of a rule in :data:`STOPPING` was kept.
    stopped: str | None = None
    #: When the first failure was kept (``time.perf_counter()``; ``None``: none yet).
    first_at: float | None = None

    @property
    def full(self) -> bool:
        counted = [f for f in self.failures if not f.profiles or f.built_under == POSIX.name]
        return len(counted) >= self.limit or len(self.failures) >= self.limit * self.profiles

    @property
    def done(self) -> bool:
        """Whether the search stops: the cap is reached and nothing more is looked for, or a
        failure ended it (:attr:`stopped`)."""
        return (self.full and not self.keep_looking) or self.stopped is not None

    def known(self, key: tuple[str, str]) -> bool:
        return any(failure.key == key for failure in self.failures)

    @property
    def rules(self) -> set[str]:
        return {failure.rule for failure in self.failures}

    def wanted(self, failure: CrashFailure) -> bool:
        """Whether :meth:`add` would keep ``failure`` (a source confirms only those)."""
        same = [kept for kept in self.failures if kept.key == failure.key]
        if same:
            return self._adds_profiles(same, failure)
        return not self.full or failure.rule not in self.rules

    @staticmethod
    def _adds_profiles(same: Sequence[CrashFailure], failure: CrashFailure) -> bool:
        """A failure of a kept rule and kind is kept only when it happens under a profile
        none of them does: each failure says the profiles of its own crash point
        (CRASH-SYS-15), and a ``--fs-profile`` verdict still sees one of its kind."""
        if not failure.profiles or any(not kept.profiles for kept in same):
            return False
        covered = {name for kept in same for name in kept.profiles}
        return not set(failure.profiles) <= covered

    def add(self, failure: CrashFailure) -> bool:
        """Keep ``failure`` unless one of its rule and kind is kept already under its profiles
        (or enough are kept, and its rule is among theirs)."""
        if not self.wanted(failure):
            return False
        if len(self.failures) >= self.limit * self.profiles and failure.rule in self.rules:
            return False
        self.failures.append(with_lost(failure))
        if self.first_at is None:
            self.first_at = time.perf_counter()
        if self.full and self.capped_at is None:
            self.capped_at = len(self.failures)
        if failure.rule in STOPPING:
            self.stopped = STOPPING[failure.rule]
        return True

    def merge(self, failure: CrashFailure) -> bool:
        """Add the profiles of ``failure`` -- a power-loss image of a crash point -- to a kept
        failure of the same rule at the same crash point, if there is one: a failure says every
        profile under which its own crash point has a failing image (CRASH-SYS-15)."""
        index = self._joined(failure) if failure.profiles else None
        if index is None:
            return False
        kept = self.failures[index]
        union = _profiles_union((*kept.profiles, *failure.profiles))
        self.failures[index] = attrs.evolve(kept, profiles=union)
        return True

    def joins(self, failure: CrashFailure, variant: Variant) -> bool:
        """Whether ``failure`` of the crash ``variant``, before its profiles are known, will
        only add them to a kept failure (:meth:`merge`): a source need not confirm it."""
        profiled = variant.power_loss and failure.rule not in STOPPING  # :func:`with_profiles`
        return profiled and self._joined(failure) is not None

    def _joined(self, failure: CrashFailure) -> int | None:
        """The kept failure a power-loss ``failure`` of a crash point joins: its rule at its
        point, with profiles, from the same seed."""
        if failure.run != "crash":
            return None
        for index, kept in enumerate(self.failures):
            same = (kept.run, kept.rule, kept.point) == ("crash", failure.rule, failure.point)
            if same and kept.profiles and kept.seed == failure.seed:
                return index
        return None

    def limited(self, text: str) -> None:
        if text not in self.limits:
            self.limits.append(text)

    def not_judged(self, why: str, what: str = "crash points", count: int = 1) -> None:
        """``count`` crash points (or recovery states, or fault runs) could not be judged, for
        ``why`` (CRASH-SYS-17)."""
        counts = self.unjudged.setdefault(why, {})
        counts[what] = counts.get(what, 0) + count

    def unjudged_texts(self) -> list[str]:
        """What could not be judged, one line per why (CRASH-SYS-17)."""
        found = []
        for why, counts in self.unjudged.items():
            said = ", ".join(f"{n:,} {what}" for what, n in counts.items() if n)
            found.append(f"not judgeable: {said}: {why} (CRASH-SYS-17)")
        return found


# -- one recorded workload -----------------------------------------------------------------


class Round(Protocol):
    """One recorded workload of a source, ready to be crashed.  ``states`` counts every
    image it judged, ``recovery_states`` those that were crashes during a recovery."""

    @property
    def ops(self) -> Sequence[FileOp]: ...
    @property
    def acked_at(self) -> Sequence[int | None]: ...
    @property
    def base(self) -> Image: ...
    @property
    def seed(self) -> int: ...
    @property
    def states(self) -> int: ...
    @property
    def recovery_states(self) -> int: ...

    def images(
        self, volume: Volume, ops: Sequence[FileOp], k: int
    ) -> Iterable[tuple[Variant, Image]]:
        """The images of a crash before ``ops[k]`` -- the round's operations, or a recovery's
        -- with ``volume`` holding ``ops[:k]`` applied (usually :func:`point_images`)."""

    def check(self, k: int, variant: Variant, image: Image) -> CrashFailure | NotJudged | None:
        """Reopen ``image`` -- the crash ``variant`` before ``ops[k]`` -- and judge it (a
        failure names the variant by its name); :class:`NotJudged` when the image cannot be
        judged (CRASH-SYS-17)."""

    def recovers(self, variant: Variant, image: Image) -> bool:
        """Whether reopening ``image`` (which passed its check) is worth crashing."""

    def record_recovery(self, image: Image) -> Sequence[FileOp] | None:
        """The operations of reopening ``image``, recorded; ``None`` if that is not possible."""

    def check_recovery(
        self, k: int, variant: Variant, recovery_ops: Sequence[FileOp], j: int,
        during: Variant, image: Image,
    ) -> CrashFailure | NotJudged | None:  # fmt: skip
        """Judge ``image``: a crash before ``recovery_ops[j]`` while image ``(k, variant)``
        was being recovered."""

    def fault_runs(
        self, findings: Findings, deadline: float, *, start: int, limit: int | None,
        at_least: int,
    ) -> int:  # fmt: skip
        """Make the round's fault (and kill) runs ``start`` .. ``start + limit`` until
        ``deadline`` (at least ``at_least`` of them); the number made."""

    @property
    def fault_plan_size(self) -> int:
        """How many fault (and kill) runs the round's plan holds: the indices ``fault_runs``
        takes are ``0 .. fault_plan_size - 1``."""


def priority_passes(passes: Sequence[Sequence[int]]) -> Sequence[Sequence[int]]:
    """The passes checked before the recoveries are crashed -- after, before and around the
    acknowledgements and syncs (at most the first three): all a fixed exploration checks."""
    return passes[: min(2, len(passes) - 1) + 1]


def check_passes(
    rnd: Round,
    findings: Findings,
    *,
    until: float,
    first: bool,
    overrun: float = OVERRUN,
    recovery_share: float = 0.2,
    after_priority: Callable[[], None] | None = None,
    on_state: Callable[[], None] | None = None,
    passes: Sequence[Sequence[int]] | None = None,
    fixed: bool = False,
    profiles: Sequence[Profile] = (POSIX,),
    shard: Shard | None = None,
    checked: set[int] | None = None,
) -> CrashCoverage:
    """Check ``rnd``'s crash points pass by pass (:func:`ordered_passes`, CRASH-COV-1) until
    ``until``; after the priority passes (after, before and around acknowledgements and
    syncs) crash the recovery of the images worth it for ``recovery_share`` of the time left,
    then call ``after_priority``.  The first round's first pass runs to its end however small
    the budget, unless it takes ``overrun`` seconds more (then the phase is incomplete,
    CRASH-COV-2).  A later round that did not finish its first pass counts its states only:
    its acknowledged steps are not claimed either way.  ``fixed``: the priority passes and
    :data:`FIXED_RECOVERIES` recoveries, whatever the clock says.  The images of each point
    are those of every profile of ``profiles``, each distinct image checked once, and a
    failure says under which profiles it happens (:func:`with_profiles`, CRASH-SYS-14,
    CRASH-SYS-15); the recovery of an image the first profile gives is crashed under that
    profile.  With ``shard``, only the points it owns by their position in the passes
    (FLEET-4), and the coverage counts those alone.  What was covered; ``checked`` is
    given the points checked."""
    points = crash_points(rnd.ops)
    after_ack = acknowledgement_points(points, rnd.acked_at)
    if passes is None:
        passes = ordered_passes(rnd.ops, rnd.acked_at)
    recover_after = len(priority_passes(passes)) - 1
    acked_elsewhere = 0
    if shard is not None:
        order = itertools.chain.from_iterable(passes)
        owned = {k for position, k in enumerate(order) if shard.owns(position)}
        passes = [[k for k in pass_points if k in owned] for pass_points in passes]
        points = [k for k in points if k in owned]
        acked_elsewhere = sum(1 for k in after_ack if k not in owned)
        after_ack = [k for k in after_ack if k in owned]
    checked = set() if checked is None else checked
    states_before, recovery_before = rnd.states, rnd.recovery_states
    candidates: list[tuple[int, Variant, Image]] = []
    unjudged: set[int] = set()
    stopped = priority_done = False
    for number, pass_points in enumerate(passes):
        if fixed and number > recover_after:
            break
        stop_at = until + overrun if first and number == 0 else until
        volume = profiled_volume(rnd.base, profiles)
        done = 0
        broken: str | None = None
        for k in pass_points:
            if findings.done or (not fixed and time.perf_counter() >= stop_at):
                stopped = True
                break
            if broken is None:
                broken, done = _advance(volume, rnd.ops, done, k)
            if broken is not None:  # the model cannot hold the operations up to k
                findings.not_judged(broken)
                unjudged.add(k)
                checked.add(k)
                continue
            why = _check_point(rnd, findings, volume, k, number <= recover_after, candidates,
                               on_state)  # fmt: skip
            if why is not None:
                findings.not_judged(why)
                unjudged.add(k)
            checked.add(k)
        if stopped:
            break
        priority_done = True
        if number == recover_after:
            if candidates:
                now = time.perf_counter()
                crash_recoveries(
                    rnd, candidates[:FIXED_RECOVERIES] if fixed else candidates, findings,
                    until=math.inf if fixed else now + max(0.0, until - now) * recovery_share,
                    at_least=1 if first else 0, seed=rnd.seed,
                )  # fmt: skip
            if after_priority is not None:
                after_priority()
                after_priority = None
    if after_priority is not None:  # the passes were cut short: the early runs still happen
        after_priority()
    counted = first or priority_done
    judged = checked - unjudged
    return CrashCoverage(
        points_checked=len(checked) if counted else 0,
        points_total=len(points) if counted else 0,
        states_checked=rnd.states - states_before,
        acked_covered=sum(1 for k in after_ack if k in judged) if counted else 0,
        acked_total=len(after_ack) if counted else 0,
        acked_elsewhere=acked_elsewhere if counted else 0,
        recovery_states=rnd.recovery_states - recovery_before,
        points_unjudged=len(unjudged & checked) if counted else 0,
    )


def _advance(volume: Volume, ops: Sequence[FileOp], done: int, k: int) -> tuple[str | None, int]:
    """Apply ``ops[done:k]`` to ``volume``; ``(None, k)``, or -- when an operation names a path
    the volume does not hold (the trace and the model disagree, :class:`PathError`) -- why
    no image past it can be built, and where it stopped (CRASH-SYS-17)."""
    while done < k:
        try:
            volume.apply(ops[done])
        except PathError as exc:
            return (
                f"the crash model cannot apply operation {done} of the trace "
                f"({ops[done].describe()}: {exc}), so no image after it can be built"
            ), done
        done += 1
    return None, done


def _check_point(
    rnd: Round,
    findings: Findings,
    volume: Volume,
    k: int,
    priority: bool,
    candidates: list[tuple[int, Variant, Image]],
    on_state: Callable[[], None] | None,
) -> str | None:
    """Judge every image of crash point ``k`` (``volume`` holds ``ops[:k]``), keeping its
    failures and, in the priority passes, the images whose recovery is worth crashing; why
    one of them could not be judged, if one could not (CRASH-SYS-17)."""
    why: str | None = None
    for variant, image in rnd.images(volume, rnd.ops, k):
        result = rnd.check(k, variant, image)
        if isinstance(result, NotJudged):
            why = why or result.why
        elif result is not None:
            failure = with_profiles(result, volume, variant, image)
            if not findings.merge(failure):
                findings.add(failure)
            if findings.done:
                break
        elif (
            priority
            and rnd.recovers(variant, image)
            and _first_profile_gives(volume, variant, image)
        ):
            candidates.append((k, variant, image))
        if on_state is not None:
            on_state()
    return why


def _first_profile_gives(volume: Volume, variant: Variant, image: Image) -> bool:
    """Whether the first profile's images include ``image``: a recovery is crashed under it,
    so its replay rebuilds the image by the variant alone."""
    if not variant.power_loss or not isinstance(volume, ProfiledVolume):
        return True
    given = volume.profiles_of(image)
    return given is None or given[0] == volume.profile.name


def _recovery_rank(variant: Variant) -> int:
    """The order recoveries are crashed in: torn power-loss images first (their recovery
    repairs the most), then the other power losses, then process crashes."""
    if isinstance(variant, Torn):
        return 0
    return 1 if variant.power_loss else 2


def crash_recoveries(
    rnd: Round,
    candidates: Sequence[tuple[int, Variant, Image]],
    findings: Findings,
    *,
    until: float,
    at_least: int,
    seed: int = 0,
    points: int = RECOVERY_POINTS,
) -> None:
    """Record the recovery of candidate images -- torn first, each kind in a seeded order --
    and crash it at ``points`` of its crash points, taken in coverage order (CRASH-FS-5,
    CRASH-SQL-9); stop at the first failure of a recovery."""
    rng = random.Random(seed)
    order = sorted(candidates, key=lambda c: (_recovery_rank(c[1]), rng.random()))
    for done, (k, variant, image) in enumerate(order):
        if findings.done or (time.perf_counter() >= until and done >= at_least):
            break
        rops = rnd.record_recovery(image)
        if rops is None or not rops:
            continue
        chosen = sorted(itertools.islice(itertools.chain.from_iterable(
            ordered_passes(rops, ())), points))  # fmt: skip
        volume = Volume(image)
        applied = 0
        for j in chosen:
            broken, applied = _advance(volume, rops, applied, j)
            if broken is not None:
                findings.not_judged(broken, "recovery states", len(chosen) - chosen.index(j))
                break
            if _crash_recovery_at(rnd, findings, volume, k, variant, image, rops, j):
                break


def _crash_recovery_at(
    rnd: Round, findings: Findings, volume: Volume, k: int, variant: Variant, image: Image,
    rops: Sequence[FileOp], j: int,
) -> bool:  # fmt: skip
    """Judge the images of a crash before ``rops[j]`` while image ``(k, variant)`` was
    recovered; whether one failed (the recovery's search then ends)."""
    for during, crashed in rnd.images(volume, rops, j) if j < len(rops) else ():
        if crashed == image:
            continue  # the image itself, checked already
        result = rnd.check_recovery(k, variant, rops, j, during, crashed)
        if isinstance(result, NotJudged):
            findings.not_judged(result.why, "recovery states")
        elif result is not None:
            if variant.power_loss or during.power_loss:  # judged under posix only
                result = attrs.evolve(result, profiles=(volume.profile.name,))
            findings.add(result)
            return True
    return False


# -- rounds --------------------------------------------------------------------------------


@attrs.frozen
class Plan:
    """How a source's budget is spent: the share of what is left that a round's crash states
    get (the rest goes to its fault runs, then the next round), the fault runs a round makes
    right after its priority passes, and whether fault runs are made at all."""

    state_share: float = 0.5
    early_faults: int = EARLY_FAULT_RUNS
    faults: bool = True
    overrun: float = OVERRUN
    recovery_share: float = 0.2
    #: The file-system profiles whose images each crash point gives (CRASH-SYS-14).
    profiles: tuple[Profile, ...] = (POSIX,)
    #: The share of a fixed exploration's crash points and fault runs to make (FLEET-4):
    #: ``None``, all of them.  Only a fixed amount of work (an infinite budget) is shared.
    shard: Shard | None = None


@attrs.define
class Exploration:
    """What :func:`explore` did: images judged, fault runs made, what the crash states
    covered, and the failures and limits it found."""

    findings: Findings = attrs.field(factory=Findings)
    states: int = 0
    fault_runs: int = 0
    rounds: int = 0
    coverage: CrashCoverage = attrs.field(factory=CrashCoverage)
    seconds: float = 0.0
    #: What a fixed exploration covered, by kind (``crash points``, ``fault runs``): the
    #: units a shard's report lists for ``scopecheck merge`` (FLEET-5); empty for a budget.
    units: dict[str, Units] = attrs.field(factory=dict)
    #: When it began (``time.perf_counter()``): a caller tells its own exploration apart.
    began: float = attrs.field(factory=time.perf_counter)
    #: Seconds spent in fault and kill runs (``scopecheck bench stores`` tells them apart from
    #: the crash states').
    run_seconds: float = 0.0

    @property
    def failures(self) -> list[CrashFailure]:
        return self.findings.failures


class Source(Protocol):
    def round(self, seed: int, findings: Findings) -> AbstractContextManager[Round | None]:
        """Record the workload of ``seed``; ``None`` when it could not be recorded (the
        source has added why to ``findings``: a failure, or a limit)."""


#: The exploration :func:`explore` made last, while it runs too: what a run stopped from
#: outside (a watchdog, a signal) had found is read from it (INSTALL-20, INSTALL-21).
_latest: list[Exploration] = []


def in_flight() -> Exploration | None:
    """The exploration :func:`explore` is making (or made last) in this process."""
    return _latest[0] if _latest else None


def explore(
    source: Source,
    *,
    budget: float,
    seed: int = 0,
    plan: Plan = Plan(),
    max_failures: int = MAX_FAILURES,
    on_progress: Callable[[Exploration], None] | None = None,
) -> Exploration:
    """Record a workload per round, from ``seed`` on, until ``budget`` seconds pass, and crash
    each: its crash states in coverage order with a few fault runs after the priority passes,
    then its other fault runs.  Up to ``max_failures`` distinct failures are kept; past that
    cap only failures of rules not yet found are, and the search goes on (CRASH-COV-6) -- but
    a cap of one asks for the first failure alone, and the search stops there
    (:class:`Findings`).  What a cap left unchecked is a limit of the exploration.  The first
    round always runs: its states after every acknowledgement are what a verdict may not do
    without (CRASH-COV-2).  Nothing starts after the budget and ``plan.overrun``.

    A budget of ``math.inf`` is a fixed amount of work, the same on every run of the same
    ``seed`` (INSTALL-12): the first round only, its priority passes (after, before and
    around every acknowledgement and sync), :data:`FIXED_RECOVERIES` recoveries and every
    fault and kill run of its workload, one at a time in plan order; what it covered is
    listed in :attr:`Exploration.units`.  ``plan.shard`` makes only its share of those crash
    points and fault runs (FLEET-4); a shard of a budget is a ``ValueError``, since what a
    budget covers is not fixed."""
    started = time.perf_counter()
    deadline = started + budget
    hard_stop = deadline + plan.overrun
    fixed = not math.isfinite(budget)
    if plan.shard is not None and not fixed:
        raise ValueError("only a fixed exploration (an infinite budget) can be sharded")
    shard = plan.shard or Shard(1, 1)
    found = Exploration(
        Findings(max_failures, profiles=len(plan.profiles), keep_looking=max_failures > 1)
    )
    _latest[:] = [found]
    planned_runs = 0
    round_seed = seed
    while not found.findings.done and (
        round_seed == seed or (not fixed and time.perf_counter() < deadline)
    ):
        first = round_seed == seed
        with source.round(round_seed, found.findings) as rnd:
            if rnd is None:
                break
            found.rounds += 1
            now = time.perf_counter()
            share = plan.state_share if plan.faults else 1.0
            states_before = rnd.states

            def runs(start: int, limit: int | None, at_least: int, rnd: Round = rnd) -> int:
                if not plan.faults or found.findings.done:
                    return 0
                began = time.perf_counter()
                made = rnd.fault_runs(
                    found.findings, deadline, start=start, limit=limit, at_least=at_least
                )
                found.run_seconds += time.perf_counter() - began
                found.fault_runs += made
                return made

            fault_ids: list[str] = []

            def fixed_runs(
                start: int, stop: int | None, rnd: Round = rnd, ids: list[str] = fault_ids
            ) -> int:
                """The plan's runs from ``start`` to ``stop`` that the shard owns, one at a
                time; how many were tried (a run the source dropped was tried too)."""
                size = rnd.fault_plan_size
                tried = 0
                for index in range(start, size if stop is None else min(stop, size)):
                    if not plan.faults or found.findings.done:
                        break
                    if shard.owns(index):
                        began = time.perf_counter()
                        found.fault_runs += rnd.fault_runs(
                            found.findings, deadline, start=index, limit=1, at_least=1
                        )
                        found.run_seconds += time.perf_counter() - began
                        ids.append(str(index))
                        tried += 1
                return tried

            def early(first: bool = first, rnd: Round = rnd) -> None:
                if not plan.early_faults:
                    return
                if fixed:
                    size = min(plan.early_faults, rnd.fault_plan_size) if plan.faults else 0
                    owed = sum(1 for index in range(size) if shard.owns(index))
                    made = fixed_runs(0, plan.early_faults)
                    if found.findings.done:
                        owed = made
                    found.coverage += CrashCoverage(early_runs_made=made, early_runs_owed=owed)
                    return
                if not first:
                    runs(0, plan.early_faults, 0)
                    return
                # The first round owes its early runs however small the budget, one at a time
                # until the hard stop: a run cut off there leaves the phase incomplete.
                made, owed = 0, plan.early_faults if plan.faults else 0
                while made < owed and not found.findings.done:
                    if time.perf_counter() >= hard_stop:
                        break
                    if runs(made, 1, 1) == 0:  # the round has no more runs to make
                        owed = made
                        break
                    made += 1
                if found.findings.done:  # a failure ends the search: nothing more is owed
                    owed = made
                found.coverage += CrashCoverage(early_runs_made=made, early_runs_owed=owed)

            def progress(rnd: Round = rnd) -> None:
                if on_progress is not None and rnd.states % 50 == 0:
                    found.seconds = time.perf_counter() - started
                    on_progress(found)

            points: set[int] = set()
            passes = ordered_passes(rnd.ops, rnd.acked_at)
            checked = check_passes(  # which calls early(), adding to found.coverage
                rnd, found.findings, until=now + (deadline - now) * share, first=first,
                overrun=plan.overrun, recovery_share=plan.recovery_share, after_priority=early,
                on_state=progress, fixed=fixed, profiles=plan.profiles, shard=plan.shard,
                checked=points, passes=passes,
            )  # fmt: skip
            found.coverage += checked
            found.states += rnd.states - states_before
            if plan.faults and (first or checked.points_total):
                planned_runs += sum(1 for i in range(rnd.fault_plan_size) if shard.owns(i))
            if fixed:
                fixed_runs(plan.early_faults, None)
                name = workload_digest(rnd.ops)
                planned = priority_passes(passes)
                found.units = {
                    "crash points": Units(
                        sum(map(len, planned)), tuple(str(k) for k in sorted(points)), name
                    ),
                    "fault runs": Units(
                        rnd.fault_plan_size if plan.faults else 0, tuple(fault_ids), name
                    ),
                }
            else:
                runs(plan.early_faults, None, 0 if plan.early_faults or not first else 2)
        round_seed += 1
    found.seconds = time.perf_counter() - started
    for text in (*found.findings.unjudged_texts(), *_caps(found, planned_runs, fixed)):
        found.findings.limited(text)
    return found


def _caps(found: Exploration, planned: int, fixed: bool) -> list[str]:
    """What the search left unchecked at a cap, and which cap (CRASH-COV-6): the distinct
    failures kept, the fixed work (only the priority passes), the time budget."""
    findings, coverage = found.findings, found.coverage
    points = coverage.points_total - coverage.points_checked
    runs = max(0, planned - found.fault_runs - findings.runs_dropped)
    if findings.stopped is not None:
        return [
            f"search: stopped early with {points:,} of {coverage.points_total:,} crash points "
            f"and {runs:,} of {planned:,} planned fault and kill runs unchecked: "
            f"{findings.stopped}; more rules may fail (CRASH-COV-6)"
        ]
    said = []
    if findings.capped_at is not None:
        after = len(findings.failures) - findings.capped_at
        said.append(
            f"search: the cap of {findings.limit} distinct failures was reached; "
            + (
                "the search stopped there: more rules may fail"
                if not findings.keep_looking
                else f"after it the search went on for rules not yet found ({after} found)"
            )
            + " (CRASH-COV-6)"
        )
    if fixed and points:
        said.append(
            f"search: the fixed work checks the crash points after, before and around "
            f"acknowledgements and syncs: {points:,} of {coverage.points_total:,} crash points "
            "were not checked, and more rules may fail there (a run with a time budget checks "
            "them as time allows) (CRASH-COV-6)"
        )
    elif not fixed and (points or runs):
        left = [f"{points:,} of {coverage.points_total:,} crash points"] if points else []
        left += [f"{runs:,} of {planned:,} planned fault and kill runs"] if runs else []
        said.append(
            f"search: the time budget ran out with {' and '.join(left)} unchecked: more rules "
            "may fail there (raise the budget) (CRASH-COV-6)"
        )
    return said
