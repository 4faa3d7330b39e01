"""The spec rules and their coverage: ``scopecheck rules [--json]``.

Rules live in ``spec/rules/*.toml`` as ``[[rule]]`` tables (``id``, ``source``, ``statement``,
optional ``gap``).  Tests cite them with ``@pytest.mark.rule("SEQ-2")``.  Coverage is computed by
collecting the test suite with pytest and reading each test's markers (SPEC-3), so a rule is
covered exactly when some collected test names it.  A test naming a rule that does not exist is
an error, not a silent miss (SPEC-2); a rule with a ``gap`` is reported with its reason (SPEC-4).
How this works for people is in ``spec/README.md``.

The rules ship inside the package (``scopecheck/spec/rules``), so ``scopecheck rules`` works
from an installed wheel in any directory.  Coverage needs the test suite, which is not
installed: outside a checkout the report says so and lists the rules without coverage, never
as uncovered (INSTALL-3).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import orjson

#: The form of a rule id: upper-case words joined by ``-`` and a number (``FORK-12``).
RULE_ID: Final = re.compile(r"[A-Z]+(-[A-Z]+)*-\d+")
REQUIRED_KEYS: Final = ("id", "source", "statement")
OPTIONAL_KEYS: Final = ("gap",)
#: Environment variable that names the repository root (the directory holding ``spec/``).
ROOT_ENV: Final = "SCOPECHECK_ROOT"
RULES_DIR: Final = Path("spec") / "rules"
#: The ``scopecheck`` package's folder (this module is in its ``tools/``).
PACKAGE_ROOT: Final = Path(__file__).resolve().parents[1]
#: Where the installed rules are (``INSTALLED_ROOT / RULES_DIR``): the package in a wheel
#: (``scopecheck/spec/rules``); in a source checkout, whose ``spec/`` installs as
#: ``scopecheck.spec`` (pyproject's package-dir), the checkout beside the package.
INSTALLED_ROOT: Final = PACKAGE_ROOT if (PACKAGE_ROOT / RULES_DIR).is_dir() else PACKAGE_ROOT.parent
#: Why coverage is missing from a report made outside a checkout.
NO_CHECKOUT: Final = (
    "coverage needs the test suite, which is not installed: run from a scopecheck checkout "
    f"or set {ROOT_ENV} to one"
)


class SpecError(Exception):
    """The rules cannot be loaded or the tests cannot be collected.

    Not a storage error (those are :class:`scopecheck.models.errors.ScopecheckError`): this is about
    the checkout itself.  ``problems`` lists every fault found; ``str()`` is one line for the CLI.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@attrs.frozen
class Rule:
    """One numbered rule of the contract."""

    id: str
    source: str
    statement: str
    gap: str | None = None
    file: str = ""


@attrs.frozen
class CollectedTest:
    """A collected pytest node and the rule ids its markers cite."""

    nodeid: str
    rules: tuple[str, ...]


@attrs.frozen
class Collection:
    """What one pytest collection found: the tests, and any files that failed to collect."""

    tests: tuple[CollectedTest, ...]
    errors: tuple[str, ...] = ()


@attrs.frozen
class RuleCoverage:
    rule: Rule
    tests: tuple[str, ...]


@attrs.frozen
class CoverageReport:
    """Coverage of every rule, plus what does not add up (unknown ids, collection errors)."""

    rules: tuple[RuleCoverage, ...]
    #: rule id -> the tests that cite it although no such rule exists (SPEC-2)
    unknown: tuple[tuple[str, tuple[str, ...]], ...]
    collection_errors: tuple[str, ...]
    #: Why no tests were collected (outside a checkout), or ``None`` when coverage is known.
    unavailable: str | None = None

    @property
    def uncovered(self) -> tuple[str, ...]:
        """Rules no collected test cites, gapped or not (SPEC-4: a gap is never 'covered')."""
        return tuple(item.rule.id for item in self.rules if not item.tests)

    @property
    def gaps(self) -> tuple[RuleCoverage, ...]:
        return tuple(item for item in self.rules if item.rule.gap is not None)

    @property
    def ok(self) -> bool:
        """No test cites an unknown rule and every test file collected."""
        return not self.unknown and not self.collection_errors

    def to_json(self) -> dict[str, Any]:
        """The ``scopecheck rules --json`` document (SPEC-3).

        ``rules`` and ``uncovered`` are the documented shape; ``gaps``, ``unknown`` and
        ``collection_errors`` are extra keys that are always present.
        """
        known = self.unavailable is None
        return {
            "rules": [
                {
                    "id": item.rule.id,
                    "source": item.rule.source,
                    "statement": item.rule.statement,
                    "tests": list(item.tests) if known else None,
                }
                for item in self.rules
            ],
            "uncovered": list(self.uncovered) if known else None,
            "gaps": [
                {"id": item.rule.id, "reason": item.rule.gap, "tests": len(item.tests)}
                for item in self.gaps
            ],
            "unknown": [{"id": rule_id, "tests": list(tests)} for rule_id, tests in self.unknown],
            "collection_errors": list(self.collection_errors),
            "coverage": "computed" if known else f"unavailable: {self.unavailable}",
        }


