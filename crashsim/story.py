"""What a crash failure's recorded operations tell, file by file: the one story that a replay's
report, an exported bundle's ``trace.txt`` and the HTML report's timelines are drawn from.

A crash reproducer keeps the operations the workload made (:class:`~.failure.Evidence`), where
each step was acknowledged among them, the crash point and the image's name.  From those alone
-- no backend run -- this rebuilds the files as they were in the page cache when the crash
came (``before``) and as the crash left them (``after``, CRASH-SYS-9), and lists each file's
calls with the acknowledgements in their place.  What differs between a power loss and the page
cache is said file by file (:func:`lost_lines`), so a story names the files whose data or name
was lost, not the file a variant happens to be named after.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import attrs

from scopecheck.crashsim.failure import ROOT_SHOWN, CrashFailure
from scopecheck.crashsim.jsonl_workloads import workload_from_json
from scopecheck.crashsim.persistence import FileOp, Image, power_image
from scopecheck.crashsim.points import ProcessCrash, parse_variant
from scopecheck.crashsim.recovery import power_loss_named
from scopecheck.crashsim.shown import text


@attrs.frozen
class Ack:
    """Step ``step`` (0-based), named ``name``, was acknowledged after the operations before
    index ``at``."""

    at: int
    step: int
    name: str


@attrs.frozen
class Story:
    """A crash failure's operations and images.  ``point`` is the index of the operation the
    crash came before (``len(ops)``: after the last one); for a crash during recovery,
    ``recovery_ops`` are the reopen's operations (they start on ``after``) and
    ``recovery_point``/``recovery_variant`` where and how it crashed, and ``recovered`` the
    image that second crash left."""

    ops: tuple[FileOp, ...]
    acks: tuple[Ack, ...]
    point: int
    variant: str
    profile: str
    power_loss: bool
    before: Image
    after: Image
    steps: tuple[str, ...] = ()
    recovery_ops: tuple[FileOp, ...] = ()
    recovery_point: int | None = None
    recovery_variant: str = ""
    recovered: Image | None = None
    #: The files whose contents after the crash were read from the disk, not built from the
    #: trace (it could not see them, CRASH-SYS-17): no story says they lost anything.
    blind: frozenset[str] = frozenset()

    @property
    def lost(self) -> tuple[str, ...]:
        """The files whose data or name the power loss took (:func:`lost_names`), but those
        read from the disk; none for a process crash."""
        if not self.power_loss:
            return ()
        return tuple(name for name in lost_names(self.before, self.after) if name not in self.blind)

    @property
    def last(self) -> Image:
        """The files the failing reopen read: the image after the crash, or after the crash
        during recovery."""
        return self.recovered if self.recovered is not None else self.after

    def by_file(self) -> dict[str, list[int]]:
        """Operation indices per file (the root as ``<root>``); a rename is listed under both
        of its names."""
        found: dict[str, list[int]] = {}
        for index, op in enumerate(self.ops):
            for name in (op.path, op.target) if op.target else (op.path,):
                found.setdefault(name or ROOT_SHOWN, []).append(index)
        return found


def story_of(failure: CrashFailure) -> Story | None:
    """The story of a crash or recovery failure rebuilt from its evidence (``None`` for a run
    that has none: a fault, a kill, a workload failure); :class:`ValueError` when the
    evidence gives no such image (or the reproducer's recorded contents are not base64)."""
    evidence = failure.evidence
    if evidence is None or failure.point is None or failure.run not in ("crash", "recovery"):
        return None
    steps: tuple[str, ...] = ()
    if failure.workload is not None:
        try:
            steps = tuple(step.op for step in workload_from_json(failure.workload).steps)
        except (KeyError, TypeError, ValueError):
            steps = ()
    k = failure.point
    variant = parse_variant(failure.variant)
    after = power_image(evidence.ops, k, variant, start=evidence.base, profile=failure.built_under)
    contents = {str(p): base64.b64decode(d) for p, d in failure.target.get("contents", {}).items()}
    removed = {str(path) for path in failure.target.get("removed", ())}
    if contents or removed:  # what the trace could not give, read from the disk (CRASH-SYS-17)
        files = {p: d for p, d in {**after.files, **contents}.items() if p not in removed}
        after = attrs.evolve(after, files=files)
    before = power_image(evidence.ops, k, ProcessCrash(), start=evidence.base)
    acks = tuple(
        Ack(at, step, steps[step] if step < len(steps) else f"step {step + 1}")
        for step, at in enumerate(evidence.acked_at)
        if at is not None
    )
    story = Story(
        evidence.ops, acks, k, failure.variant, failure.built_under, variant.power_loss,
        before, after, steps, blind=frozenset(contents) | removed,
    )  # fmt: skip
    if failure.recovery is not None:
        j, during = failure.recovery
        recovered = power_image(evidence.recovery_ops, j, during, start=after)
        story = attrs.evolve(
            story, recovery_ops=evidence.recovery_ops, recovery_point=j,
            recovery_variant=during, recovered=recovered,
        )  # fmt: skip
    return story


def files_lines(title: str, image: Image) -> list[str]:
    """``title`` and each file of ``image`` with its size, for a replay's report."""
    sizes = [f"  {name}: {len(data)} bytes" for name, data in sorted(image.files.items())]
    return [title, *(sizes or ["  (none)"])]


def lost_names(cache: Image, image: Image) -> tuple[str, ...]:
    """The files a power loss changed against the page cache at the same point: data or a
    name lost, or an older version back -- the files a story names, whatever file its
    variant is named after (``only:LOG.old`` keeps that file's unsynced writes and loses the
    others')."""
    changed = {name for name, data in cache.files.items() if image.files.get(name) != data}
    return tuple(sorted(changed | (image.files.keys() - cache.files.keys())))


def with_lost(failure: CrashFailure) -> CrashFailure:
    """``failure`` with ``shown["lost"]`` naming the files its power loss changed
    (:func:`lost_names`), so its one-line text says whose data was lost; a failure of no
    power-loss image, or whose evidence gives no image, is returned as it is."""
    if failure.run not in ("crash", "recovery") or "lost" in failure.shown:
        return failure
    try:
        story = story_of(failure)
    except (ValueError, TypeError, KeyError):
        return failure
    if story is None or not story.power_loss:
        return failure
    lost = lost_text(story.lost)
    named = power_loss_named(failure.variant)
    problem = failure.problem.replace(named, f"{named[:-1]}; data lost: {lost})", 1)
    return attrs.evolve(failure, problem=problem, shown={**failure.shown, "lost": lost})


def lost_lines(cache: Image, image: Image) -> list[str]:
    """What a power loss took, file by file, against the page cache at the same point (the
    process-crash image): the files whose data or name it lost, so a story names them and
    not the file its variant happens to be named after."""
    lost: list[str] = []
    for name, data in sorted(cache.files.items()):
        kept = image.files.get(name)
        if kept is None:
            lost.append(f"  {name}: gone ({len(data)} bytes in the page cache)")
        elif kept == data:
            continue
        elif data.startswith(kept):
            lost.append(f"  {name}: {len(kept)} of its {len(data)} bytes kept, the rest lost")
        else:
            pairs = zip(kept, data, strict=False)
            at = next((j for j, (x, y) in enumerate(pairs) if x != y), min(len(kept), len(data)))
            lost.append(
                f"  {name}: another version, {len(kept)} bytes against {len(data)}, "
                f"differing from byte {at}"
            )
    lost += [f"  {name}: back ({len(image.files[name])} bytes), gone from the page cache"
             for name in sorted(image.files.keys() - cache.files.keys())]  # fmt: skip
    if not lost:
        return ["what the power loss lost against the page cache: nothing"]
    return ["what the power loss lost against the page cache:", *lost]


def op_lines(ops: Sequence[FileOp], indices: Sequence[int], story: Story) -> list[str]:
    """The operations at ``indices`` (``len(ops)`` stands for the end of the run), each
    acknowledgement and the crash in their place."""
    lines: list[str] = []
    previous = indices[0] - 1 if len(indices) else -1
    for index in indices:
        for ack in story.acks:
            if previous < ack.at <= index:
                lines.append(f"    -- step {ack.step + 1} ({ack.name}) acknowledged")
        if previous < story.point <= index:
            lines.append(f"    >> the crash ({story.variant})")
        previous = index
        if index < len(ops):
            lines.append(f"    {index:5} {ops[index].describe()}")
    return lines


#: File names a one-line text names before it says how many more there are.
NAMED = 6


def lost_text(names: Sequence[str]) -> str:
    """``names`` for one line: the first :data:`NAMED`, each cut and escaped, then how many
    more (a store may change thousands of files at once)."""
    if not names:
        return "none"
    shown = ", ".join(text(name, 120) for name in names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _lost_text(story: Story) -> str:
    return f" (data lost: {lost_text(story.lost)})" if story.power_loss else ""


def trace_text(story: Story) -> str:
    """The calls that built the image, per file -- writes with offsets and sizes, syncs,
    renames, unlinks -- with the acknowledgements among them and the crash point, then what
    the persistence model dropped or tore, under which profile (a bundle's ``trace.txt``)."""
    ops, k = story.ops, story.point
    done = sum(1 for ack in story.acks if ack.at <= k)
    lines = [
        f"{len(ops)} operations; the crash came before operation {k} "
        f"({ops[k].describe() if k < len(ops) else 'after the last one'}), image {story.variant}"
        f"{_lost_text(story)}, built under the {story.profile} profile",
        f"{done} of the run's {len(story.acks)} acknowledged steps were acknowledged before it",
        "",
        "every operation in order (>> marks the crash; operations after it never happened):",
    ]
    lines += op_lines(ops, range(len(ops) + 1), story)
    lines += ["", "per file:"]
    for name, indices in sorted(story.by_file().items()):
        lines.append(f"  {name}:")
        lines += op_lines(ops, indices, story)
    lines.append("")
    if story.power_loss:
        lines += lost_lines(story.before, story.after)
    elif k < len(ops) and story.after != story.before:
        op = ops[k]
        cut = len(story.after.files.get(op.path, b"")) - len(story.before.files.get(op.path, b""))
        lines.append(
            f"a process crash in the middle of operation {k} ({op.describe()}): "
            f"{max(cut, 0)} of its {len(op.data)} bytes reached the file before the process died"
        )
    else:
        lines.append("a process crash: the page cache survived, nothing written was lost")
    if story.recovery_point is not None and story.recovered is not None:
        j = story.recovery_point
        lines += [
            "",
            f"then the backend reopened that image and crashed ({story.recovery_variant}) "
            f"before its operation {j}:",
        ]
        for index, op in enumerate(story.recovery_ops[: j + 1]):
            mark = ">>" if index == j else f"{index:5}"
            lines.append(f"    {mark} {op.describe()}")
    return "\n".join(lines) + "\n"
