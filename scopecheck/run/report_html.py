"""One self-contained HTML page of a ``validate`` verdict: ``scopecheck report`` and
``scopecheck validate --html`` (REPORT-1..6).

The page is for a CI artifact opened from ``file://``: inline CSS and a few lines of
hand-written JavaScript, a Content-Security-Policy that forbids every request, nothing fetched
(REPORT-1).  It shows the verdict's headline and phases, the crash exploration's coverage as far
as the verdict records it, and every failure with what its reproducer file holds (REPORT-2).  A
crash failure's pictures are drawn from the one story of its recorded operations
(:mod:`scopecheck.crashsim.story`), never from a second reading of the evidence (REPORT-3).

Everything on the page that comes from the verdict or a reproducer is outside input -- a
backend's messages can hold anything, ``</script>`` included -- so every such text is escaped
where it is written, and every list and text is bounded, each cut saying how much it left out:
a failure with ten thousand operations makes a page of a few hundred kilobytes, not a hundred
megabytes (REPORT-5).  What the verdict does not record (which crash points a time-budget run
checked) is said in words, never drawn as if known (REPORT-4).
"""

from __future__ import annotations

import html
import os
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.failure import BadReproducer, CrashFailure
from scopecheck.crashsim.persistence import FileOp
from scopecheck.crashsim.shards import workload_digest
from scopecheck.crashsim.shown import escaped
from scopecheck.crashsim.story import Story, lost_lines, op_lines, story_of
from scopecheck.models.errors import UsageError
from scopecheck.run.severity import WORDS
from scopecheck.run.validate import VERSION, Failure, Verdict, headline

#: Characters of one text (an error, a message, a program, a JSON value) shown before a cut.
TEXT_LIMIT = 4000
#: Positions of a workload drawn in one strip or timeline: a window around the crash point.
WINDOW = 240
#: Files drawn in one timeline or files table.
FILE_ROWS = 40
#: Lines of what a power loss lost, and operations of a recovery, listed.
LINES = 200
#: Failures drawn in full; those after them get one line each.
DETAILED = 100
#: Failures listed at all; those after them are counted.
LISTED = 5000
#: A reproducer file larger than this is not read (a verdict may name any file).
REPRODUCER_BYTES = 32 * 1024 * 1024

#: What the page may load: nothing but itself (REPORT-1).
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

_REPLAY = "scopecheck replay "


@attrs.frozen
class Reproducer:
    """What a failure's reproducer file gave the report: ``named`` is the file its command
    names (``""`` for a command that is no replay, a conformance case's pytest line), ``path``
    the file looked at, ``problem`` why nothing could be read from it, in words."""

    named: str = ""
    path: str = ""
    record: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    crash: CrashFailure | None = attrs.field(default=None, eq=False, repr=False)
    story: Story | None = attrs.field(default=None, eq=False, repr=False)
    problem: str = ""


def replay_file(command: str) -> str:
    """The file a ``scopecheck replay FILE`` command names; ``""`` for another command."""
    if not command.startswith(_REPLAY):
        return ""
    rest = command[len(_REPLAY) :].strip()
    try:
        words = shlex.split(rest)
    except ValueError:
        return rest
    return words[0] if len(words) == 1 else rest


def load_reproducer(failure: Failure, failures_dir: Path | None = None) -> Reproducer:
    """Read the reproducer ``failure`` names -- or, with ``failures_dir``, the file of that
    basename there (a verdict moved from the machine that ran it).  A file that cannot be read
    is a ``problem`` of this failure, shown on its page, never an error of the report."""
    named = replay_file(failure.reproducer)
    if not named:
        return Reproducer()
    if failures_dir is not None:
        windows = "\\" in named and "/" not in named
        path = failures_dir / (PureWindowsPath(named) if windows else PurePosixPath(named)).name
    else:
        path = Path(named)
    shown = str(path)
    try:
        if not path.is_file():  # never open a FIFO or a device a hostile verdict names
            return Reproducer(named, shown, problem=f"no reproducer file at {shown}")
        with path.open("rb") as handle:
            raw = handle.read(REPRODUCER_BYTES + 1)
    except OSError as exc:
        return Reproducer(named, shown, problem=f"could not read {shown}: {exc.strerror or exc}")
    if len(raw) > REPRODUCER_BYTES:
        return Reproducer(named, shown, problem=f"{shown} is over {REPRODUCER_BYTES:,} bytes")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Reproducer(named, shown, problem=f"{shown} is not JSON: {exc}")
    if not isinstance(record, dict):
        return Reproducer(named, shown, problem=f"{shown} holds no reproducer object")
    if record.get("kind") != "crash":
        return Reproducer(named, shown, record)
    try:
        crash = CrashFailure.from_json(record)
    except BadReproducer as exc:
        return Reproducer(named, shown, record, problem=str(exc))
    try:
        story = story_of(crash)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        problem = f"its recorded operations rebuild no image: {exc}"
        return Reproducer(named, shown, record, crash, problem=problem)
    return Reproducer(named, shown, record, crash, story)


