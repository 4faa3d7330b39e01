"""Mutation score per package from mutmut's own results (docs/mutation.md).

``mutmut run`` exits 0 however many mutants survive (REFERENCE §7), so the score has to be read
back.  This module runs ``mutmut export-cicd-stats`` (mutmut's machine-readable totals, written to
``mutants/mutmut-cicd-stats.json``), splits the same verdicts per package from mutmut's per-file
``mutants/<path>.meta`` records -- both in the tree mutmut ran in
(scopecheck/tools/mutation_tree.py, default ``.scopecheck/mutation/``) -- subtracts the mutants
triaged as *equivalent* in ``spec/mutation/triage.toml`` and prints killed / survived / timeout /
equivalent / score for ``models`` and ``impl``.  It exits 1 when a package is below the threshold
(default 90 % of the non-equivalent mutants killed), when nothing was checked, or when the per-file
split disagrees with mutmut's own totals (then this module has misread mutmut and its numbers are
worthless).

Usage (from the repository root, after ``python -m scopecheck.tools.mutation_tree run``)::

    python -m scopecheck.tools.mutation_stats                 # every package, threshold 0.9
    python -m scopecheck.tools.mutation_stats --tree DIR      # results of a run in another tree
    python -m scopecheck.tools.mutation_stats --package models --threshold 0.9
    python -m scopecheck.tools.mutation_stats --list-survivors

mutmut is an optional extra (``pip install -e ".[mutation]"``), so this module never imports it:
it reads mutmut's files and calls its command line.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import orjson

from scopecheck.tools.mutation_tree import TREE, mutmut_command

PACKAGES = ("models", "impl")
TRIAGE_PATH = Path("spec/mutation/triage.toml")
# mutmut's results, in the tree it runs in (relative to that tree).
MUTANTS_DIR = Path("mutants")
CICD_STATS = MUTANTS_DIR / "mutmut-cicd-stats.json"
DEFAULT_THRESHOLD = 0.9

# mutmut 3.8.1 ``mutmut/stats.py`` ``status_by_exit_code``: the exit code of the test run against a
# mutant, as stored in the .meta files.  Unknown codes are "suspicious", as in mutmut.
_STATUS_BY_EXIT_CODE: dict[int | None, str] = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    2: "check was interrupted by user",
    None: "not checked",
    33: "no tests",
    34: "skipped",
    35: "suspicious",
    36: "timeout",
    37: "caught by type check",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "segfault",
}


def status_of(exit_code: int | None) -> str:
    """mutmut's verdict for one stored exit code."""
    return _STATUS_BY_EXIT_CODE.get(exit_code, "suspicious")


TRIAGE_KINDS = ("equivalent", "message", "import-time")


@attrs.frozen
class Equivalent:
    """A triaged survivor, left out of the score with its reason.

    ``kind`` is ``equivalent`` (no test can tell the mutant from the original: same behaviour),
    ``message`` (only the wording of a human-readable error message changes: codes and details
    are contract and tested, wording is deliberately not pinned) or ``import-time`` (the mutated
    code only runs while the module is imported, e.g. a validator factory called in a class
    body; mutmut 3 forks every mutant from a process that imported the original, so the mutant
    never runs -- mutmut cannot test it, whatever the tests say).
    """

    name: str
    reason: str
    kind: str = "equivalent"


@attrs.frozen
class PackageScore:
    """Verdict counts of one package.

    ``killed`` counts mutmut's "killed" and "caught by type check"; a timeout is a detection too
    (the mutant made the tests loop) but is reported on its own.  Everything else that was run
    and not detected -- survived, no tests, suspicious, segfault -- is a survivor unless triaged
    equivalent.  ``equivalent``, ``message`` and ``import_time`` count the triaged survivors
    (:class:`Equivalent`), which are out of the score; ``not_checked`` mutants were never run (a
    partial run) and are not in the score either.
    """

    package: str
    killed: int
    timeout: int
    survived: int
    no_tests: int
    other: int
    equivalent: int
    message: int
    import_time: int
    not_checked: int

    @property
    def non_equivalent(self) -> int:
        return self.killed + self.timeout + self.survived + self.no_tests + self.other

    @property
    def score(self) -> float | None:
        checked = self.non_equivalent
        return None if checked == 0 else (self.killed + self.timeout) / checked


