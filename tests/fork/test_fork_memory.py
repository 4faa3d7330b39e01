"""Auxiliary memory of a fork does not grow with the source (FORK-16; 001 §1.3 "Bounded-memory
backend procedures", §5 "Bounded memory").

Auxiliary memory is the peak ``tracemalloc``-traced memory while the fork runs minus what the
fork leaves allocated (Memory's destination state, the exception 001 §1.3 names): the
transient working set.  Between a 10,000- and a 40,000-entry source it may grow by at most
1.5× plus a 64 KiB allowance (``scopecheck.bench.fork.within_bound``) — a structural bound,
not a timing: a fork that materialises the source's rows grows by megabytes, and the planted
``fork-materialises-source`` shows the check fails then.  The 10k → 100k figures, and SQLite's
own allocator (bounded by its page caches, invisible to ``tracemalloc``), are reported by
``scopecheck bench fork``.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from scopecheck.bench.fork import SCOPES, bundled_makers, fork_growth, within_bound
from scopecheck.planted.fork import probe_materialised


@pytest.mark.rule("FORK-16")
@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("backend", ["memory", "jsonl", "sqlite", "sqlite-shared"])
def test_fork_auxiliary_memory_does_not_grow_with_the_source(backend: str, scope: str) -> None:
    with tempfile.TemporaryDirectory(prefix="scopecheck-fork-memory-") as root:
        repo = bundled_makers()[backend](os.path.join(root, backend))
        try:
            small, large = fork_growth(repo, scope)
        finally:
            repo.close()
    assert small.peak > 0  # tracemalloc saw the fork at all
    assert within_bound(small, large), (
        f"auxiliary memory grew from {small.auxiliary:,} B to {large.auxiliary:,} B "
        f"(peak {small.peak:,} → {large.peak:,} B, retained {small.retained:,} → "
        f"{large.retained:,} B)"
    )


@pytest.mark.rule("FORK-16", "ARCH-2")
def test_the_growth_check_catches_a_materialising_fork() -> None:
    """Memory building from a snapshot of the source, and a SQLite stage fetching its rows
    into lists, both fail the bound (the check can fail)."""
    caught, detail = probe_materialised()
    assert caught, detail
