"""CrossHair over the PEP 316 contracts, and proof that it catches a planted bug in each
contracted function (CHECK-1..CHECK-5).

The budgets are :data:`scopecheck.tools.crosshair_check.TARGETS`: iteration counts, not wall
time, so a loaded machine gives the same verdicts, only later.  Together the two CrossHair tests use
about 40 CPU seconds, two CrossHair processes at a time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scopecheck.tools.crosshair_check import (
    PLANTED,
    TARGETS,
    Budget,
    PlantedBug,
    check_all,
    module_path,
    plant,
    post_lines,
    run_planted,
)


def _contracted_functions() -> set[tuple[str, str]]:
    """(module, function) for every function of TARGETS with a ``post:`` line."""
    found = set()
    for module in TARGETS:
        source = module_path(module).read_text()
        posts = post_lines(source)
        for node in ast.parse(source).body:
            end = node.end_lineno if isinstance(node, ast.FunctionDef) else None
            if end is not None and any(node.lineno <= n <= end for n in posts):
                found.add((module, node.name))
    return found


@pytest.mark.slow
@pytest.mark.rule("CHECK-1", "CHECK-2", "CHECK-3", "CHECK-4", "CHECK-5")
def test_crosshair_finds_no_counterexample_and_checks_every_condition() -> None:
    """Every target module: CrossHair exits 0, reports nothing, and gives every ``post:`` line a
    verdict (a skipped or unmeetable condition would pass vacuously)."""
    reports = check_all(Budget())
    assert [r.module for r in reports] == list(TARGETS)
    for report in reports:
        assert report.verdicts, f"{report.module}: CrossHair checked nothing\n{report.stderr}"
        assert report.ok, (
            f"{report.module}: exit {report.returncode}, findings {report.findings}, "
            f"conditions without a verdict at lines {report.unchecked}\n{report.stderr}"
        )


@pytest.mark.slow
@pytest.mark.rule("CHECK-5")
def test_crosshair_catches_a_planted_bug_in_every_contracted_function() -> None:
    """Each planted bug gets a counterexample under its module's CI budget, and every
    contracted function is the checked function of at least one planted bug."""
    covered = {(bug.module, bug.checked_by or bug.function) for bug in PLANTED}
    assert _contracted_functions() <= covered, _contracted_functions() - covered
    reports, runs = run_planted(Budget())
    escaped = [r.name for r in reports if not r.caught]
    assert not escaped, (escaped, [run.stderr for run in runs])


@pytest.mark.rule("CHECK-5")
def test_a_planted_bug_that_no_longer_matches_the_source_is_an_error(tmp_path: Path) -> None:
    """A planted bug whose text drifted from the source fails loudly instead of planting nothing."""
    stale = PlantedBug(
        "stale", "scopecheck.impl.jsonl.highwater", "high_water", "no such text", "x", "", ""
    )
    with pytest.raises(ValueError, match="occurs 0 times"):
        plant(stale, tmp_path)


@pytest.mark.rule("CHECK-5")
def test_a_planted_copy_keeps_only_the_named_condition(tmp_path: Path) -> None:
    """The copy differs from the module by the planted line and the other ``post:`` lines of the
    checked function; the named condition and everything else stay word for word."""
    bug = next(b for b in PLANTED if b.name == "high-water-first-file-only")
    path, line = plant(bug, tmp_path)
    text = path.read_text()
    assert bug.new in text and bug.old not in text
    assert text.splitlines()[line - 1].startswith("def high_water(")
    posts = [text.splitlines()[n - 1].strip() for n in post_lines(text)]
    assert len(posts) == 1 and bug.post in posts[0]