def load_triage(path: Path = TRIAGE_PATH) -> list[Equivalent]:
    """The equivalent mutants of the triage list, each with its reason (never an empty one)."""
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text("utf-8"))
    entries = []
    for raw in data.get("equivalent", []):
        name, reason = str(raw["name"]), str(raw.get("reason", "")).strip()
        kind = str(raw.get("kind", "equivalent"))
        if not reason:
            raise ValueError(f"{path}: triaged mutant {name} has no reason; say why")
        if kind not in TRIAGE_KINDS:
            raise ValueError(f"{path}: {name}: kind {kind!r} is not one of {TRIAGE_KINDS}")
        entries.append(Equivalent(name, reason, kind))
    return entries


def load_verdicts(mutants_dir: Path = TREE / MUTANTS_DIR) -> dict[str, int | None]:
    """Every mutant name -> stored exit code, from mutmut's ``<file>.meta`` records."""
    verdicts: dict[str, int | None] = {}
    for package in PACKAGES:
        for meta in sorted((mutants_dir / "scopecheck" / package).rglob("*.py.meta")):
            data = orjson.loads(meta.read_bytes())
            verdicts.update(data.get("exit_code_by_key", {}))
    return verdicts


def package_of(mutant: str) -> str:
    """``models`` for ``scopecheck.models.scope.x_f__mutmut_1`` (mutmut names a mutant by the
    installed module it mutates)."""
    return mutant.removeprefix("scopecheck.").split(".", 1)[0]


def in_sample(mutant: str, every: int) -> bool:
    """Whether ``mutant`` is in the stable 1-in-``every`` sample (a hash of its name, so the
    sample of an unchanged function does not move when other code changes)."""
    digest = hashlib.sha256(mutant.encode("utf-8")).digest()
    return every <= 1 or int.from_bytes(digest[:8], "big") % every == 0


def score_packages(
    verdicts: Mapping[str, int | None], triage: Iterable[Equivalent]
) -> dict[str, PackageScore]:
    kind_of = {e.name: e.kind for e in triage}
    counts: dict[str, dict[str, int]] = {p: {} for p in PACKAGES}
    for name, code in verdicts.items():
        package = package_of(name)
        if package not in counts:
            continue
        status = status_of(code)
        if status == "not checked":
            key = "not_checked"
        elif status in ("killed", "caught by type check"):
            key = "killed"
        elif status == "timeout":
            key = "timeout"
        elif name in kind_of:
            key = kind_of[name]
        elif status == "survived":
            key = "survived"
        elif status == "no tests":
            key = "no_tests"
        else:
            key = "other"
        counts[package][key] = counts[package].get(key, 0) + 1
    return {
        p: PackageScore(
            package=p,
            killed=c.get("killed", 0),
            timeout=c.get("timeout", 0),
            survived=c.get("survived", 0),
            no_tests=c.get("no_tests", 0),
            other=c.get("other", 0),
            equivalent=c.get("equivalent", 0),
            message=c.get("message", 0),
            import_time=c.get("import-time", 0),
            not_checked=c.get("not_checked", 0),
        )
        for p, c in counts.items()
    }


