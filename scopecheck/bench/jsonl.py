"""JSONL benchmarks: open/replay throughput against plain orjson line parsing, commits/s.

``bench_jsonl()`` builds Sessions of about 1 MB and 10 MB (100 MB with ``large=True``) straight
through the codec (no fsync per line, so building is quick), then in the same run measures

* ``parse_mb_s`` — reading the same files and ``orjson.loads`` on every line: the floor any
  JSONL reader pays;
* ``open_mb_s`` — ``JsonlRepository.open`` (all nine stages, replay into resident state);
* ``ratio`` — ``open_mb_s / parse_mb_s`` (target: at least 0.5);

and ``commits_per_s`` with fsync on, for main-log and sidecar commits, on a real temp dir, and
machine steps/s on JSONL (real disk and pyfakefs) and Memory next to the trivial machine
(target: pyfakefs at least 0.25 of trivial).
Figures are medians of ``repeat`` runs.  Nothing here asserts on time.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from scopecheck.bench.legacy import DATA as TRANSCRIPTS
from scopecheck.impl.fs import OsFileSystem, split_lines
from scopecheck.impl.jsonl import JsonlRepository, session_paths
from scopecheck.impl.jsonl.codec import encode_header, encode_scope_header, encode_transaction
from scopecheck.models.addresses import value, value_list
from scopecheck.models.records import Committed
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    append_list,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

MB = 1 << 20


def build_session(root: str, session_id: str, target_bytes: int) -> int:
    """Write a realistic Session of about ``target_bytes`` (main + sidecars); returns bytes.

    Per round: a message entry with its usage row, a lane-state value, three assistant frames
    in the operation's scope (a sidecar), and every eight rounds the operation's retirement.
    The last operation stays live, so its sidecar is replayed too.
    """
    main = session_paths.main_path(root, session_id)
    sidecars: dict[str, list[bytes]] = {}
    lines = [encode_header(session_id, 1_700_000_000_000, "/bench")]
    seq = 1
    size = len(lines[0]) + 1
    parent = None
    text = "lorem ipsum dolor sit amet " * 6
    n = 0
    while size < target_bytes:
        op = ephemeral_scope(f"op-{n // 8}")
        ts = 1_700_000_000_000 + n
        main_writes: list[AnyWrite] = [
            insert_entry(
                f"e{n}",
                parent,
                "message",
                {"role": "assistant", "content": [{"type": "text", "text": text}]},
            ),
            insert_usage(
                f"u{n}",
                usage_value(input=120, output=48, total_tokens=168, cost_total=0.0021),
                entry_id=f"e{n}",
            ),
            set_value(
                value("pi.lane.state", "main"),
                {"currentOperationId": op.id, "lastOperationId": None, "inbox": []},
            ),
        ]
        parent = f"e{n}"
        for batch in (
            main_writes,
            [
                append_list(
                    value_list("pi.pending.assistant_frame", f"{op.id}:r", op),
                    {"delta": text[:60], "i": i},
                    tag="end" if i == 2 else None,
                )
                for i in range(3)
            ],
        ):
            committed = [Committed(seq + i, ts, w) for i, w in enumerate(batch)]
            seq += len(committed)
            line = encode_transaction(committed)
            size += len(line)
            scope_id = batch[0].address.scope_id if hasattr(batch[0], "address") else None
            if scope_id is None:
                lines.append(line[:-1])
            else:
                sidecars.setdefault(scope_id, [encode_scope_header(session_id, scope_id)])
                sidecars[scope_id].append(line[:-1])
        if n % 8 == 7:
            committed = [Committed(seq, ts, retire_scope(op))]
            seq += 1
            line = encode_transaction(committed)
            size += len(line)
            lines.append(line[:-1])
            sidecars.pop(op.id, None)  # cleanup unlinked it
        n += 1
    with open(main, "wb") as handle:
        handle.write(b"\n".join(lines) + b"\n")
    if sidecars:
        os.makedirs(session_paths.scopes_dir(main), exist_ok=True)
        for scope_id, side in sidecars.items():
            with open(session_paths.sidecar_path(main, scope_id), "wb") as handle:
                handle.write(b"\n".join(side) + b"\n")
    return size


def session_files(root: str, session_id: str) -> list[str]:
    main = session_paths.main_path(root, session_id)
    directory = session_paths.scopes_dir(main)
    files = [main]
    if os.path.isdir(directory):
        files += [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    return files


def _median_seconds(action: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of ``repeat`` runs (CPU time is steadier on a
    shared machine; both are reported)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def plain_parse(files: list[str]) -> None:
    fs = OsFileSystem()
    for path in files:
        for line in split_lines(fs.read_bytes(path)).complete:
            orjson.loads(line)


def measure_open(size_bytes: int, repeat: int = 3) -> dict[str, Any]:
    """Open + close of the synthetic Session of about ``size_bytes`` (:func:`build_session`)
    next to plain parsing of the same files (:func:`time_open`)."""
    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-") as root:
        actual = build_session(root, "bench", size_bytes)
        return time_open(root, "bench", actual, repeat)


def measure_transcripts(repeat: int = 3, data: Path = TRANSCRIPTS) -> dict[str, Any]:
    # TRANSCRIPTS: the real transcripts ``scopecheck bench legacy`` reads (REFERENCE §6)
    """Open + close of each real coding-agent transcript in ``data`` once upgraded to format 4
    (opened, one commit), next to plain parsing of the upgraded file.  Real lines are longer
    than the synthetic Session's (1-3 KB against 0.6 KB, fewer usage rows), so parsing weighs
    more against open's per-record work.  Empty when the transcripts are not there."""
    figures: dict[str, Any] = {}
    for source in sorted(data.glob("*.jsonl")) if data.is_dir() else []:
        with tempfile.TemporaryDirectory(prefix="scopecheck-bench-") as root:
            session_id: str = orjson.loads(source.read_bytes().split(b"\n", 1)[0])["id"]
            shutil.copyfile(source, os.path.join(root, f"{session_id}.jsonl"))
            storage = JsonlRepository(root, cwd="/bench").open(session_id)
            storage.commit([set_value(value("bench.upgraded"), True)])  # rewrites as format 4
            storage.close()
            size = sum(map(os.path.getsize, session_files(root, session_id)))
            figures[source.stem] = time_open(root, session_id, size, repeat)
    return figures