def read_verdict(path: Path) -> Verdict:
    """The verdict ``path`` holds; a :class:`UsageError` naming the file that is missing or
    holds no version-:data:`VERSION` verdict (REPORT-6)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError("not_found", f"{path}: no such verdict file") from None
    except IsADirectoryError:
        raise UsageError("not_found", f"{path}: a directory, not a verdict file") from None
    except OSError as exc:
        raise UsageError("io_error", f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError("invalid_payload", f"{path}: not JSON: {exc}") from None
    try:
        verdict = Verdict.from_json(data)
        _check_types(verdict)
    except ValueError as exc:
        raise UsageError(
            "invalid_payload",
            f"{path}: {exc}; give what scopecheck validate --json prints (version {VERSION})",
        ) from None
    return verdict


def _check_types(verdict: Verdict) -> None:
    """A ``ValueError`` for the fields :meth:`Verdict.from_json` takes as they come and the
    page computes with: a verdict file is outside input."""
    number = (int, float)
    expected: tuple[tuple[str, object, tuple[type, ...]], ...] = (
        ("budget", verdict.budget, number),
        ("examples", verdict.examples, (int,)),
        ("stopped", verdict.stopped, (str,)),
        ("crash_coverage", verdict.crash_coverage, (dict,)),
    )
    for name, value, kinds in expected:
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise ValueError(f"a malformed verdict: {name} is {type(value).__name__}")


def check_output(out: Path) -> None:
    """A :class:`UsageError` when ``out`` cannot be written: its folder missing, or it is a
    folder -- said before any work, so a mistake costs no run (REPORT-6)."""
    if out.is_dir():
        raise UsageError("invalid_query", f"{out}: a directory; give the report's file name")
    if not out.parent.is_dir():
        raise UsageError("not_found", f"{out.parent}: no such directory for the report")


def report_html(verdict: Verdict, failures_dir: Path | None = None) -> str:
    """The page of ``verdict``, its reproducers read from where its failures name them (or
    from ``failures_dir``)."""
    shown = verdict.failures[:LISTED]
    found = [load_reproducer(f, failures_dir) if i < DETAILED else Reproducer()
             for i, f in enumerate(shown)]  # fmt: skip
    return render(verdict, found)


def write_report(verdict: Verdict, out: Path, failures_dir: Path | None = None) -> int:
    """Write the page of ``verdict`` to ``out`` whole or not at all (a temporary file renamed
    into place); return its size in bytes."""
    check_output(out)
    data = report_html(verdict, failures_dir).encode("utf-8")
    # a name of its own beside ``out``, made as any file is (the umask's permissions)
    temporary = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with temporary.open("xb") as file:
            file.write(data)
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return len(data)


# -- text ------------------------------------------------------------------------------------


def cut(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` up to ``limit`` characters, and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit:,} more characters not shown)"


def esc(value: object, limit: int = TEXT_LIMIT) -> str:
    """Outside text as HTML: bounded, lone surrogates spelled out, every markup character
    escaped (quotes too, so it is safe in an attribute)."""
    return html.escape(cut(escaped(str(value)), limit), quote=True)


def _json_text(value: object) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(value)


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text else ""


def _dl(rows: Iterable[tuple[str, str]], cls: str = "facts") -> str:
    """A list of facts; each value is HTML already escaped by the caller."""
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="{cls}">{body}</dl>'


def _command(text: str, ident: str) -> str:
    """A command a reader copies, with a copy button (the script's only job)."""
    return (
        f'<div class="cmd"><code id="{ident}">{esc(text)}</code>'
        f'<button type="button" data-copy="{ident}">copy</button></div>'
    )


# -- the page --------------------------------------------------------------------------------


def render(verdict: Verdict, reproducers: Sequence[Reproducer]) -> str:
    """The whole page: ``reproducers[i]`` is what the file of ``verdict.failures[i]`` gave
    (shorter than the failures: the later ones are drawn without it)."""
    title = f"scopecheck: {verdict.outcome} {verdict.backend}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title, 200)}</title><style>{_CSS}</style></head>",
        f'<body data-outcome="{esc(verdict.outcome, 20)}">',
        _summary(verdict),
        _coverage(verdict, reproducers),
        _failures(verdict, reproducers),
        _warnings(verdict),
        "<footer>made by <code>scopecheck report</code> from the <code>validate --json</code> "
        "verdict; everything shown comes from the verdict and the reproducer files it names"
        "</footer>",
        f"<script>{_JS}</script></body></html>",
    ]
    return "\n".join(part for part in parts if part) + "\n"