def export_cicd_stats(tree: Path = TREE) -> dict[str, int]:
    """Run ``mutmut export-cicd-stats`` in the tree and read the totals it wrote."""
    proc = subprocess.run(
        mutmut_command(["export-cicd-stats"]),
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not (tree / CICD_STATS).exists():
        raise RuntimeError(
            "mutmut export-cicd-stats failed (is mutmut installed: pip install -e '.[mutation]',"
            f" and did `python -m scopecheck.tools.mutation_tree run` run in {tree}?):"
            f"\n{proc.stdout}{proc.stderr}"
        )
    stats = orjson.loads((tree / CICD_STATS).read_bytes())
    return {k: int(v) for k, v in stats.items()}


def cross_check(totals: Mapping[str, int], verdicts: Mapping[str, int | None]) -> list[str]:
    """Differences between mutmut's own totals and the per-file split (empty if none)."""
    mine = {"killed": 0, "survived": 0, "timeout": 0}
    for code in verdicts.values():
        status = status_of(code)
        if status in mine:
            mine[status] += 1
    problems = [
        f"{key}: mutmut says {totals.get(key)}, the .meta files say {value}"
        for key, value in mine.items()
        if totals.get(key) != value
    ]
    if totals.get("total") != len(verdicts):
        problems.append(
            f"total: mutmut says {totals.get('total')}, the .meta files hold {len(verdicts)}"
        )
    return problems


def parse_samples(specs: Sequence[str]) -> dict[str, int]:
    """``["6", "impl=12"]`` -> ``{"models": 6, "impl": 12}`` (later specs win)."""
    every: dict[str, int] = {}
    for spec in specs:
        package, _, count = spec.rpartition("=")
        targets = [package] if package else list(PACKAGES)
        if package and package not in PACKAGES:
            raise SystemExit(f"--sample {spec}: unknown package {package!r}")
        for target in targets:
            every[target] = int(count)
    return every


def _fmt(score: float | None) -> str:
    return "n/a" if score is None else f"{100 * score:.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scopecheck.tools.mutation_stats",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tree", type=Path, default=TREE, help=f"the tree mutmut ran in (default {TREE})"
    )
    parser.add_argument("--package", choices=PACKAGES, action="append", dest="packages")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--list-survivors", action="store_true")
    parser.add_argument(
        "--sample",
        action="append",
        default=[],
        metavar="[PKG=]N",
        help="score only the stable 1-in-N sample of mutants, for every package or for PKG"
        " (repeatable; the whole set takes hours on two cores)",
    )
    parser.add_argument(
        "--print-sample",
        action="store_true",
        help="print the names of the sample's mutants (for `mutmut run NAME...`) and exit",
    )
    parser.add_argument(
        "--no-export", action="store_true", help="skip mutmut export-cicd-stats (no cross-check)"
    )
    args = parser.parse_args(argv)
    packages = args.packages or list(PACKAGES)

    triage = load_triage()
    all_verdicts = load_verdicts(args.tree / MUTANTS_DIR)
    if not all_verdicts:
        print(
            f"no mutmut results under {args.tree / MUTANTS_DIR}:"
            " run `python -m scopecheck.tools.mutation_tree run` first (docs/mutation.md)"
        )
        return 1
    every = parse_samples(args.sample)
    verdicts = {k: v for k, v in all_verdicts.items() if in_sample(k, every.get(package_of(k), 1))}
    if args.print_sample:
        for name in sorted(verdicts):
            if package_of(name) in packages:
                print(name)
        return 0
    failed = False
    if not args.no_export:
        totals = export_cicd_stats(args.tree)
        print(
            "mutmut export-cicd-stats: "
            + ", ".join(f"{k}={v}" for k, v in totals.items() if k != "total")
            + f", total={totals.get('total')}"
        )
        problems = cross_check(totals, all_verdicts)
        for problem in problems:
            print(f"MISMATCH {problem}")
        failed |= bool(problems)

    stale = [e.name for e in triage if status_of(all_verdicts.get(e.name, 0)) == "killed"]
    unknown = [e.name for e in triage if e.name not in all_verdicts]
    for name in stale:
        print(f"note: {name} is triaged equivalent but a test kills it; drop it from {TRIAGE_PATH}")
    for name in unknown:
        print(f"note: {name} (in {TRIAGE_PATH}) is not a current mutant")

    for package in packages:
        if every.get(package, 1) > 1:
            size = sum(1 for k in verdicts if package_of(k) == package)
            print(f"{package}: scoring the stable 1-in-{every[package]} sample, {size} mutants")
    scores = score_packages(verdicts, triage)
    header = f"{'package':8} {'killed':>7} {'timeout':>7} {'survived':>8} {'no-tests':>8}"
    print(header + f" {'other':>5} {'equiv':>5} {'msg':>4} {'import':>6} {'unrun':>6} {'score':>7}")
    for package in packages:
        s = scores[package]
        print(
            f"{package:8} {s.killed:7} {s.timeout:7} {s.survived:8} {s.no_tests:8} {s.other:5}"
            f" {s.equivalent:5} {s.message:4} {s.import_time:6} {s.not_checked:6}"
            f" {_fmt(s.score):>7}"
        )
        if s.score is None:
            print(f"  {package}: no mutant checked")
            failed = True
        elif s.score < args.threshold:
            print(f"  {package}: below the threshold {_fmt(args.threshold)}")
            failed = True
        if s.not_checked:
            print(f"  {package}: partial run, {s.not_checked} mutants not checked")
    if args.list_survivors:
        equivalent = {e.name for e in triage}
        for name, code in sorted(verdicts.items()):
            status = status_of(code)
            undetected = status in ("survived", "no tests", "suspicious", "segfault")
            if undetected and package_of(name) in packages and name not in equivalent:
                print(f"{status:10} {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
