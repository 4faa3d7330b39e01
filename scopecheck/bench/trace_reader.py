"""The strace reader before and after it read in linear time (CRASH-SYS-16): figures, never
assertions.

* ``after`` -- this reader (``crashsim/strace.py``): seconds to read a generated trace of
  ``size`` bytes (the calls of an LMDB run: library loads, 4 KiB ``pwrite64`` pages, ``writev``,
  syncs, three threads' calls split into ``<unfinished ...>``/``<... resumed>``), and seconds
  to read a trace holding one ``pwrite64`` line of ``escapes`` hex escapes cut in the middle
  (what two writers of one trace file leave: :func:`cut_trace`);
* ``before`` -- the regex reader of commit :data:`BEFORE`, taken from git and run in a
  subprocess with a timeout on the same two traces, and on the cut line with 16, 18, 20 and 22
  escapes before the cut, where its time doubles with each escape: "did not finish in N s" when
  it does not finish, "then raised ValueError" when it gives up on the line after its search.

Medians of ``runs`` runs for this reader; one run, bounded by ``timeout``, for the old one.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scopecheck.bench.common import environment
from scopecheck.crashsim import strace

#: The last commit of the regex reader.
BEFORE = "7056e90"
#: The size of the generated trace (bytes).
SIZE = 10 * 2**20
#: The hex escapes of the cut line (half of them before the cut).
ESCAPES = 100_000
#: The escapes before the cut the old reader's growth is measured on.
GROWTH = (16, 18, 20, 22)
#: Seconds the old reader is given for one trace.
TIMEOUT = 60.0

_THREADS = (4211, 4212, 4213)
_DATA = "/tmp/bench/s.lmdb/data.mdb"


def _hexed(data: bytes) -> str:
    digits = data.hex()
    return "".join("\\x" + digits[i : i + 2] for i in range(0, len(digits), 2))


def _fd(number: int, path: str) -> str:
    return f"{number}<{_hexed(path.encode())}>"


def generated_trace(size: int, seed: int = 0) -> list[str]:
    """Lines of a trace of about ``size`` bytes, as strace prints an LMDB backend's calls (a
    real one averages about 400 bytes a line: library loads, lookups and locks, and now and
    then a 4 KiB page in hex)."""
    rng = random.Random(seed)
    data, lock = _fd(5, _DATA), _fd(6, _DATA.replace("data", "lock"))
    cwd = f"AT_FDCWD<{_hexed(b'/tmp/bench')}>"
    pipe = f"1<{_hexed(b'pipe:[218408]')}>"
    lines: list[str] = []
    total = 0
    while total < size:
        pid = rng.choice(_THREADS)
        kind = rng.random()
        if kind < 0.02:
            page = bytes(rng.randrange(256) for _ in range(64)) * 64
            new = [f'{pid} pwrite64({data}, "{_hexed(page)}", 4096, {4096 * rng.randrange(64)})'
                   " = 4096"]  # fmt: skip
        elif kind < 0.03:
            page = bytes(rng.randrange(256) for _ in range(64)) * 32
            new = [
                f'{pid} writev({data}, [{{iov_base="{_hexed(page)}", iov_len=2048}}, '
                f'{{iov_base="{_hexed(page)}", iov_len=2048}}], 2) = 4096'
            ]
        elif kind < 0.08:
            other = rng.choice([t for t in _THREADS if t != pid])
            new = [
                f"{pid} fdatasync({data} <unfinished ...>",
                f"{other} munmap(0x7f9d5b72b000, 16384) = 0",
                f"{pid} <... fdatasync resumed>)       = 0",
            ]
        elif kind < 0.33:
            library = _fd(3, f"/usr/lib/python3.11/lib-dynload/_m{rng.randrange(1000)}.so")
            name = _hexed(f"/usr/lib/python3.11/_m{rng.randrange(1000)}.py".encode())
            new = [
                f'{pid} openat({cwd}, "{name}", O_RDONLY|O_CLOEXEC) = {library}',
                f"{pid} mmap(NULL, 2342912, PROT_READ|PROT_EXEC, MAP_PRIVATE|MAP_DENYWRITE, "
                f"{library}, 0) = 0x7f9d5ccf5000",
                f"{pid} close({library}) = 0",
            ]
        else:
            new = [
                rng.choice(
                    [
                        f"{pid} fcntl({lock}, F_SETLK, {{l_type=F_WRLCK, l_whence=SEEK_SET, "
                        "l_start=0, l_len=1}) = 0",
                        f"{pid} read(0, 0x5653d8027cc0, 0x1000)   = 0x4c",
                        f'{pid} write({pipe}, "{_hexed(b"{}")}", 2) = 2',
                        f"{pid} lseek({data}, 0, SEEK_END) = {4096 * rng.randrange(64)}",
                        f'{pid} openat({cwd}, "{_hexed(b"/nope")}", O_RDONLY) = -1 ENOENT '
                        "(No such file or directory)",
                        f"{pid} fcntl({_library_fd(rng)}, F_GETFD) = 0x1 (flags FD_CLOEXEC)",
                    ]
                )
            ]
        lines.extend(new)
        total += sum(len(line) + 1 for line in new)
    return lines


def _library_fd(rng: random.Random) -> str:
    return _fd(3, f"/usr/lib/python3.11/__pycache__/m{rng.randrange(1000)}.cpython-311.pyc")


def cut_trace(escapes: int) -> list[str]:
    """A trace with one ``pwrite64`` line of ``2 * escapes`` escapes cut in the middle, as two
    writers of one file leave it (tests/data/traces/two-writers.txt): the first ``escapes`` end
    in the other writer's bytes (a backslash, then the end of one of its lines), two of its
    ``munmap`` lines follow, then the rest of the string on a line of its own."""
    return [
        f"4211 lseek({_fd(5, _DATA)}, 32768, SEEK_SET) = 32768",
        f'4211 pwrite64({_fd(5, _DATA)}, "' + "\\x00" * escapes + "\\)   = 0",
        "4212 munmap(0x7fb6daea0000, 417792)    = 0",
        "4212 munmap(0x7fb6db781000, 16384)     = 0",
        "x00" + "\\x00" * (escapes - 1) + f'", {2 * escapes}, 32768) = {2 * escapes}',
        f"4211 fdatasync({_fd(5, _DATA)}) = 0",
    ]


def _write(lines: Sequence[str], folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="latin-1", newline="\n") as handle:
        handle.writelines(line + "\n" for line in lines)
    return path


def _read_here(path: str, runs: int) -> dict[str, Any]:
    times = []
    records: list[Any] = []
    for _ in range(runs):
        start = time.perf_counter()
        records = strace.read_trace(path)
        times.append(time.perf_counter() - start)
    unreadable = sum(isinstance(r, strace.Unreadable) for r in records)
    return {"seconds": round(statistics.median(times), 4), "records": len(records),
            "unreadable": unreadable}  # fmt: skip


#: What the subprocess runs: load the old module from a file, time its read of a trace.
_OLD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("old_strace", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
start = time.perf_counter()
try:
    said = len(module.read_trace(sys.argv[2]))
except Exception as exc:
    said = type(exc).__name__
print(time.perf_counter() - start, said)
"""