def _summary(verdict: Verdict) -> str:
    outcome = verdict.outcome
    facts = [
        ("outcome", f'<span class="status {outcome}">{esc(outcome.upper())}</span>'),
        ("backend", f"<code>{esc(verdict.backend, 300)}</code>"),
        ("budget", "none (fixed work)" if verdict.budget is None else f"{verdict.budget:g} s"),
        ("examples", "until the budget" if verdict.examples is None else str(verdict.examples)),
        ("seed", str(verdict.seed)),
        ("seconds", f"{verdict.seconds:.1f}"),
        ("exit code", str(verdict.exit_code)),
        ("fs profile", esc(verdict.fs_profile, 40)),
    ]
    if verdict.severity is not None:
        facts.append(("worst", esc(WORDS[verdict.severity])))
    if verdict.stopped is not None:
        facts.append(("stopped", esc(verdict.stopped, 40)))
    if verdict.shards:
        held = ", ".join(str(shard.index) for shard in verdict.shards)
        facts.append(("shards", f"{esc(held, 400)} of {verdict.shards[0].count}"))
    rows = "".join(
        f'<tr data-phase="{esc(name)}"><th>{esc(name)}</th>'
        f'<td><span class="status {esc(phase.status)}">{esc(phase.status)}</span></td>'
        f"<td>{esc(phase.detail)}</td><td class=num>{phase.seconds:.1f}s</td></tr>"
        for name, phase in verdict.phases.items()
    )
    out = [
        "<header><h1>scopecheck report</h1>",
        f'<p class="headline {outcome}">{esc(headline(verdict), 600)}</p>',
        _dl(facts, "facts row"),
        "</header>",
        '<section id="phases"><h2>Phases</h2>',
        f'<table class="phases"><tr><th>phase</th><th>status</th><th>reason</th>'
        f"<th>time</th></tr>{rows}</table>",
    ]
    if verdict.unmet:
        out.append(
            '<p class="bad">required but skipped or incomplete: '
            f"{esc(', '.join(verdict.unmet))} (--require)</p>"
        )
    if verdict.internal_errors:
        items = "".join(
            f"<li><b>{esc(e.phase)}</b>: {esc(e.error)}<br>where: <code>{esc(e.where)}</code>"
            f"{_command(e.rerun, f'internal-{i}')}"
            + (f"traceback: <code>{esc(e.traceback_file)}</code>" if e.traceback_file else "")
            + "</li>"
            for i, e in enumerate(verdict.internal_errors[:LINES])
        )
        out.append(
            "<h3 class=\"bad\">Internal errors (scopecheck's own, not the backend's)</h3>"
            f"<ul>{items}</ul>"
        )
    if verdict.limits:
        items = "".join(f"<li>{esc(limit)}</li>" for limit in verdict.limits[:LINES])
        more = len(verdict.limits) - LINES
        extra = f"<li>… {more:,} more not shown</li>" if more > 0 else ""
        out.append(f"<h3>What crash exploration could not see or judge</h3><ul>{items}{extra}</ul>")
    out.append("</section>")
    return "\n".join(out)


# -- coverage --------------------------------------------------------------------------------


def _meter(label: str, done: int, total: int) -> str:
    share = 100.0 * done / total if total > 0 else 0.0
    share = min(max(share, 0.0), 100.0)
    return (
        f'<div class="meter"><span class="label">{esc(label)}</span>'
        f'<span class="bar"><span style="width:{share:.1f}%"></span></span>'
        f'<span class="num">{done:,} of {total:,}</span></div>'
    )


def _counted(coverage: Mapping[str, Any], name: str) -> int | None:
    value = coverage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _coverage(verdict: Verdict, reproducers: Sequence[Reproducer]) -> str:
    phase = verdict.phases["crash exploration"]
    out = ['<section id="coverage"><h2>Crash exploration coverage</h2>']
    if phase.status == "skipped":
        out.append(f"<p>skipped: {esc(phase.detail)} -- nothing to draw.</p></section>")
        return "\n".join(out)
    counts = [
        ("crash states checked", str(verdict.crash_states)),
        ("I/O-fault runs", str(verdict.crash_fault_runs)),
        ("kill runs", str(verdict.kill_runs)),
    ]
    coverage = verdict.crash_coverage or {}
    for name, label in (
        ("recovery_states", "states crashed during recovery"),
        ("points_unjudged", "crash points not judged"),
    ):
        value = _counted(coverage, name)
        if value is not None:
            counts.append((label, f"{value:,}"))
    out.append(_dl((label, esc(value)) for label, value in counts))
    if not verdict.crash_coverage:
        out.append(
            '<p class="unknown">This explorer does not measure coverage: how many of the '
            "workload's acknowledged steps and crash points were checked is not known.</p>"
        )
    else:
        for done, total, label in (
            ("acked_covered", "acked_total", "acknowledged steps covered"),
            ("points_checked", "points_total", "crash points checked"),
        ):
            a, b = _counted(coverage, done), _counted(coverage, total)
            if a is not None and b is not None:
                out.append(_meter(label, a, b))
    out.append(_strips(verdict, reproducers))
    out.append("</section>")
    return "\n".join(out)


def _checked_points(verdict: Verdict) -> tuple[str, set[int]] | None:
    """The digest of the workload whose crash points the verdict lists, and those points:
    only a run of fixed work (``--examples``) records them (FLEET-5)."""
    units = verdict.units.get("crash points")
    if units is None:
        return None
    return units.digest, {int(i) for i in units.ids if i.isdigit()}


