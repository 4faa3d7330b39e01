"""``scopecheck bench fork``: auxiliary memory of forks as the source grows (FORK-16).

For each backend and each source size, a source of N entries is built outside the measurement
(N/100 chains of 100 entries; the ``main`` lane's tip ends the last chain, so a branch fork
copies 100 entries and a tree fork all N), plus N/10 application scalars and N/10 list
elements.  Then one tree fork and one branch fork are measured.

*Auxiliary memory* is what the fork needs beyond its result (001 §1.3):

* ``peak_bytes``: peak ``tracemalloc``-traced Python memory while the fork runs, above what
  was allocated before it;
* ``retained_bytes``: traced memory the fork left allocated when it returned — Memory's
  destination state (001 §1.3's named exception: a Memory tree fork's destination *is* source
  sized), caches for the disk backends;
* ``auxiliary_bytes`` = peak − retained: the transient working set (temporary sets, batches,
  a materialised snapshot if there were one);
* ``sqlite_peak_bytes``: SQLite's own allocator high-water mark during the fork above its use
  before (``apsw.memory_high_water``) — page caches and sorters of the staging database and
  of JSONL's temporary index, which ``tracemalloc`` cannot see; bounded by their cache sizes.

The target is auxiliary memory at the largest size at most 1.5× that at the smallest, for
every backend and both scopes.  SQLite's high-water is reported beside it: it grows until the
page caches fill and then stays flat (measured at 10k / 100k / 300k entries: JSONL's index
0.43 / 2.23 / 2.23 MB, the SQLite tree stage 1.7 / 4.4 / 4.4 MB), so its 10k → 100k ratio says
where the caches fill, not that the fork holds the source.  ``tests/fork/test_fork_memory.py``
checks the auxiliary quantity structurally at 10k vs 40k entries (no timing).  Also reported:
a JSONL tree fork's time next to plainly copying the file's lines through orjson (target: at
least half as fast).

Sources live on /dev/shm when available: this measures memory, not fsync latency.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import orjson

from scopecheck.models.addresses import value, value_list
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork
from scopecheck.models.writes import AnyWrite, append_list, insert_entry, set_value

CHAIN = 100
BATCH = 2000


def fixed_clock() -> int:
    """The benchmarks' clock: one fixed time, so runs differ only in what they measure."""

    return 1_750_000_000_000


def build_source(storage: Any, entries: int) -> None:
    """The deterministic large source described in the module docstring."""
    writes: list[AnyWrite] = []

    def flush() -> None:
        if writes:
            storage.commit(list(writes))
            writes.clear()

    last = None
    for i in range(entries):
        parent = None if i % CHAIN == 0 else last
        last = f"e{i}"
        writes.append(insert_entry(last, parent, "message", {"text": f"m{i}"}))
        if i % 10 == 0:
            writes.append(set_value(value("bench.app", f"k{i}"), i))
            writes.append(append_list(value_list("bench.log"), i))
        if len(writes) >= BATCH:
            flush()
    writes.extend(
        [
            set_value(value("pi.branch.tip", "main"), last),
            set_value(value("pi.lane.config", "main"), {"model": "m"}),
            set_value(
                value("pi.lane.state", "main"),
                {"currentOperationId": None, "lastOperationId": None, "inbox": []},
            ),
            set_value(value("pi.session.name"), "bench"),
        ]
    )
    flush()


def _scratch() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _repositories(root: str) -> dict[str, Callable[[], Any]]:
    from scopecheck.impl.jsonl import JsonlRepository
    from scopecheck.impl.memory import MemoryRepository
    from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository

    memory = MemoryRepository(fixed_clock)
    return {
        "memory": lambda: memory,
        "jsonl": lambda: JsonlRepository(os.path.join(root, "jsonl"), clock=fixed_clock, cwd="/"),
        "sqlite": lambda: SqliteRepository(os.path.join(root, "sqlite"), fixed_clock),
        "sqlite-shared": lambda: SqliteContainerRepository(
            os.path.join(root, "shared", "c.sqlite"), fixed_clock
        ),
    }


@attrs.frozen
class ForkMemory:
    """One measured fork; see the module docstring for the quantities."""

    peak: int
    retained: int
    sqlite_peak: int
    seconds: float

    @property
    def auxiliary(self) -> int:
        return max(0, self.peak - self.retained)


def measure_fork(call: Callable[[], Any]) -> ForkMemory:
    """Run ``call`` (one fork) under ``tracemalloc`` and SQLite's high-water mark."""
    import apsw

    gc.collect()
    sqlite_before = apsw.memory_used()
    apsw.memory_high_water(True)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    try:
        call()
    finally:
        seconds = time.perf_counter() - start
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sqlite_peak = apsw.memory_high_water(False)
    return ForkMemory(
        peak - base, max(0, current - base), max(0, sqlite_peak - sqlite_before), seconds
    )


def peak_of(call: Callable[[], Any]) -> tuple[int, int, float]:
    """Peak traced bytes above the baseline while ``call`` runs, the bytes still held after
    it returned (Memory's destination state), and its seconds."""
    measured = measure_fork(call)
    return measured.peak, measured.retained, measured.seconds


def plain_copy_seconds(path: str) -> float:
    """Read every line of ``path``, parse and re-dump it through orjson, write a copy."""
    start = time.perf_counter()
    with open(path, "rb") as source, open(path + ".copy", "wb") as out:
        for line in source:
            out.write(orjson.dumps(orjson.loads(line)) + b"\n")
    seconds = time.perf_counter() - start
    os.unlink(path + ".copy")
    return seconds