# -- finding and loading the rules ------------------------------------------------------------


def _has_rules(directory: Path) -> bool:
    return (directory / RULES_DIR).is_dir()


def _is_checkout(directory: Path) -> bool:
    """A directory with rules *and* the tests that cite them."""
    return _has_rules(directory) and (directory / "tests").is_dir()


def find_root(start: Path | None = None) -> Path | None:
    """The checkout whose tests give coverage: ``$SCOPECHECK_ROOT``, else the nearest directory
    at or above ``start`` (default: the working directory) holding ``spec/rules`` and
    ``tests``, else the one above this package (a source checkout or an editable install);
    ``None`` for an installed wheel used elsewhere."""
    env = os.environ.get(ROOT_ENV)
    if env:
        root = Path(env).resolve()
        if not _has_rules(root):
            raise SpecError([f"{ROOT_ENV}={env} has no {RULES_DIR}/ directory"])
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents, PACKAGE_ROOT.parent):
        if _is_checkout(candidate):
            return candidate
    return None


def _rule_from_table(table: object, where: str, problems: list[str]) -> Rule | None:
    if not isinstance(table, dict):
        problems.append(f"{where}: expected a [[rule]] table, got {type(table).__name__}")
        return None
    bad = False
    for key in REQUIRED_KEYS:
        if key not in table:
            problems.append(f"{where}: missing {key!r}")
            bad = True
    for key in sorted(set(table) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS)):
        problems.append(
            f"{where}: unknown key {key!r} (allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})"
        )
        bad = True
    for key in (*REQUIRED_KEYS, *OPTIONAL_KEYS):
        if key in table and (not isinstance(table[key], str) or not table[key].strip()):
            problems.append(f"{where}: {key!r} must be a non-empty string")
            bad = True
    rule_id = table.get("id")
    if isinstance(rule_id, str) and not RULE_ID.fullmatch(rule_id):
        problems.append(f"{where}: id {rule_id!r} is not of the form PREFIX-n (e.g. SEQ-2)")
        bad = True
    if bad:
        return None
    return Rule(table["id"], table["source"], table["statement"], table.get("gap"), where)


def load_rules(root: Path | None = None) -> tuple[Rule, ...]:
    """Every rule of ``root/spec/rules/*.toml`` (files in name order, rules in file order);
    without ``root``, the rules installed with the package.

    Raises :class:`SpecError` listing every problem: unreadable TOML, a missing or unknown key,
    a malformed id, an id defined twice (SPEC-1).
    """
    root = INSTALLED_ROOT if root is None else root
    files = sorted((root / RULES_DIR).glob("*.toml"))
    if not files:
        raise SpecError([f"no rule files in {root / RULES_DIR}"])
    problems: list[str] = []
    rules: list[Rule] = []
    first_seen: dict[str, str] = {}
    for path in files:
        name = path.relative_to(root).as_posix()
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            problems.append(f"{name}: not valid TOML: {exc}")
            continue
        for key in sorted(set(document) - {"rule"}):
            problems.append(f"{name}: unknown top-level key {key!r} (only [[rule]] tables)")
        tables = document.get("rule", [])
        if not isinstance(tables, list):
            problems.append(f"{name}: 'rule' must be an array of tables ([[rule]])")
            continue
        for index, table in enumerate(tables, start=1):
            label = table.get("id") if isinstance(table, dict) else None
            where = f"{name} rule {index}" + (f" ({label})" if isinstance(label, str) else "")
            rule = _rule_from_table(table, where, problems)
            if rule is None:
                continue
            if rule.id in first_seen:
                problems.append(f"{where}: duplicate id {rule.id} (first in {first_seen[rule.id]})")
                continue
            first_seen[rule.id] = name
            rules.append(attrs.evolve(rule, file=name))
    if problems:
        raise SpecError(problems)
    return tuple(rules)


# -- collecting the tests ---------------------------------------------------------------------