def time_open(root: str, session_id: str, size: int, repeat: int) -> dict[str, Any]:
    """Open + close next to plain parsing of the same files.

    The two are timed in alternation, ``repeat`` rounds of each, so drift in the machine's
    speed falls on both alike; a round of a small Session repeats the action until about 8 MB
    went through (a 1 MB open takes about 3 ms, where scheduler noise alone moves a single
    sample by several per cent).  Figures are per action; ``size`` is what MB/s count."""
    files = session_files(root, session_id)
    repo = JsonlRepository(root, cwd="/bench")
    per_round = max(1, round(8 * MB / size))

    def parse() -> None:
        for _ in range(per_round):
            plain_parse(files)

    def open_and_close() -> None:
        for _ in range(per_round):
            repo.open(session_id).close()

    samples: dict[str, list[tuple[float, float]]] = {"parse": [], "open": []}
    for _ in range(repeat):
        samples["parse"].append(_median_seconds(parse, 1))
        samples["open"].append(_median_seconds(open_and_close, 1))
    parse_s, parse_cpu = _per_action(samples["parse"], per_round)
    open_s, open_cpu = _per_action(samples["open"], per_round)
    mb = size / MB
    return {
        "bytes": size,
        "files": len(files),
        "actions_per_round": per_round,
        "parse_s": round(parse_s, 5),
        "open_s": round(open_s, 5),
        "parse_mb_s": round(mb / parse_s, 1),
        "open_mb_s": round(mb / open_s, 1),
        "ratio": round(parse_s / open_s, 3),
        "cpu_ratio": round(parse_cpu / open_cpu, 3) if open_cpu else None,
    }


