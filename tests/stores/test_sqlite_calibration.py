"""Calibration of the crash verdicts against SQLite's own durability table (docs/findings.md,
"Calibration"): the sqlite3 example (examples/sqlite3_backend.py) in every journal mode that
keeps its journal on disk and every ``synchronous`` level, each validated with fixed work
(seed 1, 5 examples) and its verdict pinned -- passed, or failed with exactly these rules in
these phases under exactly these file-system profiles (CRASH-SYS-15).

SQLite documents what each cell promises at a power loss (pragma.html, wal.html,
atomiccommit.html, howtocorrupt.html); a pinned verdict is one the findings explain against
that promise, so a change of scopecheck's persistence model (CRASH-SYS-1, CRASH-SYS-14), of
its checks (CRASH-FS-1..9) or of the system's SQLite that moves a cell shows here.  The table
in docs/findings.md is parsed and must say what the pins say, so the two cannot drift.  The
default run validates one passing and one failing cell, DELETE with EXTRA and with FULL: one
setting apart, the fsync of the journal's directory after its unlink.  The rest is ``long``
(SCOPECHECK_LONG=1)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from scopecheck import validate
from scopecheck.crashsim.persistence import PROFILE_NAMES
from scopecheck.examples import sqlite3_backend

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings.md"
CRASH = "crash exploration"
EVERY_PROFILE = frozenset(PROFILE_NAMES)


@attrs.frozen
class Pinned:
    """One cell of SQLite's durability table and the verdict the sqlite3 example gets in it
    (seed 1, 5 examples)."""

    journal: str
    synchronous: str
    outcome: str
    #: ``(phase, rule)`` of every failure, as a set: a rule may fail in several crash kinds.
    failures: frozenset[tuple[str, str]] = frozenset()
    #: The file-system profiles under which some failure happens (CRASH-SYS-15): empty for a
    #: pass.
    profiles: frozenset[str] = frozenset()
    long: bool = True

    @property
    def factory(self) -> str:
        return f"make_backend_{self.journal.lower()}_{self.synchronous.lower()}"

    @property
    def spec(self) -> str:
        return f"scopecheck.examples.sqlite3_backend:{self.factory}"


def crash(*rules: str) -> frozenset[tuple[str, str]]:
    return frozenset((CRASH, f"CRASH-FS-{n}") for n in rules)


def failed(journal: str, synchronous: str, *rules: str, long: bool = True) -> Pinned:
    """A cell that fails, every failure under every profile: none of its findings is one a
    stronger file system rules out."""
    return Pinned(journal, synchronous, "failed", crash(*rules), EVERY_PROFILE, long)


PINNED = [
    # OFF: no sync at all -- torn and lost pages (CRASH-FS-1), a malformed image the next
    # commit trips on (CRASH-FS-3), lost commits (CRASH-FS-6), and so after faults (-9).
    failed("DELETE", "OFF", "1", "3", "6", "9"),
    # NORMAL and FULL: the journal's unlink is never made durable (no directory fsync), so it
    # comes back after a power loss and rolls the acknowledged commit back (CRASH-FS-6).
    failed("DELETE", "NORMAL", "6"),
    failed("DELETE", "FULL", "6", long=False),
    # EXTRA: the directory is fsynced after the unlink; a failed fsync there comes after the
    # commit point, and the example answers it outcome_unknown and syncs before it reads again.
    Pinned("DELETE", "EXTRA", "passed", long=False),
    failed("TRUNCATE", "OFF", "1", "3", "6", "9"),
    # NORMAL: the truncate that commits is not fsynced; the journal comes back (CRASH-FS-6).
    failed("TRUNCATE", "NORMAL", "6"),
    # FULL and EXTRA: the committing truncate is fsynced.
    Pinned("TRUNCATE", "FULL", "passed"),
    Pinned("TRUNCATE", "EXTRA", "passed"),
    failed("WAL", "OFF", "1", "6", "9"),
    # NORMAL: the WAL is synced only at checkpoints; a commit may roll back (CRASH-FS-6).
    failed("WAL", "NORMAL", "6"),
    Pinned("WAL", "FULL", "passed"),
    Pinned("WAL", "EXTRA", "passed"),
]


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-6", "CRASH-FS-9", "CRASH-SYS-15")
@pytest.mark.parametrize(
    "pinned",
    [pytest.param(p, id=f"{p.journal}-{p.synchronous}", marks=(pytest.mark.long,) * p.long)
     for p in PINNED],
)  # fmt: skip
def test_each_cell_gets_its_pinned_verdict(pinned: Pinned, tmp_path: Path) -> None:
    """The cell passes, or fails with exactly the pinned rules under the pinned profiles."""
    verdict = validate(pinned.spec, budget=5, failures_dir=tmp_path, seed=1, examples=5,
                       require=("crash", "restarts"))  # fmt: skip
    found = frozenset((f.phase, f.rule) for f in verdict.failures if f.rule is not None)
    profiles = frozenset(
        name for f in (*verdict.failures, *verdict.warnings) for name in f.profiles or PROFILE_NAMES
    )
    outcome: str = verdict.outcome
    assert (outcome, found, profiles) == (
        pinned.outcome, pinned.failures, pinned.profiles
    ), [f"{f.rule} ({f.phase}, {f.profiles}): {f.error}" for f in verdict.failures]  # fmt: skip
    assert verdict.phases["machine"].status == "ran"
    assert verdict.phases["conformance"].status == "ran"


def test_the_pins_cover_every_cell_once_and_each_factory_exists() -> None:
    """Every journal mode that keeps its journal on disk times every ``synchronous`` level is
    pinned exactly once, and the example has its factory."""
    cells = [(p.journal, p.synchronous) for p in PINNED]
    assert sorted(cells) == sorted(
        (j, s) for j in sqlite3_backend.JOURNALS for s in sqlite3_backend.SYNCHRONOUS
    )
    for pinned in PINNED:
        assert callable(getattr(sqlite3_backend, pinned.factory))


def calibration_rows() -> dict[tuple[str, str], tuple[str, frozenset[str], frozenset[str]]]:
    """The Calibration table of docs/findings.md: ``(journal, synchronous)`` -> verdict, rules
    and profiles as written there."""
    text = FINDINGS.read_text(encoding="utf-8")
    section = text.split("\n## Calibration", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[str, str], tuple[str, frozenset[str], frozenset[str]]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] not in sqlite3_backend.JOURNALS:
            continue
        journal, synchronous, _, verdict, rules, profiles, _ = cells
        assert (journal, synchronous) not in rows, f"{journal} {synchronous} twice"
        rows[(journal, synchronous)] = (
            verdict,
            frozenset(re.findall(r"CRASH-FS-\d+", rules)),
            frozenset(re.findall(r"posix|ext4-ordered|btrfs", profiles)),
        )
    return rows


def test_the_findings_table_says_what_the_pins_say() -> None:
    """docs/findings.md's Calibration table has one row per pinned cell, with its verdict,
    rules (all of the crash exploration phase) and profiles."""
    pinned = {
        (p.journal, p.synchronous): (
            p.outcome, frozenset(rule for _, rule in p.failures), p.profiles
        )
        for p in PINNED
    }  # fmt: skip
    assert all(phase == CRASH for p in PINNED for phase, _ in p.failures)
    assert calibration_rows() == pinned
