"""``scopecheck bench size``: what scopes save on disk for the seeds' workload (002 §1, §9).

The seed workload (:mod:`scopecheck.workloads.seed_workload`) is written twice per backend: with
scopes (progress in operation sidecars, one retirement per operation) and without (the same
addresses in the session scope with explicit deletes, as before Step 1).  Reported per backend:

* JSONL — bytes of the main log, peak and final bytes of the sidecar directory while scoped, and
  the main log of the unscoped run; ``ratio`` = unscoped main ÷ scoped main (target ≥ 1,000,
  the seed's "three orders of magnitude"; final sidecar bytes 0 once every operation retired);
* SQLite — the database file (plus WAL) after close, scoped and unscoped, and the peak while
  running; SQLite deletes rows in place, so its ratio says how little it cared (``--json``
  adds the live bytes, file size less free pages: equal with and without scopes);
* Memory — no files: a format-4 estimate of the same two logs from the committed records
  (:class:`Format4Meter`), so the figures exist before the file backends land.

``--json`` adds, for JSONL, the main logs' bytes per operation by record kind
(:func:`main_log_breakdown`) and ``budget_bytes_per_op_for_1000x``: the arithmetic of the ratio.
On the full seed workload the scoped main log keeps about 5.8 KB per operation (settled entries
~2.8 KB, usage ~0.16 KB, session-scoped coordination values ~2.85 KB) against a 1,000x budget of
about 5.0 KB, so the ratio is about 860x; OP-14 in ``spec/rules/ops.toml`` has the figures.

Worlds live under ``$SCOPECHECK_SCRATCH`` or ``/dev/shm`` when present: the bytes do not depend
on the medium and tmpfs keeps the 100 MB unscoped run quick.  Figures, never assertions.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import orjson

from scopecheck.models.lifecycle import Tx
from scopecheck.models.records import Committed
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
)
from scopecheck.workloads.seed_workload import SEED, WorkloadParams, seed_workload

SESSION_ID = "bench"
#: The seed's unscoped JSONL figure for this workload (002 §1, §3: "93.89 MB").
SEED_UNSCOPED_MB = 93.89
_BASE_TIME = 1_750_000_000_000


# -- a format-4 estimate from committed records (REFERENCE §1) -----------------------------


def record_bytes(item: Committed) -> int:
    """Length of the format-4 JSON object of one committed write (REFERENCE §1 shapes)."""
    write, seq = item.write, item.seq
    if isinstance(write, InsertEntry):
        head = orjson.dumps(
            {"kind": "entry", "id": write.id, "parentId": write.parent_id, "type": write.type}
        )
        payload = write.payload_json[1:-1]
        tail = orjson.dumps({"seq": seq, "timestamp": item.timestamp})[1:]
        return len(head) - 1 + (1 + len(payload) if payload else 0) + 1 + len(tail)
    if isinstance(write, InsertUsage):
        row: dict[str, Any] = {"kind": "usage", "id": write.id, "usage": 0}
        size = len(orjson.dumps(row)) - 1 + len(write.usage_json)
        extra: dict[str, Any] = {"adjustment": write.adjustment, "seq": seq}
        if write.entry_id is not None:
            extra["entryId"] = write.entry_id
        return size + len(orjson.dumps(extra)) - 1
    if isinstance(write, RetireScope):
        return len(
            orjson.dumps({"kind": "scope", "op": "retire", "seq": seq, "scopeId": write.retired.id})
        )
    assert isinstance(write, (SetValue, DeleteValue, AppendList, DeleteList))
    kind = "value" if isinstance(write, (SetValue, DeleteValue)) else "list"
    op = {SetValue: "set", DeleteValue: "delete", AppendList: "append", DeleteList: "delete"}[
        type(write)
    ]
    obj: dict[str, Any] = {
        "kind": kind,
        "op": op,
        "seq": seq,
        "namespace": write.address.namespace,
        "key": write.address.key,
    }
    if isinstance(write, AppendList) and write.tag is not None:
        obj["tag"] = write.tag
    if write.address.scope_id is not None:
        obj["scopeId"] = write.address.scope_id
    size = len(orjson.dumps(obj))
    if isinstance(write, SetValue):
        size += len(',"value":') + len(write.value_json)
    elif isinstance(write, AppendList):
        size += len(',"value":') + len(write.element_json)
    return size


@attrs.define
class Format4Meter:
    """Bytes a format-4 JSONL layout would hold: main log, and sidecars until retirement."""

    main: int = 0
    sidecars: dict[str, int] = attrs.field(factory=dict)
    peak_sidecar: int = 0

    def header(self) -> None:
        self.main += 100  # {"v":4,"kind":"header",...} — about this long with a short cwd

    def observe(self, committed: tuple[Committed, ...]) -> None:
        if not committed:
            return
        sizes = [record_bytes(c) for c in committed]
        line = (sizes[0] if len(sizes) == 1 else sum(sizes) + len(sizes) + 1) + 1
        scope_ids = {
            c.write.address.scope_id
            for c in committed
            if isinstance(c.write, (SetValue, DeleteValue, AppendList, DeleteList))
        }
        scope_id = next(iter(scope_ids)) if len(scope_ids) == 1 else None
        if scope_id is None:
            self.main += line
        else:
            if scope_id not in self.sidecars:
                self.sidecars[scope_id] = 90 + len(scope_id)  # scope header line
            self.sidecars[scope_id] += line
        for c in committed:
            if isinstance(c.write, RetireScope):
                self.sidecars.pop(c.write.retired.id, None)
        self.peak_sidecar = max(self.peak_sidecar, self.sidecar_bytes)

    @property
    def sidecar_bytes(self) -> int:
        return sum(self.sidecars.values())


# -- where the main log's bytes go (the arithmetic behind the ratio) ------------------------


def _record_kind(record: dict[str, Any]) -> str:
    kind = record.get("kind")
    if kind == "entry":
        message = record.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        return f"entry {record.get('type')}" + (f" ({role})" if role else "")
    if kind in ("value", "list"):
        return f"{kind} {record.get('op')} {record.get('namespace')}"
    if kind == "scope":
        return f"scope {record.get('op')}"
    return str(kind)


def _settled_text(record: dict[str, Any]) -> int:
    message = record.get("message") if record.get("kind") == "entry" else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return 0
    return sum(
        len(part["text"].encode())
        for part in message["content"]
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )


def main_log_breakdown(data: bytes, ops: int) -> dict[str, Any]:
    """Bytes of a format-4 main log by record kind, per operation: each record's compact JSON,
    plus ``framing`` (transaction array brackets, commas, newlines) and the ``header`` line.

    This is the arithmetic of the ratio: what the main log keeps per operation, and how much of
    it is settled text (assistant message and tool-result text) against envelopes and
    coordination values.
    """
    by_kind: Counter[str] = Counter()
    records: Counter[str] = Counter()
    text = 0
    for index, line in enumerate(data.splitlines(keepends=True)):
        if index == 0:
            by_kind["header"] += len(line)
            continue
        parsed = orjson.loads(line)
        items = parsed if isinstance(parsed, list) else [parsed]
        used = 0
        for record in items:
            size = len(orjson.dumps(record))
            used += size
            kind = _record_kind(record)
            by_kind[kind] += size
            records[kind] += 1
            text += _settled_text(record)
        by_kind["framing"] += len(line) - used
    per = max(ops, 1)
    return {
        "total_bytes": len(data),
        "bytes_per_op": round(len(data) / per, 1),
        "settled_text_bytes_per_op": round(text / per, 1),
        "bytes_per_op_by_kind": {
            k: round(v / per, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
        },
        "records_per_op_by_kind": {k: round(v / per, 2) for k, v in sorted(records.items())},
    }


def sqlite_live_bytes(path: str) -> int:
    """Bytes of the pages a closed SQLite file uses: its size less the free pages that deleted
    rows left behind (SQLite reuses them; only VACUUM returns them to the filesystem)."""
    import apsw

    connection = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)

    def pragma(name: str) -> int:
        return int(str(connection.execute(f"PRAGMA {name}").fetchall()[0][0]))

    try:
        return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size")
    finally:
        connection.close()


# -- running the workload on a backend -------------------------------------------------------


@attrs.frozen
class SizeRun:
    """One run of the workload on one backend."""

    main_bytes: int
    sidecar_peak_bytes: int | None
    sidecar_final_bytes: int | None
    peak_bytes: int
    commits: int
    seconds: float
    estimate_main_bytes: int
    estimate_sidecar_peak_bytes: int
    estimate_sidecar_final_bytes: int
    #: JSONL only: :func:`main_log_breakdown` of the main log after close.
    breakdown: dict[str, Any] | None = None
    #: SQLite only: bytes of the pages in use after close (page count less free pages).
    live_bytes: int | None = None


def _dir_bytes(path: str) -> int:
    try:
        with os.scandir(path) as entries:
            return sum(e.stat().st_size for e in entries if e.is_file())
    except FileNotFoundError:
        return 0


def _files_bytes(paths: Iterable[str]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(path).st_size
    return total


@attrs.frozen
class Layout:
    """How to open a backend at a directory and where its bytes are."""

    open: Callable[[str, Callable[[], int]], Any]
    main_files: Callable[[str], list[str]]
    sidecar_dir: Callable[[str], str] | None


def _memory_layout() -> Layout:
    from scopecheck.impl.memory import MemoryRepository

    return Layout(lambda root, clock: MemoryRepository(clock), lambda root: [], None)


def _jsonl_layout() -> Layout:
    # Imported by name so this module type-checks before the JSONL backend lands.
    jsonl: Any = importlib.import_module("scopecheck.impl.jsonl")

    def main(root: str) -> list[str]:
        return [os.path.join(root, f"{SESSION_ID}.jsonl")]

    return Layout(
        lambda root, clock: jsonl.JsonlRepository(root, None, clock, cwd="/bench"),
        main,
        lambda root: os.path.join(root, f"{SESSION_ID}.jsonl.scopes"),
    )


def _sqlite_layout() -> Layout:
    sqlite: Any = importlib.import_module("scopecheck.impl.sqlite")

    def files(root: str) -> list[str]:
        base = os.path.join(root, f"{SESSION_ID}.sqlite")
        return [base, base + "-wal", base + "-shm", base + "-journal"]

    return Layout(lambda root, clock: sqlite.SqliteRepository(root, clock), files, None)


LAYOUTS: dict[str, Callable[[], Layout]] = {
    "memory": _memory_layout,
    "jsonl": _jsonl_layout,
    "sqlite": _sqlite_layout,
}


def scratch_dir() -> str | None:
    chosen = os.environ.get("SCOPECHECK_SCRATCH")
    if chosen:
        return chosen
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_workload(backend: str, txs: Iterable[Tx], ops: int = 1) -> SizeRun:
    """Commit ``txs`` to a fresh ``backend`` location and measure its bytes as it goes."""
    layout = LAYOUTS[backend]()
    root = tempfile.mkdtemp(prefix=f"scopecheck-size-{backend}-", dir=scratch_dir())
    now = [_BASE_TIME]

    def clock() -> int:
        now[0] += 1
        return now[0]

    meter = Format4Meter()
    meter.header()
    start = time.perf_counter()
    try:
        repo = layout.open(root, clock)
        store = repo.create(SESSION_ID)
        peak_sidecar = peak = commits = 0
        sidecars = layout.sidecar_dir(root) if layout.sidecar_dir else None
        for tx in txs:
            meter.observe(store.commit(list(tx.writes)))
            commits += 1
            if sidecars is not None:
                peak_sidecar = max(peak_sidecar, _dir_bytes(sidecars))
            peak = max(peak, _files_bytes(layout.main_files(root)))
        final_sidecar = None if sidecars is None else _dir_bytes(sidecars)
        store.close()
        repo.close()
        main = _files_bytes(layout.main_files(root))
        seconds = time.perf_counter() - start
        breakdown = None
        live = None
        if backend == "jsonl":
            with open(layout.main_files(root)[0], "rb") as handle:
                breakdown = main_log_breakdown(handle.read(), ops)
        elif backend == "sqlite":
            live = sqlite_live_bytes(layout.main_files(root)[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return SizeRun(
        main_bytes=main,
        sidecar_peak_bytes=None if sidecars is None else peak_sidecar,
        sidecar_final_bytes=final_sidecar,
        peak_bytes=max(peak, main),
        commits=commits,
        seconds=round(seconds, 2),
        estimate_main_bytes=meter.main,
        estimate_sidecar_peak_bytes=meter.peak_sidecar,
        estimate_sidecar_final_bytes=meter.sidecar_bytes,
        breakdown=breakdown,
        live_bytes=live,
    )


def available_backends() -> list[str]:
    found = []
    for name, layout in LAYOUTS.items():
        try:
            layout()
        except ImportError:
            continue
        found.append(name)
    return found


def compare(backend: str, params: WorkloadParams) -> dict[str, Any]:
    """The scoped and unscoped runs of ``params`` on ``backend``, side by side."""
    scoped = run_workload(backend, seed_workload(params, scoped=True), params.ops)
    unscoped = run_workload(backend, seed_workload(params, scoped=False), params.ops)
    if backend == "memory":
        scoped_main, unscoped_main = scoped.estimate_main_bytes, unscoped.estimate_main_bytes
        peak_sidecar: int | None = scoped.estimate_sidecar_peak_bytes
        final_sidecar: int | None = scoped.estimate_sidecar_final_bytes
    else:
        scoped_main, unscoped_main = scoped.main_bytes, unscoped.main_bytes
        peak_sidecar, final_sidecar = scoped.sidecar_peak_bytes, scoped.sidecar_final_bytes
    return {
        "scoped_main_bytes": scoped_main,
        "scoped_sidecar_peak_bytes": peak_sidecar,
        "scoped_sidecar_final_bytes": final_sidecar,
        "unscoped_main_bytes": unscoped_main,
        "ratio": round(unscoped_main / scoped_main, 1) if scoped_main else None,
        "scoped_main_bytes_per_op": round(scoped_main / max(params.ops, 1)),
        "scoped_peak_bytes": scoped.peak_bytes,
        "unscoped_peak_bytes": unscoped.peak_bytes,
        "format4_estimate": {
            "scoped_main_bytes": scoped.estimate_main_bytes,
            "scoped_sidecar_peak_bytes": scoped.estimate_sidecar_peak_bytes,
            "unscoped_main_bytes": unscoped.estimate_main_bytes,
        },
        "commits": scoped.commits,
        "seconds": {"scoped": scoped.seconds, "unscoped": unscoped.seconds},
        **(
            {
                # Both files hold the same live pages; the difference is free pages.
                "scoped_live_bytes": scoped.live_bytes,
                "unscoped_live_bytes": unscoped.live_bytes,
            }
            if scoped.live_bytes is not None
            else {}
        ),
        **(
            {
                # The most the scoped main log may hold per operation for the 1,000x target.
                "budget_bytes_per_op_for_1000x": round(unscoped_main / 1000 / max(params.ops, 1)),
                "scoped_main_breakdown": scoped.breakdown,
                "unscoped_main_breakdown": unscoped.breakdown,
            }
            if scoped.breakdown is not None
            else {}
        ),
        **({"estimate": True} if backend == "memory" else {}),
    }


def measure_sizes(
    params: WorkloadParams = SEED, backends: Iterable[str] | None = None
) -> dict[str, Any]:
    chosen = list(backends) if backends is not None else available_backends()
    result: dict[str, Any] = {
        "benchmark": "size",
        "params": attrs.asdict(params),
        "seed_unscoped_mb": SEED_UNSCOPED_MB,
    }
    for name in ("jsonl", "sqlite", "memory"):
        result[name] = compare(name, params) if name in chosen else None
    return result


def bench_size(runs: int) -> dict[str, Any]:
    """The seed workload at full size on every available backend (``runs`` is ignored: bytes
    are deterministic)."""
    from scopecheck.bench.common import environment

    return {**measure_sizes(SEED), "environment": environment()}