def collect_tests(
    root: Path, paths: Iterable[str] = ("tests", "scopecheck/conformance")
) -> Collection:
    """Collect ``paths`` (relative to ``root``) with pytest in a subprocess and return each test
    with the rule ids it cites (SPEC-3).  A subprocess keeps the test modules out of this
    process and uses the project's own pytest configuration."""
    targets = [p for p in paths if (root / p).exists()]
    if not targets:
        return Collection(())
    if importlib.util.find_spec("pytest") is None:
        raise SpecError(["pytest is not installed; install it (pip install 'scopecheck[test]')"])
    from scopecheck.tools.rules_plugin import OUT_ENV

    with tempfile.TemporaryDirectory(prefix="scopecheck-rules-") as scratch:
        out = Path(scratch) / "collected.json"
        env = dict(os.environ)
        env[OUT_ENV] = str(out)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "scopecheck.tools.rules_plugin",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            *targets,
        ]
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, check=False
        )
        if not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SpecError(
                [f"pytest could not collect the tests (exit {done.returncode}): {tail[0]}"]
            )
        data = orjson.loads(out.read_bytes())
    tests = tuple(CollectedTest(t["nodeid"], tuple(t["rules"])) for t in data["tests"])
    return Collection(tests, tuple(data["errors"]))


def coverage(rules: Sequence[Rule], collection: Collection) -> CoverageReport:
    """Which tests cover which rules, and which cited ids name no rule (SPEC-2, SPEC-3)."""
    by_rule: dict[str, list[str]] = {rule.id: [] for rule in rules}
    unknown: dict[str, list[str]] = {}
    for test in collection.tests:
        for rule_id in test.rules:
            target = by_rule.get(rule_id)
            if target is None:
                target = unknown.setdefault(rule_id, [])
            target.append(test.nodeid)
    return CoverageReport(
        rules=tuple(RuleCoverage(rule, tuple(by_rule[rule.id])) for rule in rules),
        unknown=tuple((rule_id, tuple(tests)) for rule_id, tests in sorted(unknown.items())),
        collection_errors=collection.errors,
    )


def build_report(root: Path | None = None) -> CoverageReport:
    """Load the rules under ``root`` (found by :func:`find_root` when omitted) and collect its
    tests; with no checkout anywhere, the installed rules without coverage."""
    root = find_root() if root is None else root
    if root is None:
        rules = load_rules()
        return CoverageReport(
            rules=tuple(RuleCoverage(rule, ()) for rule in rules),
            unknown=(),
            collection_errors=(),
            unavailable=NO_CHECKOUT,
        )
    return coverage(load_rules(root), collect_tests(root))


# -- output -----------------------------------------------------------------------------------


def _wrap(text: str, indent: str, width: int = 100) -> str:
    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent)


def format_report(report: CoverageReport) -> str:
    """The human form: every rule with its source, statement and covering tests, then the
    uncovered ids, the gaps, and any unknown ids or collection errors."""
    lines: list[str] = []
    for item in report.rules:
        rule = item.rule
        lines.append(f"{rule.id}  [{rule.source}]")
        lines.append(_wrap(rule.statement, "    "))
        if report.unavailable is not None:
            pass
        elif item.tests:
            lines.append(f"    {len(item.tests)} test{'s' if len(item.tests) != 1 else ''}:")
            lines.extend(f"      {nodeid}" for nodeid in item.tests)
        else:
            lines.append("    no tests")
        if rule.gap is not None:
            lines.append(_wrap(f"gap: {rule.gap}", "    "))
        lines.append("")
    total, uncovered = len(report.rules), report.uncovered
    if report.unavailable is not None:
        lines.append(f"{total} rules, {len(report.gaps)} with a gap; {report.unavailable}")
        return "\n".join(lines)
    lines.append(
        f"{total} rules: {total - len(uncovered)} covered, {len(uncovered)} uncovered, "
        f"{len(report.gaps)} with a gap"
    )
    lines.append(_wrap("uncovered: " + (", ".join(uncovered) or "none"), ""))
    if report.gaps:
        lines.append("gaps:")
        lines.extend(_wrap(f"{g.rule.id}: {g.rule.gap}", "  ") for g in report.gaps)
    if report.unknown:
        lines.append("error: tests cite rules that do not exist (fix the marker or add the rule):")
        for rule_id, tests in report.unknown:
            lines.append(f"  {rule_id}: {', '.join(tests)}")
    if report.collection_errors:
        lines.append("error: some test files did not collect, so coverage is incomplete:")
        lines.extend(f"  {error}" for error in report.collection_errors)
    return "\n".join(lines)


def rules_command(
    as_json: bool,
    root: Path | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``scopecheck rules [--json]``: print the rules and their coverage.

    Exit 0 when the report is complete; 1 when a test cites an unknown rule or a test file
    failed to collect (the report is still printed); 2 with one line on ``err`` when the rules
    cannot be found or loaded.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        report = build_report(root)
    except SpecError as exc:
        print(f"scopecheck rules: {exc}", file=err)
        return 2
    if as_json:
        out.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        print(format_report(report), file=out)
    return 0 if report.ok else 1