def _strips(verdict: Verdict, reproducers: Sequence[Reproducer]) -> str:
    """One strip per workload a crash failure recorded: its operations, the acknowledgements,
    syncs, each failure's crash point and -- only where the verdict lists them for that very
    workload -- the crash points checked (REPORT-4)."""
    groups: dict[str, list[tuple[int, Story, CrashFailure]]] = {}
    unrecorded = 0
    for index, found in enumerate(reproducers):
        if found.crash is None:
            continue
        if found.story is None or found.crash.evidence is None:
            unrecorded += 1
            continue
        key = workload_digest(found.crash.evidence.ops)
        groups.setdefault(key, []).append((index, found.story, found.crash))
    listed = _checked_points(verdict)
    out = ["<h3>Along the workloads' calls</h3>"]
    if not groups:
        out.append(
            '<p class="unknown">No failure of this verdict has recorded operations, so no '
            "workload can be drawn"
            + (
                f"; the verdict lists the crash points checked of one workload "
                f"({len(listed[1]):,}), not its calls.</p>"
                if listed
                else ".</p>"
            )
        )
    for key, members in groups.items():
        index, story, crash = members[0]
        name = crash.workload.get("name") if isinstance(crash.workload, dict) else None
        title = f"workload {name}" if isinstance(name, str) else "a workload"
        checked = listed[1] if listed is not None and listed[0] == key else None
        out.append(f'<div class="workload" data-workload="{esc(key, 40)}">')
        out.append(
            f"<h4>{esc(title, 200)}: {len(story.ops):,} operations, "
            f"{len(story.acks):,} acknowledged steps</h4>"
        )
        marks = [(i, s.point, s.variant) for i, s, _ in members]
        out.append(_strip(story, marks, checked))
        if checked is None:
            out.append(
                '<p class="unknown">Which crash points of this workload were checked is not '
                "recorded: a run with a time budget counts them across all its workloads "
                "(above) without naming them. Marked here: only the crash points of the "
                "failures below.</p>"
            )
        else:
            out.append(
                f"<p>The verdict names the crash points checked of this workload: "
                f"{len(checked):,}, underlined.</p>"
            )
        out.append("</div>")
    if unrecorded:
        out.append(
            f'<p class="unknown">{unrecorded} crash failure(s) (I/O-fault, kill or workload '
            "runs) hold no recorded operations: they are rerun, not rebuilt, so they are not "
            "drawn here.</p>"
        )
    return "\n".join(out)


