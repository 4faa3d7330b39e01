"""Every planted bug in the catalogue is caught, quickly and with a short program (ARCH-2)."""

from __future__ import annotations

import orjson
import pytest

from scopecheck.planted import all_mutants, run_mutant
from tests.conftest import one_of_each
from tests.test_cli import scopecheck

MACHINE_MUTANTS = [m for m in all_mutants() if m.caught_by == "machine"]
#: The case of its backend the default run keeps: the one measured quickest to be caught
#: (seconds on one core: sqlite-tag-dropped 5, the other SQLite bugs 9 to 14;
#: jsonl-replay-ignores-boundary 3, the others up to 50; ops-recovery-scans-scope 1, the others
#: up to 6).  Memory's first, memory-per-scope-seq, takes 2.  The rest run with SCOPECHECK_LONG=1.
QUICKEST = {"sqlite-tag-dropped", "jsonl-replay-ignores-boundary", "ops-recovery-scans-scope"}


@pytest.mark.rule("ARCH-2")
def test_catalogue_has_the_required_entries() -> None:
    """At least the six Memory mistakes the seeds warn about are planted."""
    names = {m.name for m in all_mutants("memory")}
    assert {
        "memory-per-scope-seq",
        "memory-retire-leaves-lists",
        "memory-stop-at-tag-past-limit",
        "memory-mixed-mutates-first",
        "memory-reuse-resurrects",
        "memory-stats-count-scoped",
    } <= names


@pytest.mark.rule("ARCH-2")
@pytest.mark.parametrize(
    "mutant",
    one_of_each(
        sorted(MACHINE_MUTANTS, key=lambda m: m.name not in QUICKEST),
        lambda m: m.name.split("-")[0],
        lambda m: m.name,
    ),
)
def test_machine_catches_planted_bug(mutant) -> None:  # type: ignore[no-untyped-def]
    """The machine fails on the mutant with an assertion (not a crash), in ≤10 steps.

    Run as a user runs it (``scopecheck mutants --name``) in a fresh interpreter with a fixed
    hash seed: Hypothesis draws constants from every project module imported so far, so
    in-process the derandomised search (and the length of the shrunk program) would depend
    on which tests an xdist worker happened to run before this one."""
    result = scopecheck("mutants", "--name", mutant.name, "--json", hash_seed="0")
    assert result.returncode in (0, 1), result.stderr
    (report,) = orjson.loads(result.stdout)["mutants"]
    assert report["caught"], f"{mutant.name} escaped: {report.get('error') or 'no failure'}"
    assert report["steps"] is not None and report["steps"] <= 10, report


CRASH_MUTANTS = [m for m in all_mutants() if m.caught_by == "crash"]


@pytest.mark.rule("ARCH-2", "CRASH-14")
@pytest.mark.parametrize("mutant", CRASH_MUTANTS, ids=lambda m: m.name)
def test_crash_check_catches_planted_bug(mutant) -> None:  # type: ignore[no-untyped-def]
    """Crash-only planted bugs (JSONL and SQLite) are run by their crash check
    (``Mutant.check``) and caught with a failing crash state."""
    assert mutant.check is not None, f"{mutant.name} has no crash check"
    result = run_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error or 'no failure'}"
    assert result.error


@pytest.mark.rule("ARCH-2")
def test_running_a_planted_bug_leaves_the_suite_profile_alone() -> None:
    """``run_mutant`` runs under the large ``mutants`` budget without making it the process
    default: every later machine test in the same worker keeps the suite's profile."""
    from hypothesis import settings

    before = settings.default
    mutant = next(m for m in MACHINE_MUTANTS if m.name == "memory-close-does-not-seal")
    assert run_mutant(mutant).caught
    after = settings.default
    assert (after.max_examples, after.stateful_step_count, after.derandomize) == (
        before.max_examples,
        before.stateful_step_count,
        before.derandomize,
    )


SYSCALL_MUTANTS = [m for m in all_mutants() if m.caught_by.startswith("syscall:")]


@pytest.mark.rule("ARCH-2", "CRASH-SYS-3", "CRASH-SYS-6")
@pytest.mark.parametrize(
    "mutant", one_of_each(SYSCALL_MUTANTS, lambda m: m.caught_by.split()[0], lambda m: m.name)
)
def test_the_syscall_path_catches_planted_durability_bug(mutant) -> None:  # type: ignore[no-untyped-def]
    """Durability bugs no in-process check can see (a missing fsync, a skipped directory
    fsync, an uncoded I/O error) are caught from the backend process's system calls, under the
    rule the catalogue names."""
    result = run_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error or 'no failure'}"
    assert result.error.split(":")[0] in mutant.caught_by.removeprefix("syscall:").split()


FS_MUTANTS = [m for m in all_mutants() if m.caught_by.startswith("fs:")]


@pytest.mark.rule("ARCH-2", "CRASH-COV-1", "CRASH-COV-4", "CRASH-FS-6", "CRASH-FS-9")
@pytest.mark.rule("CRASH-FS-10", "CRASH-FS-1", "CRASH-FS-5")
@pytest.mark.parametrize("mutant", FS_MUTANTS, ids=lambda m: m.name)
def test_the_filesystem_path_catches_planted_durability_bug(mutant) -> None:  # type: ignore[no-untyped-def]
    """Durability bugs behind a ``make_backend(clock, *, fs, root)`` factory -- a long unsynced
    start-up before commits acknowledged without fsync, a group commit fsyncing every second
    commit, an fsync retried after EIO, a failed append left in the log, a torn tail repaired
    by renaming an unsynced rewrite over the log, an index fsynced before the log it names --
    are caught by the exploration ``validate`` runs, under the rule the catalogue names, well
    inside its budget."""
    result = run_mutant(mutant)
    assert result.caught, f"{mutant.name} escaped: {result.error or 'no failure'}"
    assert result.error.split(":")[0] in mutant.caught_by.removeprefix("fs:").split()
    assert result.seconds < 30, result
