"""CrossHair over the PEP 316 contracts of the pure functions (CHECK-1..CHECK-5).

``scopecheck crosshair`` runs ``crosshair check --analysis_kind=PEP316`` over exactly the modules
in :data:`TARGETS`, one process per module so each gets its own wall time, with a CPU-time bound
per postcondition (``--per_condition_timeout``) and an early stop when the search stops finding
new paths (``--max_uninteresting_iterations``).  ``--report_all`` makes CrossHair print a verdict
for every postcondition, so a contract CrossHair silently skipped — or one it could not even
start because no input met the preconditions — fails the run instead of passing it vacuously.

``scopecheck crosshair --planted`` proves the contracts have teeth: each :class:`PlantedBug`
copies one contracted module, changes one line inside one function, and runs CrossHair on that
function of the copy; CrossHair must exit 1 with a counterexample (CHECK-5).  The copy keeps the
original contract text, so the planted bug is checked against exactly what CI checks.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

import attrs

T = TypeVar("T")

#: The modules whose contracts CI checks (importable names), each with the number of
#: consecutive path-search iterations without progress after which CrossHair stops.  The counts
#: are the smallest that catch every planted bug of the module (:data:`PLANTED`, CHECK-5):
#: paging needs the deepest search (a cursor equal to a seq, two elements in descending order).
TARGETS: dict[str, int] = {
    "scopecheck.models.scope": 10,
    "scopecheck.impl.jsonl.session_paths": 10,
    "scopecheck.models.fork_policy": 10,
    "scopecheck.impl.validation": 30,
    "scopecheck.impl.jsonl.highwater": 10,
}

_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<kind>error|info|warning): (?P<text>.*)$")
_POST = re.compile(r"^\s*post(?:\[[^\]]*\])?:\s*\S")
_OK_VERDICTS = ("Confirmed over all paths.", "Not confirmed.")


@attrs.frozen
class Budget:
    """How long CrossHair may search.

    ``per_condition_timeout`` (CPU seconds per postcondition) is only a cap: the iteration counts
    of :data:`TARGETS` stop the search first, which keeps verdicts the same on a slow or loaded
    machine.  ``per_path_timeout`` bounds one path (and the solver) so a loaded machine does not
    cut paths short.  ``iterations`` overrides every module's count (for longer runs).
    """

    per_condition_timeout: float = 10.0
    per_path_timeout: float = 2.0
    iterations: int | None = None

    def iterations_for(self, module: str) -> int:
        return self.iterations if self.iterations is not None else TARGETS[module]


def module_path(module: str) -> Path:
    """The file of an importable module (the copy this interpreter would import)."""
    loaded = importlib.import_module(module)
    assert loaded.__file__ is not None
    return Path(loaded.__file__)


def command(targets: list[str], budget: Budget, iterations: int) -> list[str]:
    """The ``crosshair check`` command line for ``targets`` (file paths, ``file:line`` allowed)."""
    return [
        sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--per_condition_timeout={budget.per_condition_timeout:g}",
        f"--per_path_timeout={budget.per_path_timeout:g}",
        f"--max_uninteresting_iterations={iterations}",
        "--report_all",
        *targets,
    ]


@attrs.frozen
class Run:
    """One CrossHair process: its output, wall seconds and CPU seconds (user + system)."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float


def _run(targets: list[str], budget: Budget, iterations: int) -> Run:
    """One CrossHair process; its CPU time comes from ``wait4`` so parallel runs stay apart."""
    env = dict(os.environ)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            command(targets, budget, iterations), stdout=out, stderr=err, text=True, env=env
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return Run(
            process.returncode,
            out.read(),
            err.read(),
            seconds,
            usage.ru_utime + usage.ru_stime,
        )


def post_lines(source: str) -> list[int]:
    """1-based lines of the ``post:`` conditions written in ``source``'s docstrings."""
    lines = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = node.body[0] if node.body else None
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)):
            continue
        if not isinstance(doc.value.value, str):
            continue
        first = doc.lineno
        for offset, text in enumerate(source.splitlines()[first - 1 : doc.end_lineno]):
            if _POST.match(text):
                lines.append(first + offset)
    return sorted(lines)


@attrs.frozen
class ModuleReport:
    """The outcome of CrossHair over one module."""

    module: str
    path: str
    seconds: float
    cpu_seconds: float
    returncode: int
    #: Postcondition line -> CrossHair's verdict text (``--report_all``).
    verdicts: dict[int, str]
    #: Counterexamples and errors, as CrossHair printed them.
    findings: tuple[str, ...]
    #: Postconditions written in the module that CrossHair gave no acceptable verdict.
    unchecked: tuple[int, ...]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.findings and not self.unchecked