def window(length: int, focus: Sequence[int]) -> range:
    """The positions ``0..length`` (``length``: after the last operation) drawn: all of them,
    or :data:`WINDOW` around the first of ``focus``."""
    if length + 1 <= WINDOW:
        return range(length + 1)
    centre = min(focus) if focus else 0
    start = max(0, min(centre - WINDOW // 2, length + 1 - WINDOW))
    return range(start, start + WINDOW)


def _kind_class(op: FileOp) -> str:
    if op.kind in ("sync", "syncall"):
        return "sync"
    if op.kind == "syncfail":
        return "syncfail"
    if op.kind in ("write", "truncate"):
        return "write"
    if op.kind in ("rename", "unlink", "link", "symlink", "mkdir", "rmdir"):
        return "name"
    return "other"


_LETTER = {"write": "W", "truncate": "T", "sync": "S", "syncall": "S", "syncfail": "F",
           "rename": "R", "unlink": "U", "link": "L", "symlink": "L", "mkdir": "M",
           "rmdir": "D", "open": "O", "close": "C"}  # fmt: skip


def _left_out(shown: range, length: int) -> str:
    before, after = shown.start, length + 1 - shown.stop
    if not before and after <= 0:
        return ""
    said = []
    if before:
        said.append(f"the {before:,} positions before {shown.start:,}")
    if after > 0:
        said.append(f"the {after:,} after {shown.stop - 1:,}")
    return f'<p class="cut">not drawn: {" and ".join(said)}</p>'


def _strip(story: Story, marks: Sequence[tuple[int, int, str]], checked: set[int] | None) -> str:
    """Every position of the workload in order: a cell per operation (its kind, faded after
    the first crash point), a green tick where a step was acknowledged, a red bar linking to
    each failure that crashed there, underlined cells where a checked crash point is."""
    ops = story.ops
    shown = window(len(ops), [point for _, point, _ in marks])
    acks: dict[int, list[str]] = {}
    for ack in story.acks:
        acks.setdefault(ack.at, []).append(f"step {ack.step + 1} ({ack.name}) acknowledged")
    crashes: dict[int, list[tuple[int, str]]] = {}
    for index, point, variant in marks:
        crashes.setdefault(point, []).append((index, variant))
    cells = []
    for position in shown:
        for said in acks.get(position, ()):
            cells.append(f'<i class="mk ack" title="{esc(said, 300)}"></i>')
        for index, variant in crashes.get(position, ()):
            cells.append(
                f'<a class="mk crash" href="#failure-{index}" '
                f'title="failure #{index}: crash before operation {position} ({esc(variant, 200)})"'
                "></a>"
            )
        tick = " chk" if checked is not None and position in checked else ""
        if position == len(ops):
            cells.append(f'<i class="op end{tick}" title="after the last operation"></i>')
            continue
        op = ops[position]
        cells.append(
            f'<i class="op {_kind_class(op)}{tick}" '
            f'title="#{position} {esc(op.describe(), 300)}"></i>'
        )
    return (
        f'<div class="strip" role="img" aria-label="operations">{"".join(cells)}</div>'
        f"{_left_out(shown, len(ops))}{_LEGEND}"
    )


_LEGEND = (
    '<p class="legend"><i class="op write"></i> write/truncate <i class="op sync"></i> sync '
    '<i class="op syncfail"></i> failed sync <i class="op name"></i> rename/unlink/mkdir '
    '<i class="op other"></i> open/close <i class="mk ack"></i> acknowledged '
    '<i class="mk crash"></i> crash point <i class="op other chk"></i> checked</p>'
)


# -- failures --------------------------------------------------------------------------------


def _failures(verdict: Verdict, reproducers: Sequence[Reproducer]) -> str:
    failures = verdict.failures
    if not failures:
        return '<section id="failures"><h2>Failures</h2><p>none</p></section>'
    out = [
        '<section id="failures">',
        f"<h2>Failures ({len(failures):,})</h2>",
        '<p class="tools"><button type="button" data-toggle="open">expand all</button> '
        '<button type="button" data-toggle="close">collapse all</button></p>',
    ]
    for index, failure in enumerate(failures[:LISTED]):
        if index < DETAILED and index < len(reproducers):
            out.append(_failure(index, failure, reproducers[index]))
        else:
            out.append(_brief(index, failure))
    if len(failures) > LISTED:
        out.append(f'<p class="cut">… {len(failures) - LISTED:,} more failures not listed</p>')
    out.append("</section>")
    return "\n".join(out)


def _brief(index: int, failure: Failure) -> str:
    return (
        f'<div class="failure brief" id="failure-{index}" data-failure-index="{index}" '
        f'data-severity="{esc(failure.severity, 20)}">#{index} <b>{esc(failure.rule or "-", 80)}'
        f"</b> ({esc(failure.phase, 40)}): {esc(failure.error, 300)} "
        f"<code>{esc(failure.reproducer, 600)}</code></div>"
    )


def _failure(index: int, failure: Failure, found: Reproducer) -> str:
    rules = ", ".join(failure.rules) or "none named"
    profiles = ", ".join(failure.profiles) if failure.profiles else "every profile"
    facts = [
        ("rules", esc(rules, 400)),
        ("phase", esc(failure.phase, 80)),
        ("severity", f'<span class="sev {esc(failure.severity, 20)}">'
                     f"{esc(WORDS[failure.severity])}</span>"),
        ("profiles", esc(profiles, 200)),
    ]  # fmt: skip
    if failure.not_profiles:
        facts.append(("not under", esc(", ".join(failure.not_profiles), 200)))
    if not failure.shrunk:
        facts.append(("shrunk", "no: the budget ran out, the steps are not minimal"))
    if failure.test:
        facts.append(("case", f"<code>{esc(failure.test, 600)}</code>"))
    out = [
        f'<article class="failure" id="failure-{index}" data-failure-index="{index}" '
        f'data-severity="{esc(failure.severity, 20)}">',
        f'<h3><a href="#failure-{index}">#{index}</a> {esc(failure.rule or "no rule", 80)} '
        f'<span class="sev {esc(failure.severity, 20)}">{esc(failure.severity, 20)}</span></h3>',
        f'<p class="error">{esc(failure.error)}</p>',
        _dl(facts),
    ]
    if failure.program:
        out.append(f"<h4>Steps</h4>{_pre(failure.program)}")
    if failure.message:
        out.append(f"<h4>Message</h4>{_pre(failure.message)}")
    out.append(_rerun(index, failure, found))
    if found.problem:
        out.append(f'<p class="unknown">reproducer: {esc(found.problem, 800)}</p>')
    if found.crash is not None:
        out.append(_crash(index, found.crash, found.story))
    elif found.record is not None:
        out.append(_other_record(found.record))
    out.append("</article>")
    return "\n".join(out)


def _rerun(index: int, failure: Failure, found: Reproducer) -> str:
    if not found.named:
        return f"<h4>Rerun</h4>{_command(failure.reproducer, f'rerun-{index}')}"
    file = found.path or found.named
    stem = PurePosixPath(file.replace("\\", "/")).stem or "failure"
    replay = f"scopecheck replay {shlex.quote(file)}"
    export = f"{replay} --export {shlex.quote(stem + '-export')}"
    return (
        f"<h4>Rerun</h4>{_command(replay, f'rerun-{index}')}"
        f"<h4>Export a bundle</h4>{_command(export, f'export-{index}')}"
    )


def _other_record(record: Mapping[str, Any]) -> str:
    """A reproducer that is no crash failure (a machine's): the fields a reader asks for."""
    facts = []
    for name in ("kind", "machine", "spec", "seed", "profile", "examples_per_round", "origin",
                 "where"):  # fmt: skip
        if name in record and record[name] is not None:
            facts.append((name, esc(record[name], 400)))
    out = ["<h4>Reproducer</h4>", _dl(facts)] if facts else []
    traceback = record.get("traceback")
    if isinstance(traceback, str) and traceback:
        out.append(f"<details><summary>traceback</summary>{_pre(traceback)}</details>")
    return "\n".join(out)


def _crash(index: int, crash: CrashFailure, story: Story | None) -> str:
    facts = [
        ("source", esc(crash.source, 80)),
        ("run", esc(crash.what, 200)),
        ("kind", esc(crash.kind, 200)),
    ]
    if crash.point is not None:
        what = "crash before operation" if crash.run in ("crash", "recovery") else "call"
        facts.append((what, str(crash.point)))
    if crash.variant:
        facts.append(("image" if crash.run in ("crash", "recovery") else "fault",
                      esc(crash.variant, 300)))  # fmt: skip
    if crash.recovery is not None:
        facts.append(("then in recovery", f"before its operation {crash.recovery[0]}, "
                                          f"{esc(crash.recovery[1], 300)}"))  # fmt: skip
    if isinstance(crash.workload, dict) and isinstance(crash.workload.get("name"), str):
        facts.append(("workload", esc(crash.workload["name"], 200)))
    out = ["<h4>Crash reproducer</h4>", _dl(facts)]
    if story is not None:
        out.append(_timeline(index, story))
        out.append(_files(story))
        out.append(_recovery(story))
    else:
        out.append(
            '<p class="unknown">No recorded operations: this run is rerun with its one call '
            "failed or killed, so no timeline or crash image can be drawn from the file; "
            "what it showed follows.</p>"
        )
    if crash.shown:
        rows = "".join(
            f"<details><summary>{esc(name.replace('_', ' '), 100)}</summary>"
            f"{_pre(value if isinstance(value, str) else _json_text(value))}</details>"
            for name, value in list(crash.shown.items())[:FILE_ROWS]
        )
        out.append(f"<h4>What the failing run showed</h4>{rows}")
    return "\n".join(out)


def _timeline(index: int, story: Story) -> str:
    """A grid: a row per file, a column per position of the workload in order; each file's
    calls in its row, the acknowledgements and the crash point as lines across all rows."""
    ops = story.ops
    shown = window(len(ops), [story.point])
    column = {position: n + 1 for n, position in enumerate(shown)}
    files = sorted(story.by_file().items())
    drawn = [(name, [i for i in indices if i in column]) for name, indices in files]
    touched = [(name, indices) for name, indices in drawn if indices]
    # the files whose calls come nearest the crash, when there are too many to draw
    near = sorted(touched, key=lambda item: min(abs(i - story.point) for i in item[1]))
    rows = sorted(near[:FILE_ROWS])
    names = ['<span class="corner">file \\ operation</span>']
    cells = []
    for position in shown:
        if position % 5 == 0 or position == story.point:
            cells.append(
                f'<span class="idx" style="grid-area:1/{column[position]}">{position}</span>'
            )
    last_row = len(rows) + 1
    for row, (name, indices) in enumerate(rows, start=2):
        names.append(f'<span class="fname" title="{esc(name, 600)}">{esc(name, 60)}</span>')
        for position in indices:
            op = ops[position]
            late = " late" if position >= story.point else ""
            cells.append(
                f'<b class="op {_kind_class(op)}{late}" style="grid-area:{row}/{column[position]}"'
                f' title="#{position} {esc(op.describe(), 300)}">{_LETTER.get(op.kind, "?")}</b>'
            )
    for ack in story.acks:
        if ack.at in column:
            cells.append(
                f'<i class="line ack" style="grid-area:1/{column[ack.at]}/{last_row + 1}" '
                f'title="step {ack.step + 1} ({esc(ack.name, 100)}) acknowledged"></i>'
            )
    if story.point in column:
        cells.append(
            f'<i class="line crash" style="grid-area:1/{column[story.point]}/{last_row + 1}" '
            f'title="the crash ({esc(story.variant, 200)})"></i>'
        )
    done = sum(1 for ack in story.acks if ack.at <= story.point)
    where = (
        f"before operation {story.point} ({esc(ops[story.point].describe(), 300)})"
        if story.point < len(ops)
        else "after the last operation"
    )
    out = [
        "<h4>Timeline</h4>",
        f"<p>{len(ops):,} operations; the crash came {where}, image "
        f"<code>{esc(story.variant, 200)}</code>, built under the "
        f"<code>{esc(story.profile, 40)}</code> profile; {done} of the run's "
        f"{len(story.acks)} acknowledged steps were acknowledged before it. Operations after "
        "the crash (faded) never happened.</p>",
        f'<div class="tlbox"><div class="tlnames">{"".join(names)}</div>'
        f'<div class="tlwrap"><div class="timeline" id="timeline-{index}" '
        f'style="grid-template-columns:repeat({len(shown)},1.6em)">'
        f"{''.join(cells)}</div></div></div>",
        _left_out(shown, len(ops)),
        _LEGEND.replace(' <i class="op other chk"></i> checked', ""),
    ]
    idle, over = len(files) - len(touched), len(touched) - len(rows)
    if over > 0:
        out.append(f'<p class="cut">{over:,} more files with calls here not drawn</p>')
    if idle > 0 and len(shown) < len(ops) + 1:
        out.append(f'<p class="cut">{idle:,} files with no call among those drawn</p>')
    out.append(_op_list(story, shown))
    return "\n".join(out)


def _op_list(story: Story, shown: range) -> str:
    """The drawn operations as words, with the acknowledgements and the crash in place."""
    lines = op_lines(story.ops, shown, story)
    return (
        "<details><summary>the operations in order, in words</summary>"
        f"{_pre(chr(10).join(lines))}</details>"
    )


def _files(story: Story) -> str:
    """The files in the page cache when the crash came, in the crash image, and (after a
    crash during recovery) what that left; then what the power loss lost, in the story's
    words."""
    images = [("page cache (before)", story.before.files), ("crash image (after)",
              story.after.files)]  # fmt: skip
    if story.recovered is not None:
        images.append(("after the crash in recovery", story.recovered.files))
    names = sorted(set().union(*(files.keys() for _, files in images)))
    head = "".join(f"<th>{esc(title)}</th>" for title, _ in images)
    rows = []
    for name in names[:FILE_ROWS]:
        sizes = []
        for _, files in images:
            data = files.get(name)
            sizes.append("<td class=gone>absent</td>" if data is None
                         else f"<td class=num>{len(data):,} bytes</td>")  # fmt: skip
        changed = story.before.files.get(name) != story.after.files.get(name)
        rows.append(
            f'<tr class="{"changed" if changed else ""}"><th>{esc(name, 300)}</th>'
            f"{''.join(sizes)}</tr>"
        )
    more = len(names) - FILE_ROWS
    out = [
        "<h4>Files</h4>",
        f'<table class="files"><tr><th>file</th>{head}</tr>{"".join(rows)}</table>',
    ]
    if more > 0:
        out.append(f'<p class="cut">{more:,} more files not listed</p>')
    if not names:
        out.append("<p>no files in either image</p>")
    if story.power_loss:
        lost = lost_lines(story.before, story.after)
        items = "".join(f"<li>{esc(line.strip(), 600)}</li>" for line in lost[1 : LINES + 1])
        extra = f"<li>… {len(lost) - 1 - LINES:,} more</li>" if len(lost) - 1 > LINES else ""
        out.append(f'<p class="lost">{esc(lost[0])}</p>' + (f"<ul>{items}{extra}</ul>"
                                                           if items else ""))  # fmt: skip
    else:
        out.append("<p>a process crash: the page cache survived, nothing written was lost</p>")
    return "\n".join(out)


def _recovery(story: Story) -> str:
    if story.recovery_point is None:
        return ""
    j = story.recovery_point
    ops = story.recovery_ops[: j + 1]
    lines = [f"{'>>' if i == j else f'{i:5}'} {op.describe()}" for i, op in enumerate(ops)]
    if len(lines) > LINES:
        lines = [f"… {len(lines) - LINES:,} earlier operations not shown", *lines[-LINES:]]
    return (
        f"<h4>Then the recovery crashed</h4><p>the backend reopened that image and crashed "
        f"(<code>{esc(story.recovery_variant, 200)}</code>) before its operation {j}:</p>"
        f"{_pre(chr(10).join(lines))}"
    )


def _warnings(verdict: Verdict) -> str:
    if not verdict.warnings:
        return ""
    items = "".join(
        f'<li data-warning-index="{i}"><b>{esc(w.rule or "-", 80)}</b> '
        f"(only under {esc(', '.join(w.profiles) or 'other profiles', 200)}): "
        f"{esc(w.error, 600)}{_command(w.reproducer, f'warning-{i}')}</li>"
        for i, w in enumerate(verdict.warnings[:LISTED])
    )
    more = len(verdict.warnings) - LISTED
    extra = f"<li>… {more:,} more not listed</li>" if more > 0 else ""
    return (
        '<section id="warnings"><h2>Warnings (other file-system profiles)</h2>'
        f"<ul>{items}{extra}</ul></section>"
    )


_CSS = """
:root{--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--mute:#57606a;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:16px 24px;color:#1f2328}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--bg);border:1px solid var(--line);padding:8px;overflow:auto;max-height:28em;
white-space:pre-wrap;word-break:break-word}
h1{margin:.2em 0;font-size:20px}h2{border-bottom:1px solid var(--line);padding-bottom:4px;
margin-top:1.6em}h3{margin:.3em 0}h4{margin:1em 0 .3em}
.headline{font-weight:600;font-size:15px;padding:8px 12px;border-radius:6px;background:var(--bg);
border-left:6px solid var(--mute)}
.headline.failed{border-color:var(--bad)}.headline.passed{border-color:var(--ok)}
.headline.incomplete{border-color:var(--warn)}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}
.facts.row{display:flex;flex-wrap:wrap;gap:4px 8px}
.facts.row dd{margin-right:14px}
.facts dt{color:var(--mute)}.facts dd{margin:0;word-break:break-word}
table{border-collapse:collapse}td,th{border-bottom:1px solid var(--line);padding:4px 8px;
text-align:left;vertical-align:top}.num{text-align:right;white-space:nowrap}
.status{font-weight:600;text-transform:uppercase;font-size:12px}
.status.ran,.status.passed{color:var(--ok)}.status.failed{color:var(--bad)}
.status.incomplete,.status.skipped{color:var(--warn)}.status.pending,.status.running{color:var(--mute)}
.bad{color:var(--bad)}.unknown{color:var(--warn);font-style:italic}.cut{color:var(--mute);
font-size:12px}
.meter{display:flex;align-items:center;gap:10px;margin:4px 0}.meter .label{width:14em}
.meter .bar{flex:0 0 320px;height:12px;background:#eaeef2;border-radius:6px;overflow:hidden}
.meter .bar span{display:block;height:100%;background:var(--ok)}
.strip{display:flex;flex-wrap:wrap;align-items:stretch;gap:1px;padding:6px;
background:var(--bg);border:1px solid var(--line)}
.op{display:inline-block;width:9px;height:22px;border-radius:2px;background:#afb8c1}
.op.write{background:#54aeff}.op.sync{background:var(--ok)}.op.syncfail{background:#8250df}
.op.name{background:#d4a72c}.op.end{background:transparent;border:1px dashed var(--mute)}
.op.chk{box-shadow:inset 0 -4px 0 #1f2328}
.mk{display:inline-block;width:3px;height:22px;margin:0 1px}.mk.ack{background:var(--ok)}
.mk.crash{background:var(--bad);width:5px}
.legend{font-size:12px;color:var(--mute)}.legend .op,.legend .mk{height:12px;vertical-align:middle}
.tlbox{display:flex;border:1px solid var(--line);background:var(--bg)}
.tlnames{display:grid;grid-auto-rows:1.5em;align-items:center;padding:4px 0;flex:none;
border-right:1px solid var(--line);max-width:22em}
.tlnames span{padding:0 8px;font:12px ui-monospace,monospace;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.tlnames .corner{color:var(--mute)}
.tlwrap{overflow-x:auto;flex:1}
.timeline{display:grid;grid-auto-rows:1.5em;align-items:center;position:relative;
padding:4px 8px;width:max-content}
.timeline .idx{font-size:10px;color:var(--mute)}
.timeline b.op{width:auto;height:1.2em;font:bold 10px/1.2em ui-monospace,monospace;color:#fff;
text-align:center;z-index:1;margin:0 1px}
.timeline b.op.late{opacity:.35}
.line{justify-self:start;width:3px;height:100%;align-self:stretch;margin-left:-2px;z-index:0}
.line.ack{background:var(--ok)}.line.crash{background:var(--bad);width:4px;z-index:3}
.failure{border:1px solid var(--line);border-left:6px solid var(--mute);border-radius:6px;
padding:8px 14px;margin:14px 0}
.failure[data-severity=lost]{border-left-color:var(--bad)}
.failure[data-severity=reappears]{border-left-color:#bc4c00}
.failure[data-severity=contract]{border-left-color:var(--warn)}
.failure.brief{padding:4px 10px;margin:4px 0}
.error{font-weight:600;word-break:break-word}
.sev{font-size:11px;font-weight:600;padding:1px 6px;border-radius:10px;background:#eaeef2}
.sev.lost{background:#ffebe9;color:var(--bad)}.sev.contract{background:#fff8c5;color:var(--warn)}
.cmd{display:flex;gap:6px;align-items:flex-start;margin:2px 0}
.cmd code{flex:1;background:var(--bg);border:1px solid var(--line);padding:4px 6px;
word-break:break-all}
button{font:12px system-ui,sans-serif;cursor:pointer}
table.files tr.changed th{color:var(--bad)}.gone{color:var(--bad)}
.lost{font-weight:600}
footer{margin-top:2em;color:var(--mute);font-size:12px}
@media print{button,.tools{display:none}pre{max-height:none}}
"""

_JS = """
(function () {
  "use strict";
  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  function said(button, text) {
    button.textContent = text;
    setTimeout(function () { button.textContent = "copy"; }, 1500);
  }
  window.addEventListener("load", function () {
    var crashes = document.querySelectorAll(".tlwrap .line.crash");
    for (var i = 0; i < crashes.length; i++) {
      var wrap = crashes[i].closest(".tlwrap");
      wrap.scrollLeft = crashes[i].offsetLeft - wrap.clientWidth / 2;
    }
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button") : null;
    if (!button) { return; }
    var copy = button.getAttribute("data-copy");
    if (copy) {
      var code = document.getElementById(copy);
      if (!code) { return; }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(code.textContent).then(
          function () { said(button, "copied"); },
          function () { selectText(code); said(button, "selected"); });
      } else {
        selectText(code);
        said(button, "selected");
      }
      return;
    }
    var toggle = button.getAttribute("data-toggle");
    if (toggle) {
      var all = document.querySelectorAll("#failures details");
      for (var i = 0; i < all.length; i++) { all[i].open = toggle === "open"; }
    }
  });
}());
"""
