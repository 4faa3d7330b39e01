"""What a failure puts at risk: the class a verdict leads with (CHECK-10).

A rule number says which check failed; a storage team deciding whether to ship needs to know
what is at risk.  Every failure falls in one class, worst first:

* ``lost`` -- acknowledged data lost or unreadable: a crash, power loss or fault left a state
  without something the backend had acknowledged, or one it cannot open (CRASH-FS-1..6,
  CRASH-FS-11, CRASH-FS-14, the JSONL and SQLite crash rules);
* ``reappears`` -- a commit that failed is visible afterwards, with nothing acknowledged lost:
  the visibility part of CRASH-FS-9 (CRASH-11 and CRASH-SQL-4 for the bundled backends).  A
  store that cannot take back a failed commit says so with ``outcome_unknown`` (CRASH-FS-14);
* ``contract`` -- the backend answers wrongly without any crash or fault: the machine, the
  conformance cases, the process protocol;
* ``uncoded`` -- an error the contract cannot read: an exception that is no scopecheck error
  with a stable code (CRASH-FS-9's first part, CRASH-FS-12);
* ``hygiene`` -- files left on disk that nothing will use (HYGIENE-n).

A crash failure's ``kind`` tells the two halves of CRASH-FS-9 apart: an ``uncoded:`` place,
or a state that held the failed commit whole (:data:`~scopecheck.crashsim.failure.REAPPEARED`).
"""

from __future__ import annotations

from typing import Literal

from scopecheck.crashsim.failure import REAPPEARED, UNCODED

Severity = Literal["lost", "reappears", "contract", "uncoded", "hygiene"]

#: The classes, worst first: a verdict and ``docs/findings.md`` lead with the first present.
SEVERITIES: tuple[Severity, ...] = ("lost", "reappears", "contract", "uncoded", "hygiene")

#: Each class in words, for summaries.
WORDS: dict[Severity, str] = {
    "lost": "acknowledged data lost or unreadable",
    "reappears": "a failed commit reappears",
    "contract": "a wrong answer without any crash",
    "uncoded": "an error the contract cannot read",
    "hygiene": "files left behind",
}

#: Rules whose failures hold a failed commit visible afterwards, unless ``kind`` says more.
_FAILED_COMMIT_RULES = frozenset({"CRASH-FS-9", "CRASH-11", "CRASH-SQL-4"})
#: Rules that only ever judge an error's type.
_UNCODED_RULES = frozenset({"CRASH-FS-12"})
#: Crash rules that are not about the state a crash leaves (a run that did not run).
_NOT_STATE = frozenset({"CRASH-FS-7", "CRASH-FS-8", "CRASH-13", "CRASH-14"})


def severity_of(rule: str | None, kind: str = "") -> Severity:
    """The class of a failure of ``rule`` whose crash ``kind`` (``failure_kind`` of its
    reproducer; empty for a machine or conformance failure) is given."""
    if rule is None:
        return "contract"
    if kind.startswith(UNCODED) or rule in _UNCODED_RULES:
        return "uncoded"
    if rule.startswith("HYGIENE-"):
        return "hygiene"
    if rule in _FAILED_COMMIT_RULES and kind.endswith(REAPPEARED):
        return "reappears"
    if rule.startswith("CRASH") and rule not in _NOT_STATE and not rule.startswith("CRASH-COV"):
        return "lost"
    return "contract"


def worst(severities: list[Severity] | tuple[Severity, ...]) -> Severity | None:
    """The worst class among ``severities``, ``None`` for none."""
    present = set(severities)
    return next((s for s in SEVERITIES if s in present), None)