def old_reader(folder: str) -> str | None:
    """The source file of the reader of :data:`BEFORE`, from the git checkout this package
    is installed from, or ``None`` (no git, or not a checkout)."""
    source = Path(os.path.realpath(strace.__file__)).parent
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "show", f"{BEFORE}:crashsim/strace.py"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    path = os.path.join(folder, "old_strace.py")
    Path(path).write_bytes(done.stdout)
    return path


def _read_old(module: str, path: str, timeout: float) -> dict[str, Any]:
    """The old reader on ``path`` in a subprocess: its seconds, or that it did not finish."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _OLD, module, path],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"seconds": None, "said": f"did not finish in {timeout:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return {"seconds": None, "said": f"failed: {tail}"}
    seconds, records = done.stdout.split()
    if not records.isdigit():  # it raised (the regex reader's ValueError on a cut string)
        return {"seconds": round(float(seconds), 4), "raised": records,
                "said": f"{float(seconds):.3f} s, then raised {records}"}  # fmt: skip
    return {"seconds": round(float(seconds), 4), "records": int(records),
            "said": f"{float(seconds):.3f} s"}  # fmt: skip


def bench_trace_reader(
    runs: int,
    *,
    size: int = SIZE,
    escapes: int = ESCAPES,
    growth: Sequence[int] = GROWTH,
    timeout: float = TIMEOUT,
) -> dict[str, Any]:
    """The figures of the module docstring."""
    with tempfile.TemporaryDirectory(prefix="scopecheck-bench-trace-") as folder:
        big = _write(generated_trace(size), folder, "big.txt")
        cut = _write(cut_trace(escapes // 2), folder, "cut.txt")
        after = {
            "trace": {"bytes": os.path.getsize(big), **_read_here(big, runs)},
            "cut_line": {"escapes": escapes, **_read_here(cut, runs)},
        }
        module = old_reader(folder)
        before: dict[str, Any]
        if module is None:
            before = {"skipped": f"the reader of {BEFORE} is not here (not a git checkout)"}
        else:
            before = {
                "trace": _read_old(module, big, timeout),
                "cut_line": _read_old(module, cut, timeout),
                "growth": {
                    str(n): _read_old(module, _write(cut_trace(n), folder, f"cut-{n}.txt"),
                                      timeout)
                    for n in growth
                },
            }  # fmt: skip
    return {
        "benchmark": "trace-reader",
        "environment": environment(),
        "runs": runs,
        "timeout_s": timeout,
        "commit_before": BEFORE,
        "after": after,
        "before": before,
    }


def render(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    after, before = result["after"], result["before"]
    trace, cut = after["trace"], after["cut_line"]
    table = Table(title=f"strace reader: before ({result['commit_before']}) and after")
    for column in ("input", "before", f"after (median of {result['runs']})"):
        table.add_column(column)
    shown = before.get("skipped")
    table.add_row(
        f"trace of {trace['bytes'] / 2**20:.1f} MiB ({trace['records']:,} records)",
        shown or before["trace"]["said"],
        f"{trace['seconds']:.3f} s",
    )
    table.add_row(
        f"one line of {cut['escapes']:,} escapes cut in two",
        shown or before["cut_line"]["said"],
        f"{cut['seconds']:.4f} s ({cut['unreadable']} lines unreadable)",
    )
    for n, figures in ({} if shown else before["growth"]).items():
        table.add_row(f"  the cut line with {n} escapes before the cut", figures["said"], "")
    console.print(table)