def bench_fork(
    sizes: tuple[int, ...] = (10_000, 100_000), backends: tuple[str, ...] | None = None
) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="scopecheck-bench-fork-", dir=_scratch())
    results: dict[str, Any] = {}
    try:
        makers = _repositories(root)
        for name, make in makers.items():
            if backends is not None and name not in backends:
                continue
            repo = make()
            per: dict[str, Any] = {}
            for size in sizes:
                source = f"src{size}"
                storage = repo.create(source)
                build_source(storage, size)
                storage.close()
                row: dict[str, Any] = {}
                options: dict[str, ForkOptions] = {
                    "tree": TreeFork(id=f"t{size}"),
                    "branch": BranchFork("main", id=f"b{size}"),
                }
                for scope, option in options.items():
                    measured = measure_fork(partial(repo.fork, source, option))
                    row[scope] = {
                        "peak_bytes": measured.peak,
                        "retained_bytes": measured.retained,
                        "auxiliary_bytes": measured.auxiliary,
                        "sqlite_peak_bytes": measured.sqlite_peak,
                        "seconds_traced": round(measured.seconds, 3),
                    }
                    repo.delete(option.id)
                if name == "jsonl":
                    path = repo.path_of(source)
                    start = time.perf_counter()
                    repo.fork(source, TreeFork(id=f"timed{size}"))
                    fork_seconds = time.perf_counter() - start
                    copy_seconds = plain_copy_seconds(path)
                    row["tree_fork_seconds"] = round(fork_seconds, 3)
                    row["plain_orjson_copy_seconds"] = round(copy_seconds, 3)
                    row["speed_vs_plain_copy"] = round(copy_seconds / fork_seconds, 3)
                    repo.delete(f"timed{size}")
                repo.delete(source)
                per[str(size)] = row
            small, large = str(min(sizes)), str(max(sizes))
            per["ratio_largest_to_smallest"] = {
                scope: round(
                    per[large][scope]["peak_bytes"] / max(1, per[small][scope]["peak_bytes"]), 3
                )
                for scope in ("tree", "branch")
            }
            # Auxiliary = peak minus what the fork left allocated (Memory's destination state).
            per["auxiliary_ratio_largest_to_smallest"] = {
                scope: round(
                    per[large][scope]["auxiliary_bytes"]
                    / max(1, per[small][scope]["auxiliary_bytes"]),
                    3,
                )
                for scope in ("tree", "branch")
            }
            per["sqlite_ratio_largest_to_smallest"] = {
                scope: round(
                    per[large][scope]["sqlite_peak_bytes"]
                    / max(1, per[small][scope]["sqlite_peak_bytes"]),
                    3,
                )
                for scope in ("tree", "branch")
            }
            results[name] = per
            repo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


# -- the structural check of FORK-16 (tests/fork/test_fork_memory.py) -------------------------

#: Source sizes of the check: fourfold growth from a size where every fixed-size buffer (stage
#: batches, read buffers) is already full, small enough for the focused tests.
CHECK_SIZES = (10_000, 40_000)
#: Allowance on top of 1.5× the small fork's auxiliary memory: allocator and cache noise of a
#: few KB.  A fork holding the source's rows grows by hundreds of KB between the two sizes.
CHECK_SLACK = 64 * 1024
SCOPES: dict[str, Callable[[str], ForkOptions]] = {
    "tree": lambda dest: TreeFork(id=dest),
    "branch": lambda dest: BranchFork("main", id=dest),
}


def fork_growth(repo: Any, scope: str, sizes: tuple[int, ...] = CHECK_SIZES) -> list[ForkMemory]:
    """Fork a warm-up source and then a source of each size in ``repo``; one measurement per
    size.  The warm-up pays one-time costs (imports, statement caches) outside the figures."""
    results: list[ForkMemory] = []
    for size in (200, *sizes):
        source, dest = f"grow-src{size}", f"grow-dst{size}"
        storage = repo.create(source)
        build_source(storage, size)
        storage.close()
        measured = measure_fork(partial(repo.fork, source, SCOPES[scope](dest)))
        if size != 200:
            results.append(measured)
        repo.delete(dest)
        repo.delete(source)
    return results


def within_bound(small: ForkMemory, large: ForkMemory) -> bool:
    """Auxiliary memory does not grow with the source (FORK-16): the large fork's at most
    1.5× the small one's plus :data:`CHECK_SLACK`."""
    return large.auxiliary <= 1.5 * small.auxiliary + CHECK_SLACK


def probe_growth(makers: dict[str, Callable[[str], Any]]) -> tuple[bool, str]:
    """Run :func:`fork_growth` for each ``name → make(root)`` repository and both scopes;
    caught iff some fork's auxiliary memory grew past the bound."""
    caught = False
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="scopecheck-fork-growth-", dir=_scratch()) as root:
        for name, make in makers.items():
            repo = make(os.path.join(root, name))
            try:
                for scope in SCOPES:
                    small, large = fork_growth(repo, scope)
                    bad = not within_bound(small, large)
                    caught |= bad
                    notes.append(
                        f"{name} {scope}: auxiliary {small.auxiliary:,} B → {large.auxiliary:,} B"
                        f"{' — GROWS' if bad else ''}"
                    )
            finally:
                repo.close()
    return caught, "; ".join(notes)


def bundled_makers() -> dict[str, Callable[[str], Any]]:
    """The bundled repositories by name, each built under a given root."""
    from scopecheck.impl.jsonl import JsonlRepository
    from scopecheck.impl.memory import MemoryRepository
    from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository

    return {
        "memory": lambda root: MemoryRepository(fixed_clock),
        "jsonl": lambda root: JsonlRepository(root, clock=fixed_clock, cwd="/"),
        "sqlite": lambda root: SqliteRepository(root, fixed_clock),
        "sqlite-shared": lambda root: SqliteContainerRepository(
            os.path.join(root, "c.sqlite"), fixed_clock
        ),
    }