def _per_action(samples: list[tuple[float, float]], per_round: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one action from (wall, CPU) samples of whole rounds."""
    walls, cpus = zip(*samples, strict=True)
    return statistics.median(walls) / per_round, statistics.median(cpus) / per_round


def measure_commits(count: int = 200) -> dict[str, Any]:
    """Commits per second with fsync on (real temp dir), main-log and sidecar."""
    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-") as root:
        storage = JsonlRepository(root, cwd="/bench").create("c")
        scope = ephemeral_scope("op")
        start = time.perf_counter()
        for n in range(count):
            storage.commit([set_value(value("bench", "k"), n)])
        main_s = time.perf_counter() - start
        start = time.perf_counter()
        for n in range(count):
            storage.commit([append_list(value_list("bench", "l", scope), n)])
        side_s = time.perf_counter() - start
        storage.close()
    return {
        "count": count,
        "main_commits_per_s": round(count / main_s, 1),
        "sidecar_commits_per_s": round(count / side_s, 1),
    }


def measure_fuzz(
    examples: int = 30, backends: tuple[str, ...] = ("jsonl", "jsonl-fakefs", "memory")
) -> dict[str, Any]:
    """Machine steps per second per backend next to the trivial machine, in the same run."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from scopecheck.backends.resolve import resolve_backend
    from scopecheck.bench.trivial import TrivialMachine
    from scopecheck.machines.storage import make_machine

    chosen = settings(
        max_examples=examples,
        stateful_step_count=40,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    figures: dict[str, Any] = {}
    machines: list[tuple[str, Any]] = [("trivial", TrivialMachine)]
    machines += [(name, make_machine(resolve_backend(name))) for name in backends]
    for name, machine in machines:
        machine.steps_run = 0
        start = time.perf_counter()
        run_state_machine_as_test(machine, settings=chosen)  # type: ignore[no-untyped-call]
        seconds = time.perf_counter() - start
        figures[name] = {
            "steps": machine.steps_run,
            "steps_per_s": round(machine.steps_run / seconds, 1),
        }
    trivial = figures["trivial"]["steps_per_s"]
    for name in backends:
        figures[name]["vs_trivial"] = round(figures[name]["steps_per_s"] / trivial, 3)
    return figures


def _label(size: int) -> str:
    return f"{size // MB}MB" if size % MB == 0 else f"{size}B"


def bench_jsonl(
    large: bool = False,
    repeat: int = 3,
    commits: int = 200,
    sizes: tuple[int, ...] | None = None,
    fuzz_examples: int = 30,
    transcripts: bool = True,
) -> dict[str, Any]:
    """Run every JSONL benchmark once and return the figures (see module docstring).

    ``sizes`` (bytes) overrides the default 1 MB and 10 MB (plus 100 MB with ``large``);
    ``fuzz_examples=0`` skips the machine steps/s figures and ``transcripts=False`` the real
    transcripts (:func:`measure_transcripts`).
    """
    if sizes is None:
        sizes = (1 * MB, 10 * MB) + ((100 * MB,) if large else ())
    return {
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "orjson": orjson.__version__,
            "cpus": os.cpu_count(),
        },
        "open": {_label(size): measure_open(size, repeat) for size in sizes},
        "open_transcripts": measure_transcripts(repeat) if transcripts else {},
        "commits": measure_commits(commits),
        "fuzz": measure_fuzz(fuzz_examples) if fuzz_examples else None,
    }


if __name__ == "__main__":  # pragma: no cover - manual benchmark command
    print(
        orjson.dumps(bench_jsonl(large="--large" in sys.argv), option=orjson.OPT_INDENT_2).decode()
    )
