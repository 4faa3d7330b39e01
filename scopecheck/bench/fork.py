"""``scopecheck bench fork``: peak traced memory of forks as the source grows (FORK-16).

For each backend and each source size, a source of N entries is built outside the measurement
(N/100 chains of 100 entries; the ``main`` lane's tip ends the last chain, so a branch fork
copies 100 entries and a tree fork all N), plus N/10 application scalars and N/10 list
elements.  Then ``tracemalloc`` measures the peak of one tree fork and one branch fork; the
ratio of the largest to the smallest size says whether auxiliary memory is bounded (target
≤ 1.5).  Memory's destination *is* its resident state, so its tree-fork peak grows with N by
design (001 §1.3 names it the unavoidable exception).  Also reported: a JSONL tree fork's time
next to plainly copying the file's lines through orjson (target: at least half as fast).

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

import orjson

from models.addresses import value, value_list
from models.fork import BranchFork, ForkOptions, TreeFork
from models.writes import AnyWrite, append_list, insert_entry, set_value

CHAIN = 100
BATCH = 2000


def _clock() -> int:
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
    from impl.jsonl import JsonlRepository
    from impl.memory import MemoryRepository
    from impl.sqlite import SqliteContainerRepository, SqliteRepository

    memory = MemoryRepository(_clock)
    return {
        "memory": lambda: memory,
        "jsonl": lambda: JsonlRepository(os.path.join(root, "jsonl"), clock=_clock, cwd="/"),
        "sqlite": lambda: SqliteRepository(os.path.join(root, "sqlite"), _clock),
        "sqlite-shared": lambda: SqliteContainerRepository(
            os.path.join(root, "shared", "c.sqlite"), _clock
        ),
    }


def peak_of(call: Callable[[], Any]) -> tuple[int, int, float]:
    """Peak traced bytes above the baseline while ``call`` runs, the bytes still held after
    it returned (Memory's destination state), and its seconds."""
    gc.collect()
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
    return peak - base, max(0, current - base), seconds


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
                    peak, retained, seconds = peak_of(partial(repo.fork, source, option))
                    row[scope] = {
                        "peak_bytes": peak,
                        "retained_bytes": retained,
                        "auxiliary_bytes": peak - retained,
                        "seconds_traced": round(seconds, 3),
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
            results[name] = per
            repo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results
