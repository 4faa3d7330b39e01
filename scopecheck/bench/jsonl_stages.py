"""Where JSONL open time goes: the open pipeline measured stage by stage (JSONL-7).

``open_stages(size)`` builds the same Session as ``scopecheck bench jsonl`` and times, in one
run and interleaved, cumulative prefixes of what ``JsonlRepository.open`` does to the main log:
read and split, ``orjson.loads`` per line, the fast path's checks and fold into resident state
(:func:`~scopecheck.impl.jsonl.replay.fold_main_log`), sidecars plus the plan (stages 2–8),
replaying the sidecars, and finally a real ``open`` + ``close``.  For comparison it also times the
documented path that the inspector and any unrecognised file take (``scan_lines`` + ``replay``).
Each row is the difference between two cumulative
medians (CPU time, steadier than wall time on a shared machine), next to the plain orjson
line parse the issue's target compares against.  Nothing here asserts on time.

Run: ``python -m scopecheck.bench.jsonl_stages [SIZE_MB] [REPEAT]``.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

from scopecheck.bench.jsonl import MB, build_session, plain_parse, session_files
from scopecheck.impl.fs import OsFileSystem
from scopecheck.impl.jsonl import JsonlRepository, session_paths
from scopecheck.impl.jsonl.load import load_session
from scopecheck.impl.jsonl.replay import fold_main_log, replay

#: (key, label) of each cumulative stage, in pipeline order.
STAGES = (
    ("read", "read + split lines (fs.read_lines)"),
    ("loads", "orjson.loads per line"),
    ("fold", "record checks + fold into resident state (fold_main_log)"),
    ("load", "sidecars + plan (stages 2-8, load_session)"),
    ("replay", "replay of the retained sidecar transactions"),
    ("open", "storage object, temp check, close, freeing (open + close)"),
)


def open_stages(size_bytes: int, repeat: int = 11) -> dict[str, Any]:
    """Median CPU milliseconds per stage of opening a Session of about ``size_bytes``."""
    loads = orjson.loads
    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-") as root:
        build_session(root, "bench", size_bytes)
        files = session_files(root, "bench")
        main = session_paths.main_path(root, "bench")
        fs = OsFileSystem()
        repo = JsonlRepository(root, cwd="/bench")

        def read() -> Any:
            return fs.read_lines(main)

        def parse() -> None:
            for line in fs.read_lines(main).complete[1:]:
                loads(line)

        def fold() -> Any:
            folded = fold_main_log(fs.read_lines(main).complete)
            assert folded is not None, "the bench Session must take the fast path"
            return folded

        def load() -> Any:
            return load_session(fs, main, "bench", fold=True)

        def replayed() -> Any:
            return replay(load_session(fs, main, "bench", fold=True))

        def documented() -> Any:
            return replay(load_session(fs, main, "bench"))

        def open_close() -> None:
            repo.open("bench").close()

        stages: dict[str, Callable[[], Any]] = {
            "read": read,
            "loads": parse,
            "fold": fold,
            "load": load,
            "replay": replayed,
            "open": open_close,
            "documented": documented,
        }
        times: dict[str, list[float]] = {key: [] for key in ("plain", *stages)}
        for _ in range(repeat):
            start = time.process_time()
            plain_parse(files)
            times["plain"].append(time.process_time() - start)
            for key, action in stages.items():
                if key != "open":  # open pauses the collector itself
                    gc.disable()
                try:
                    start = time.process_time()
                    result = action()
                    del result
                    times[key].append(time.process_time() - start)
                finally:
                    gc.enable()
        median = {key: statistics.median(values) * 1e3 for key, values in times.items()}
        rows, previous = [], 0.0
        for key, label in STAGES:
            rows.append({"stage": label, "ms": round(median[key] - previous, 2)})
            previous = median[key]
        return {
            "bytes_on_disk": sum(os.path.getsize(path) for path in files),
            "main_lines": len(fs.read_lines(main).complete),
            "plain_parse_ms": round(median["plain"], 2),
            "open_ms": round(median["open"], 2),
            "ratio": round(median["plain"] / median["open"], 3),
            "documented_path_ms": round(median["documented"], 2),
            "stages": rows,
        }


if __name__ == "__main__":  # pragma: no cover - manual benchmark command
    size = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    figures = open_stages(int(size * MB), runs)
    print(
        f"{size:g} MB session ({figures['bytes_on_disk'] / MB:.2f} MB on disk, "
        f"{figures['main_lines']} main lines): plain parse {figures['plain_parse_ms']} ms, "
        f"open+close {figures['open_ms']} ms, ratio {figures['ratio']}"
    )
    for row in figures["stages"]:
        print(f"  {row['stage']:62s} {row['ms']:7.2f} ms")
    print(
        f"  (the documented path, scan_lines + replay without open: "
        f"{figures['documented_path_ms']} ms)"
    )
