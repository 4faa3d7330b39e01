"""Every planted fork bug is caught (ARCH-2)."""

from __future__ import annotations

import orjson
import pytest

from scopecheck.planted import Mutant, all_mutants, run_fork_mutant
from scopecheck.planted.fork_validation import NAMES as VALIDATION_NAMES
from tests.conftest import one_of_each
from tests.test_cli import scopecheck

#: Run in-process; the fork-validation bugs run through the CLI below instead.
FORK_MUTANTS = [
    m for m in all_mutants() if m.caught_by.startswith("fork-") and m.name not in VALIDATION_NAMES
]


@pytest.mark.rule("ARCH-2")
def test_fork_catalogue_has_the_required_entries() -> None:
    assert {
        "fork-value-seqs-renumbered",
        "fork-seq-cutoff",
        "fork-copies-ephemeral",
        "fork-unknown-reserved-copied",
        "fork-repairs-torn-tail",
        "fork-entry-off-ancestry",
        "fork-forgets-parent",
    } <= {m.name for m in FORK_MUTANTS}


@pytest.mark.rule(
    "ARCH-2",
    "FORK-3",
    "FORK-6",
    "FORK-8",
    "FORK-9",
    "FORK-10",
    "FORK-11",
    "FORK-14",
    "FORK-16",
    "SQLITE-16",
)
@pytest.mark.parametrize(
    "mutant",
    one_of_each(
        FORK_MUTANTS,
        lambda m: m.name.replace("-sqlite-", "-").replace("-jsonl-", "-"),
        lambda m: m.name,
        slow={"fork-unknown-reserved-copied"},  # about 40 s; FORK-8 also has its cases
    ),
)
def test_fork_mutant_is_caught(mutant: Mutant) -> None:
    """The fork machine (or a probe: the torn-tail byte compare, the read spy, the memory
    growth check) fails on the mutant with a check failure, not a crash — within the CLI's
    600-example budget (the seq <= tip cutoff once needed ~2,000; the fork machine's
    ``app_state_then_turn`` rule now exposes it in ~30)."""
    result = run_fork_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error or 'no failure'}"


@pytest.mark.rule("ARCH-2", "CHECK-8")
def test_each_fork_validation_bug_is_planted_in_every_backend() -> None:
    planted = {m.name: m for m in all_mutants() if m.name in VALIDATION_NAMES}
    assert set(planted) == set(VALIDATION_NAMES)
    for bug in (
        "refusal-keeps-destination",
        "data-only-branch-forks-tree",
        "accepts-dict-options",
        "missing-source-empty",
        "replaces-closed-destination",
    ):
        for backend in ("memory", "jsonl", "sqlite"):
            mutant = planted[f"{backend}-fork-{bug}"]
            assert (mutant.backend, mutant.caught_by) == ("fork", "fork-machine")
            assert mutant.description.startswith(f"[{backend}] ")


#: The backend of each fork-validation bug the default run keeps: the one measured quickest to
#: be caught (seconds on one core: refusal-keeps-destination 4 on JSONL, 23 on Memory, where
#: only the ``repository.list()`` check sees it; data-only-branch-forks-tree 5 on JSONL, 11 on
#: Memory).  Each bug's other backends run with SCOPECHECK_LONG=1.
QUICKEST_VALIDATION = {
    "jsonl-fork-refusal-keeps-destination",
    "jsonl-fork-data-only-branch-forks-tree",
}


@pytest.mark.rule("ARCH-2", "CHECK-8", "FORK-1", "REPO-1")
@pytest.mark.parametrize(
    "name",
    one_of_each(
        sorted(VALIDATION_NAMES, key=lambda n: n not in QUICKEST_VALIDATION),
        lambda n: n.split("-", 1)[1],
        lambda n: n,
    ),
)
def test_fork_validation_bug_is_caught_in_few_steps(name: str) -> None:
    """Each fork-validation bug, on each backend, is caught as a user runs it (``scopecheck
    mutants --name``, a fresh interpreter, a fixed hash seed: the derandomised search depends
    on what the process imported) with a shrunk program of at most 10 steps -- the
    refusal-keeps-destination one by the ``repository.list()`` check on Memory too."""
    result = scopecheck("mutants", "--name", name, "--json", hash_seed="0")
    assert result.returncode in (0, 1), result.stderr
    (report,) = orjson.loads(result.stdout)["mutants"]
    assert report["caught"], f"{name} escaped: {report}"
    assert report["steps"] is not None and report["steps"] <= 10, report
