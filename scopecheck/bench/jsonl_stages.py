"""Where JSONL open time goes: the open pipeline measured stage by stage (issue 4, JSONL-7).

``open_stages(size)`` builds the same Session as ``scopecheck bench jsonl`` and times, in one
run and interleaved, cumulative prefixes of what ``JsonlRepository.open`` does to the main log:
read and split, ``orjson.loads`` per line, the record checks that build replay operations,
keeping those operations alive, the scan loop, sidecars plus the plan (stages 2–8), replay,
and finally a real ``open`` + ``close``.  Each row is the difference between two cumulative
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

from impl.fs import OsFileSystem
from impl.jsonl import JsonlRepository, layout
from impl.jsonl.codec import index_transaction
from impl.jsonl.load import load_session, scan_lines
from impl.jsonl.storage import replay, resident_state
from scopecheck.bench.jsonl import MB, _plain_parse, _session_files, build_session

#: (key, label) of each cumulative stage, in pipeline order.
STAGES = (
    ("read", "read + split lines (fs.read_lines)"),
    ("loads", "orjson.loads per line"),
    ("index", "record checks + replay operations (index_transaction)"),
    ("keep", "keeping the operations alive (memory traffic)"),
    ("scan", "scan loop, Tx objects, seq order (scan_lines)"),
    ("load", "sidecars + plan (stages 2-8, load_session)"),
    ("replay", "replay into the lazy resident maps + usage totals"),
    ("open", "storage object, temp check, close, freeing (open + close)"),
)


def open_stages(size_bytes: int, repeat: int = 11) -> dict[str, Any]:
    """Median CPU milliseconds per stage of opening a Session of about ``size_bytes``."""
    loads = orjson.loads
    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-") as root:
        build_session(root, "bench", size_bytes)
        files = _session_files(root, "bench")
        main = layout.main_path(root, "bench")
        fs = OsFileSystem()
        repo = JsonlRepository(root, cwd="/bench")

        def read() -> Any:
            return fs.read_lines(main)

        def parse() -> None:
            for line in fs.read_lines(main).complete[1:]:
                loads(line)

        def index() -> None:
            for line in fs.read_lines(main).complete[1:]:
                index_transaction(loads(line), line, None)

        def keep() -> Any:
            lines = fs.read_lines(main).complete
            return [index_transaction(loads(line), line, None) for line in lines[1:]], lines

        def scan() -> Any:
            return scan_lines(main, fs.read_lines(main), "bench", None)

        def load() -> Any:
            return load_session(fs, main, "bench")

        def replayed() -> Any:
            plan = load_session(fs, main, "bench")
            state = resident_state()
            replay(state, plan)
            return state, plan

        def open_close() -> None:
            repo.open("bench").close()

        stages: dict[str, Callable[[], Any]] = {
            "read": read,
            "loads": parse,
            "index": index,
            "keep": keep,
            "scan": scan,
            "load": load,
            "replay": replayed,
            "open": open_close,
        }
        times: dict[str, list[float]] = {key: [] for key in ("plain", *stages)}
        for _ in range(repeat):
            start = time.process_time()
            _plain_parse(files)
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
