"""What a failure puts at risk (CHECK-10): each class from real verdicts' rules and kinds, and
the verdict leading with the worst."""

from __future__ import annotations

import pytest

from scopecheck.run.severity import SEVERITIES, severity_of, worst
from scopecheck.run.validate import Failure, PhaseReport, Verdict, summary_lines


@pytest.mark.rule("CHECK-10")
@pytest.mark.parametrize(
    ("rule", "kind", "expected"),
    [
        ("CRASH-FS-6", "power:strict", "lost"),
        ("CRASH-FS-2", "process", "lost"),
        ("CRASH-FS-14", "fault:fsync:EIO", "lost"),
        ("CRASH-FS-9", "fault:fsync:EIO", "lost"),
        ("CRASH-FS-9", "fault:fsync:EIO:reappeared", "reappears"),
        ("CRASH-SQL-4", "fault:xSync:reappeared", "reappears"),
        ("CRASH-FS-9", "uncoded:KeyError at store.py:put", "uncoded"),
        ("CRASH-FS-12", "", "uncoded"),
        ("HYGIENE-1", "", "hygiene"),
        ("LIST-1", "", "contract"),
        ("PROC-2", "protocol", "contract"),
        ("CRASH-FS-7", "workload", "contract"),
        (None, "", "contract"),
    ],
)
def test_each_failure_has_the_class_of_what_it_puts_at_risk(
    rule: str | None, kind: str, expected: str
) -> None:
    assert severity_of(rule, kind) == expected


@pytest.mark.rule("CHECK-10")
def test_the_verdict_leads_with_the_worst_class() -> None:
    hygiene = Failure("machine", "HYGIENE-1", "a temp file left", "scopecheck replay a.json")
    reappears = Failure(
        "crash exploration", "CRASH-FS-9", "the failed commit is back", "scopecheck replay b.json",
        severity=severity_of("CRASH-FS-9", "fault:fsync:EIO:reappeared"),
    )  # fmt: skip
    verdict = Verdict("store", {"machine": PhaseReport("failed")}, failures=(hygiene, reappears))
    assert verdict.severity == "reappears" == worst([hygiene.severity, reappears.severity])
    lines = summary_lines(verdict)
    assert "worst: a failed commit reappears" in lines[0]
    assert any("at risk:" in line and "1 a failed commit reappears; 1 files left" in line
               for line in lines)  # fmt: skip
    heads = [line for line in lines if line.startswith(("HYGIENE-1", "CRASH-FS-9"))]
    assert heads[0].startswith("CRASH-FS-9")  # worst first, whatever the order found
    assert lines[lines.index(heads[0]) + 1] == "  at risk: a failed commit reappears"
    again = Verdict.from_json(verdict.as_json())
    assert [f.severity for f in again.failures] == ["hygiene", "reappears"]
    assert again.as_json()["severity"] == "reappears"
    assert Verdict("store").as_json()["severity"] is None
    assert SEVERITIES[0] == "lost"
