"""Legacy import benchmark: import time and peak memory per real transcript (LEGACY-*).

For each transcript in ``scopecheck/data/pi-sessions`` (copied to a temp dir under its header id):

* ``parse_ms`` — reading the file and ``orjson.loads`` on every line, the floor any importer pays;
* ``import_ms`` — ``JsonlRepository.open`` of the legacy file (migration, import, replay);
* ``peak_mib`` — tracemalloc peak during that open (a separate run: tracing slows it down);
* ``upgrade_ms`` — the first non-empty commit, which rewrites the file as format 4 (fsync on);
* ``crash_points`` — the mutating filesystem operations of a first *scoped* commit and of a
  first session commit: each is a crash point of the upgrade (an append adds a torn variant).
* ``fork`` — forks of the *closed* legacy file through the bounded disk normaliser
  (LEGACY-15): tree and branch (omitted entry id) time and tracemalloc peak, and the same peak
  for the transcript repeated ``scale`` times (a v1 file stays valid when its body repeats,
  compaction indexes shifted per copy) against the import's peak at that size: the fork's peak
  should stay flat while the import's grows with the file.

Medians of ``runs`` runs.  Nothing here asserts on time.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from scopecheck.crashsim.tracing_fs import MUTATING_OPS, TracingFileSystem
from scopecheck.data import PI_SESSIONS
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.models.addresses import value
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import set_value

DATA = PI_SESSIONS


def _install(source: Path, root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    sid: str = orjson.loads(source.read_bytes().split(b"\n", 1)[0])["id"]
    shutil.copyfile(source, root / f"{sid}.jsonl")
    return sid


def _crash_points(source: Path, tmp: Path, scoped: bool) -> dict[str, Any]:
    root = tmp / f"crash-{source.stem}-{scoped}"
    sid = _install(source, root)
    fs = TracingFileSystem(OsFileSystem(sync=False))
    storage = JsonlRepository(str(root), fs, lambda: 1000, cwd="/b").open(sid)
    fs.trace.clear()
    address = value("bench", "k", ephemeral_scope("op-1")) if scoped else value("bench", "k")
    storage.commit([set_value(address, 1)])
    ops = [op for op, _ in fs.trace if op in MUTATING_OPS]
    storage.close()
    return {"ops": ops, "points": len(ops) + ops.count("append")}


def _scaled(source: Path, root: Path, copies: int) -> str:
    """The transcript's body repeated ``copies`` times (v1: ids are line numbers; compaction
    ``firstKeptEntryIndex`` shifted into its own copy)."""
    lines = source.read_bytes().split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    head, body = lines[0], lines[1:]
    out = [head]
    for copy in range(copies):
        for line in body:
            if copy and b'"firstKeptEntryIndex"' in line:
                rec = orjson.loads(line)
                if isinstance(rec.get("firstKeptEntryIndex"), int):
                    rec["firstKeptEntryIndex"] += copy * len(body)
                line = orjson.dumps(rec)
            out.append(line)
    root.mkdir(parents=True, exist_ok=True)
    sid: str = orjson.loads(head)["id"]
    (root / f"{sid}.jsonl").write_bytes(b"\n".join(out) + b"\n")
    return sid


def _peak(call: Any, *args: Any) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        call(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return int(peak)


def _fork_figures(source: Path, tmp: Path, runs: int, scale: int) -> dict[str, Any]:
    from scopecheck.models.fork import BranchFork, TreeFork

    scopes: dict[str, Any] = {
        "tree": TreeFork,
        "branch": lambda id: BranchFork("main", id=id),
    }
    out: dict[str, Any] = {}
    for scope, build in scopes.items():
        root = tmp / f"fork-{source.stem}-{scope}"
        sid = _install(source, root)
        repo = JsonlRepository(str(root), OsFileSystem(), cwd="/b")
        times = []
        for run in range(runs):
            gc.collect()
            start = time.perf_counter()
            repo.fork(sid, build(id=f"d{run}"))
            times.append(time.perf_counter() - start)
        peak = _peak(repo.fork, sid, build(id="dm"))
        big_root = tmp / f"fork-{source.stem}-{scope}-x{scale}"
        big = _scaled(source, big_root, scale)
        big_repo = JsonlRepository(str(big_root), OsFileSystem(), cwd="/b")
        big_peak = _peak(big_repo.fork, big, build(id="dm"))
        out[scope] = {
            "ms": round(statistics.median(times) * 1000, 1),
            "peak_mib": round(peak / 2**20, 2),
            f"peak_mib_x{scale}": round(big_peak / 2**20, 2),
            f"peak_ratio_x{scale}": round(big_peak / peak, 2),
        }
    big_root = tmp / f"import-{source.stem}-x{scale}"
    big = _scaled(source, big_root, scale)
    repo = JsonlRepository(str(big_root), OsFileSystem(), cwd="/b")
    handles: list[Any] = []
    out[f"import_peak_mib_x{scale}"] = round(
        _peak(lambda: handles.append(repo.open(big))) / 2**20, 1
    )
    handles[0].close()
    return out


def bench_legacy(runs: int = 3, data: Path = DATA, scale: int = 8) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="scopecheck-legacy-bench-") as name:
        tmp = Path(name)
        for source in sorted(data.glob("*.jsonl")):
            size = source.stat().st_size
            parse, imports, upgrades = [], [], []
            for run in range(runs):
                start = time.perf_counter()
                for line in source.read_bytes().splitlines():
                    orjson.loads(line)
                parse.append(time.perf_counter() - start)
                root = tmp / f"{source.stem}-{run}"
                sid = _install(source, root)
                repo = JsonlRepository(str(root), OsFileSystem(), cwd="/b")
                gc.collect()
                start = time.perf_counter()
                storage = repo.open(sid)
                imports.append(time.perf_counter() - start)
                start = time.perf_counter()
                storage.commit([set_value(value("bench", "k"), 1)])
                upgrades.append(time.perf_counter() - start)
                storage.close()
            root = tmp / f"{source.stem}-mem"
            sid = _install(source, root)
            repo = JsonlRepository(str(root), OsFileSystem(), cwd="/b")
            gc.collect()
            tracemalloc.start()
            storage = repo.open(sid)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            entries = len(storage.snapshot().entries)
            storage.close()
            scoped = _crash_points(source, tmp, scoped=True)
            session = _crash_points(source, tmp, scoped=False)
            results[source.stem] = {
                "bytes": size,
                "lines": source.read_bytes().count(b"\n"),
                "entries": entries,
                "parse_ms": round(statistics.median(parse) * 1000, 1),
                "import_ms": round(statistics.median(imports) * 1000, 1),
                "import_mb_s": round(size / 1e6 / statistics.median(imports), 1),
                "peak_mib": round(peak / 2**20, 1),
                "peak_to_file_size": round(peak / size, 2),
                "upgrade_ms": round(statistics.median(upgrades) * 1000, 1),
                "crash_points_first_scoped_commit": scoped["points"],
                "crash_points_first_session_commit": session["points"],
                "first_scoped_commit_ops": scoped["ops"],
                "fork": _fork_figures(source, tmp, runs, scale),
            }
    return {"runs": runs, "scale": scale, "transcripts": results}