def check_module(module: str, budget: Budget) -> ModuleReport:
    """Run CrossHair over one module and audit that every postcondition got a verdict."""
    path = module_path(module)
    done = _run([str(path)], budget, budget.iterations_for(module))
    verdicts: dict[int, str] = {}
    findings: list[str] = []
    for line in done.stdout.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        if match["kind"] == "info":
            verdicts[int(match["line"])] = match["text"]
        else:
            findings.append(f"{Path(match['file']).name}:{match['line']}: {match['text']}")
    expected = post_lines(path.read_text())
    unchecked = tuple(n for n in expected if verdicts.get(n) not in _OK_VERDICTS)
    return ModuleReport(
        module,
        str(path),
        done.seconds,
        done.cpu_seconds,
        done.returncode,
        verdicts,
        tuple(findings),
        unchecked,
        done.stderr[-2000:],
    )


def _parallel(jobs: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Run the jobs (each waits on one CrossHair process) on ``workers`` threads, in order."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda job: job(), jobs))


def check_all(budget: Budget, workers: int = 2) -> list[ModuleReport]:
    """Every module of :data:`TARGETS`, ``workers`` CrossHair processes at a time."""
    return _parallel([partial(check_module, m, budget) for m in TARGETS], workers)


# -- planted bugs -----------------------------------------------------------------------------


@attrs.frozen
class PlantedBug:
    """One mistake planted in a copy of a contracted function: ``old`` becomes ``new``."""

    name: str
    module: str
    function: str
    old: str
    new: str
    description: str
    #: Text of the one ``post:`` line of the checked function that must catch the bug.
    post: str
    #: The contracted function CrossHair checks (default: ``function`` itself).
    checked_by: str | None = None


PLANTED: tuple[PlantedBug, ...] = (
    PlantedBug(
        "encode-keeps-slash",
        "scopecheck.models.scope",
        "_encode",
        "if ch in _UNRESERVED:",
        'if ch in _UNRESERVED or ch == "/":',
        "the encoder leaves '/' unescaped, so a scope ID could name a path (SCOPE-4)",
        checked_by="encode_uri_component",
        post="set(__return__) <= _ENCODED_ALPHABET",
    ),
    PlantedBug(
        "decode-accepts-any-spelling",
        "scopecheck.models.scope",
        "decode_uri_component",
        "        if _encode(text) != encoded:\n            return None\n",
        "",
        "the decoder accepts non-canonical spellings, so two file names decode to one ID",
        post="_encode(__return__) == encoded",
    ),
    PlantedBug(
        "scope-id-dots-rejected",
        "scopecheck.models.scope",
        "scope_id_problem",
        "if not scope_id:",
        'if not scope_id or scope_id in (".", ".."):',
        "the valid scope IDs '.' and '..' are refused as if they were paths (SCOPE-2)",
        post="(__return__ is None) ==",
    ),
    PlantedBug(
        "sidecar-name-without-prefix",
        "scopecheck.impl.jsonl.session_paths",
        "sidecar_name",
        "return SIDECAR_PREFIX + encoded + SIDECAR_SUFFIX",
        "return encoded + SIDECAR_SUFFIX",
        "the sidecar name loses its prefix and no longer decodes to its scope (JSONL-2)",
        post="decode_sidecar_name(__return__) == scope_id",
    ),
    PlantedBug(
        "sidecar-decode-any-scope",
        "scopecheck.impl.jsonl.session_paths",
        "decode_sidecar_name",
        "if not stem or len(stem) > MAX_ENCODED_SCOPE_ID:",
        "if len(stem) > MAX_ENCODED_SCOPE_ID:",
        "'scope-.scope' decodes to the empty scope ID, which no scope can have (SCOPE-2)",
        post="scope_id_problem(__return__) is None",
    ),
    PlantedBug(
        "main-name-empty-stem",
        "scopecheck.impl.jsonl.session_paths",
        "decode_main_name",
        "return decode_uri_component(stem) if stem else None",
        "return decode_uri_component(stem)",
        "'.jsonl' is listed as a session with the empty id",
        post='__return__ != ""',
    ),
    PlantedBug(
        "classify-pending-unknown",
        "scopecheck.models.fork_policy",
        "classify",
        "case _ if name.startswith((OP_PREFIX, PENDING_PREFIX)):",
        "case _ if name.startswith(OP_PREFIX):",
        "pi.pending.* is no longer excluded and fails the fork as unknown (FORK-7)",
        post="(__return__ is Disposition.EXCLUDE) ==",
    ),
    PlantedBug(
        "classify-pi-prefix",
        "scopecheck.models.fork_policy",
        "classify",
        "case _ if is_reserved(name):",
        'case _ if name.startswith("pi"):',
        "'pix' (an application namespace) is treated as reserved (FORK-8)",
        post="(__return__ is Disposition.APPLICATION) ==",
    ),
    PlantedBug(
        "classify-list-copies-builtins",
        "scopecheck.models.fork_policy",
        "classify_list",
        "if disposition in (Disposition.EXCLUDE, Disposition.APPLICATION):",
        "if disposition is not Disposition.UNKNOWN_RESERVED:",
        "a list under a scalar built-in (pi.session.name) gets a scalar disposition (FORK-9)",
        post="__return__ in LIST_DISPOSITIONS",
    ),
    PlantedBug(
        "stop-page-drops-marker",
        "scopecheck.impl.validation",
        "stop_page",
        "return list(elements[: index + 1])",
        "return list(elements[:index])",
        "stop_at_tag cuts before the marker instead of after it (LIST-5)",
        post="stops_at_marker(elements, stop_at_tag, __return__)",
    ),
    PlantedBug(
        "page-cursor-inclusive",
        "scopecheck.impl.validation",
        "select_page",
        "picked = [e for e in elements if cursor is None or e.seq > cursor]",
        "picked = [e for e in elements if cursor is None or e.seq >= cursor]",
        "an ascending read returns the cursor's own element again (LIST-2)",
        post="_fits(__return__, cursor, order, limit)",
    ),
    PlantedBug(
        "page-desc-unsorted",
        "scopecheck.impl.validation",
        "select_page",
        "picked = [e for e in reversed(elements) if cursor is None or e.seq < cursor]",
        "picked = [e for e in elements if cursor is None or e.seq < cursor]",
        "a descending read returns the oldest elements first (LIST-4)",
        post="_skips_none(elements, cursor, order, __return__)",
    ),
    PlantedBug(
        "page-ignores-stop-tag",
        "scopecheck.impl.validation",
        "select_page",
        "return stop_page(picked[:limit], stop_at_tag)",
        "return picked[:limit]",
        "the page runs past the stop_at_tag marker (LIST-5)",
        post="_cut_right(elements, cursor, order, limit, stop_at_tag, __return__)",
    ),
    PlantedBug(
        "high-water-ignores-header",
        "scopecheck.impl.jsonl.highwater",
        "high_water",
        "high = 0 if header_next_seq is None else header_next_seq - 1",
        "high = 0 if header_next_seq is None or file_tops else header_next_seq - 1",
        "a rewritten file's header nextSeq is ignored once any record exists (JSONL-7)",
        post="claim <= __return__",
    ),
    PlantedBug(
        "high-water-first-file-only",
        "scopecheck.impl.jsonl.highwater",
        "high_water",
        "for top in file_tops:",
        "for top in file_tops[:1]:",
        "only the main log's records count; sidecar seqs could be reissued (JSONL-7)",
        post="claim <= __return__",
    ),
)


@attrs.frozen
class PlantedReport:
    name: str
    description: str
    caught: bool
    #: CrossHair's first counterexample or error for the planted copy ("" when it escaped).
    counterexample: str


def _function(tree: ast.Module, name: str, bug: PlantedBug) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ValueError(f"{bug.name}: no function {name!r} in {bug.module}")


def _once(text: str, part: str, bug: PlantedBug, where: str) -> None:
    if text.count(part) != 1:
        raise ValueError(
            f"{bug.name}: {part!r} occurs {text.count(part)} times in {where}; update the planted "
            "bug to the current source"
        )


def plant(bug: PlantedBug, directory: Path) -> tuple[Path, int]:
    """Write the module with ``bug`` planted to ``directory``; return it and the line of the
    checked function's ``def``.

    The checked function keeps only the ``post:`` line named by ``bug.post``: CrossHair checks
    every postcondition as a separate search with its own budget, so the search for that line is
    the same one the full contract gets in CI, and the other lines would only cost time.
    """
    source = module_path(bug.module).read_text()
    node = _function(ast.parse(source), bug.function, bug)
    assert node.end_lineno is not None
    lines = source.splitlines(keepends=True)
    body = "".join(lines[node.lineno - 1 : node.end_lineno])
    _once(body, bug.old, bug, bug.function)
    lines[node.lineno - 1 : node.end_lineno] = body.replace(bug.old, bug.new).splitlines(True)
    checked = _function(ast.parse("".join(lines)), bug.checked_by or bug.function, bug)
    assert checked.end_lineno is not None
    posts = [n - 1 for n in post_lines("".join(lines)) if checked.lineno <= n <= checked.end_lineno]
    keep = [n for n in posts if bug.post in lines[n]]
    if len(keep) != 1:
        raise ValueError(f"{bug.name}: {len(keep)} post lines of {checked.name} hold {bug.post!r}")
    for index in sorted(set(posts) - set(keep), reverse=True):
        del lines[index]
    target = directory / f"planted_{bug.name.replace('-', '_')}.py"
    target.write_text("".join(lines))
    return target, checked.lineno


def run_planted(
    budget: Budget, bugs: tuple[PlantedBug, ...] = PLANTED, workers: int = 2
) -> tuple[list[PlantedReport], list[Run]]:
    """Plant every bug in its own copy; one CrossHair process per module, each with the
    module's own budget (the one CI uses).

    Caught means: CrossHair prints a counterexample or error for that copy *and* exits 1 (a
    CrossHair crash also exits 1 but prints none, so it catches nothing).
    """
    modules = sorted({bug.module for bug in bugs}, key=list(TARGETS).index)
    with tempfile.TemporaryDirectory(prefix="scopecheck-crosshair-") as tmp:
        planted = {bug.name: plant(bug, Path(tmp)) for bug in bugs}
        jobs = [
            partial(
                _run,
                [
                    f"{path}:{line}"
                    for b in bugs
                    if b.module == m
                    for path, line in [planted[b.name]]
                ],
                budget,
                budget.iterations_for(m),
            )
            for m in modules
        ]
        runs = dict(zip(modules, _parallel(jobs, workers), strict=True))
    reports = []
    for bug in bugs:
        run = runs[bug.module]
        name = planted[bug.name][0].name
        found = [
            m["text"]
            for m in map(_LINE.match, run.stdout.splitlines())
            if m is not None and m["kind"] == "error" and Path(m["file"]).name == name
        ]
        caught = run.returncode == 1 and bool(found)
        reports.append(PlantedReport(bug.name, bug.description, caught, found[0] if found else ""))
    return reports, list(runs.values())


# -- the command ------------------------------------------------------------------------------


def crosshair_command(*, planted: bool, iterations: int | None, workers: int, as_json: bool) -> int:
    """``scopecheck crosshair``: exit 0 when every contract holds (and, with ``planted``, every
    planted bug is caught), 1 otherwise.  Prints per-module wall and CPU seconds."""
    import orjson

    budget = Budget(iterations=iterations)
    start = time.perf_counter()
    reports = check_all(budget, workers)
    out: dict[str, object] = {
        "budget": attrs.asdict(budget),
        "modules": [
            {
                "module": r.module,
                "iterations": budget.iterations_for(r.module),
                "command": " ".join(command([r.path], budget, budget.iterations_for(r.module))[1:]),
                "seconds": round(r.seconds, 2),
                "cpu_seconds": round(r.cpu_seconds, 2),
                "conditions": len(r.verdicts),
                "confirmed": sum(v == _OK_VERDICTS[0] for v in r.verdicts.values()),
                "findings": list(r.findings),
                "unchecked_lines": list(r.unchecked),
                "ok": r.ok,
            }
            for r in reports
        ],
    }
    ok = all(r.ok for r in reports)
    bugs: list[PlantedReport] = []
    if planted:
        bugs, runs = run_planted(budget, workers=workers)
        out["planted"] = [attrs.asdict(b) for b in bugs]
        out["planted_cpu_seconds"] = round(sum(r.cpu_seconds for r in runs), 2)
        ok = ok and all(b.caught for b in bugs)
    out["seconds"] = round(time.perf_counter() - start, 2)
    if as_json:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if ok else 1
    for r in reports:
        status = "ok" if r.ok else "FAILED"
        print(
            f"{status:6} {r.module:22} {len(r.verdicts):2} conditions "
            f"({sum(v == _OK_VERDICTS[0] for v in r.verdicts.values())} confirmed over all paths)"
            f"  {r.seconds:5.1f}s wall {r.cpu_seconds:5.1f}s cpu"
        )
        for finding in r.findings:
            print(f"       {finding}")
        for line in r.unchecked:
            print(f"       {r.path}:{line}: no verdict ({r.verdicts.get(line, 'not reported')})")
        if r.returncode not in (0, 1) or (r.returncode == 1 and not r.findings):
            print(f"       crosshair exited {r.returncode}: {r.stderr.strip()[-400:]}")
    for bug in bugs:
        mark = "caught" if bug.caught else "ESCAPED"
        print(f"{mark:7} {bug.name:30} {bug.counterexample[:90]}")
    print(f"total {out['seconds']}s wall")
    return 0 if ok else 1
