"""``scopecheck bench fleet``: HypoFuzz workers over a user's backend with a planted bug, with
one worker and with two, sharing a Redis or each keeping its own directory database -- figures,
never assertions.

**What runs.**  A worker is one ``hypothesis fuzz --no-dashboard -n 1`` process group in a
directory of its own, collecting a targets file that is ``scopecheck.fuzz_targets_for(SPEC,
profile="dev")`` (FLEET-3) -- a fleet's machine each, as in ``tests/checking/test_fleet.py``.
Its database is chosen by ``$SCOPECHECK_DB`` (FLEET-1): ``directory`` gives each worker a fresh
directory database of its own; ``redis`` gives every worker the same fresh Redis (a real
``redis-server`` this benchmark starts on a free loopback port, flushed before each run) beside a
local directory of its own (``$SCOPECHECK_LOCAL_DB``, FLEET-2).  Every run starts from empty
databases, so no run replays what an earlier one found.  A run stops by killing each worker's
whole process group (HypoFuzz's hub starts the worker and a manager process; a signal to the hub
alone leaves them running).

**Two runs per repetition**, because HypoFuzz stops fuzzing a test once it holds a failure for
it: on the planted bug (:data:`BUGGY`, the README's broken example) the search ends within its
first examples and what follows is shrinking, so a rate taken there would be a rate of
shrinking, and a run past the failure would measure a worker with nothing left to fuzz.

* *find*: :data:`BUGGY`, stopped as soon as the bug's failure is saved in the example database
  or at the budget.  **Time to first failure** is seconds from starting the workers until the
  database holds a failing example of any target: HypoFuzz saves the failing choice sequence
  (under the test's key plus ``.secondary`` when found, under the key itself once shrunk), and
  Hypothesis replays either key, so from then on the failure is the fleet's.  The database --
  Redis for ``redis``, every worker's directory for ``directory`` -- is read through HypoFuzz's
  own database API every :data:`POLL` seconds, which bounds the resolution.  A run that did not
  find the bug within the budget says so; it is never given a time.
* *rate*: :data:`TWIN`, the same example without the bug (:data:`BUGGY` subclasses it and
  changes only retirement), fuzzed for the whole budget.  **Distinct examples per second** is
  the distinct examples every worker of the run executed ÷ seconds from the first example any
  worker ran to the stop (the start-up before the first example is reported on its own).

**What "distinct examples" counts.**  The targets file registers :class:`ExampleRecorder` with
Hypothesis's observability API (``add_observability_callback(..., all_threads=True)``), which
is called once for every test case Hypothesis executes -- HypoFuzz's generated and mutated
inputs, its replays of saved examples, its stability re-executions and its shrinking steps.
The recorder appends the test case's choice sequence, encoded as Hypothesis encodes examples in
the database (``choices_to_bytes`` over ``metadata.choice_nodes``, which HypoFuzz turns on), and
hashed, with the time (``CLOCK_MONOTONIC``, one clock for every process on Linux).  Examples are
*distinct* when their choice sequences differ: a re-execution of the same sequence -- HypoFuzz's
stability check, a replay, the other worker happening on the same input -- counts once, so two
workers that repeat each other's work do not count twice.  The executions counted with repeats
are reported beside them.  Counting costs each example one hash and one ``write``.

Each configuration runs ``runs`` times, configurations interleaved (repetition 1 of each, then
2, ...), and the median is reported: for the time to first failure a run without a failure counts
as later than any, so the median is a time only when more than half of the runs found the bug.
The ratios are 2 workers ÷ 1 worker per database and redis ÷ directory per worker count.  Without
a ``redis-server`` on ``PATH`` (Debian's package redis-server) the redis configurations are
skipped with the reason and the directory ones still run; without HypoFuzz all are skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

#: The user's backend with the planted bug (the README's broken example).
BUGGY = "scopecheck.examples.broken_backend:make_backend"
#: The same backend without the bug: what the examples-per-second runs fuzz.
TWIN = "scopecheck.examples.good_backend:make_backend"
#: Seconds a run may last, from starting its workers.
BUDGET = 30.0
#: Seconds between two looks at the database for a failure (the time's resolution).
POLL = 0.1
DATABASES = ("directory", "redis")
WORKERS = (1, 2)
#: The figures each configuration reports.
FIGURES = ("distinct_examples_per_s", "time_to_first_failure_s", "startup_s")
#: The name of each worker's record of its examples, ``<pid>`` before it.
RECORD_SUFFIX = ".examples"

TARGETS = '''"""HypoFuzz targets for {spec}, written by `scopecheck bench fleet`."""

import scopecheck
from scopecheck.bench.fleet import record_examples

record_examples({record!r})
globals().update(scopecheck.fuzz_targets_for({spec!r}, profile="dev"))
'''


@attrs.frozen
class Skipped:
    """Why a configuration or a figure has no number."""

    reason: str


@attrs.frozen
class Configuration:
    database: str
    workers: int

    @property
    def label(self) -> str:
        return f"{workers_label(self.workers)}, {self.database}"


def workers_label(count: int) -> str:
    return f"{count} worker{'s' * (count != 1)}"


@attrs.frozen
class Run:
    """One run of one configuration: seconds are from starting its workers."""

    kind: str  # "find" (the planted bug) or "rate" (its twin)
    stopped_s: float
    #: The first example any worker ran (``None``: none ran).
    first_example_s: float | None
    executions: int
    distinct: int
    #: When the database first held a failure (``None``: not within the budget, or a rate run).
    failure_s: float | None = None
    #: Distinct examples run until then.
    examples_to_failure: int | None = None
    #: Why the run measured nothing (a worker that exited, no example run).
    error: str | None = None

    @property
    def distinct_per_s(self) -> float | None:
        if self.error is not None or self.first_example_s is None:
            return None
        fuzzing = self.stopped_s - self.first_example_s
        return self.distinct / fuzzing if fuzzing > 0 else None


class ExampleRecorder:
    """An observability callback appending ``NANOSECONDS DIGEST STATUS`` to
    ``<directory>/<pid>.examples`` for each test case Hypothesis executes in this process:
    the ``CLOCK_MONOTONIC`` time, a hash of the choice sequence as the database encodes it
    (``-`` when the observation carries none), and passed/failed/gave_up."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: dict[int, int] = {}

    def __call__(self, observation: Any, thread_id: int) -> None:
        if observation.type != "test_case":
            return
        from hypothesis.database import choices_to_bytes

        nodes = observation.metadata.choice_nodes
        digest = (
            "-"
            if nodes is None
            else hashlib.blake2b(
                choices_to_bytes(tuple(node.value for node in nodes)), digest_size=16
            ).hexdigest()
        )
        line = f"{time.monotonic_ns()} {digest} {observation.status}\n"
        os.write(self._file(), line.encode())

    def _file(self) -> int:
        """This process's record (a forked worker opens its own)."""
        pid = os.getpid()
        found = self.files.get(pid)
        if found is None:
            path = self.directory / f"{pid}{RECORD_SUFFIX}"
            found = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.files[pid] = found
        return found


#: The recorders registered in this process, by directory: the targets file may be imported
#: more than once (the hub's collection, then the worker's), the callback is added once.
_RECORDERS: dict[str, ExampleRecorder] = {}


def record_examples(directory: str) -> None:
    """Record every test case this process executes under ``directory`` (the targets file of a
    benchmark run calls this; see the module docstring for what is counted)."""
    if directory in _RECORDERS:
        return
    from hypothesis.internal.observability import add_observability_callback

    recorder = ExampleRecorder(Path(directory))
    _RECORDERS[directory] = recorder
    add_observability_callback(recorder, all_threads=True)


def read_records(directory: Path, start_ns: int, stop_ns: int) -> list[tuple[float, str]]:
    """``(seconds from start, digest)`` of every example recorded under ``directory`` up to
    ``stop_ns``, in time order; a line cut short by the stop is left out, and so is an example
    without a choice sequence (none under HypoFuzz, which turns them on)."""
    found: list[tuple[float, str]] = []
    for path in directory.glob(f"*{RECORD_SUFFIX}"):
        for line in path.read_text(encoding="ascii", errors="replace").splitlines():
            parts = line.split()
            if len(parts) != 3 or not parts[0].isdigit() or parts[1] == "-":
                continue
            at = int(parts[0])
            if at <= stop_ns:
                found.append(((at - start_ns) / 1e9, parts[1]))
    return sorted(found)


def failure_saved(database: Any) -> bool:
    """Whether ``database`` (an ``ExampleDatabase``) holds a failure of a test HypoFuzz has
    fuzzed: shrunk (the test's key) or not yet (``.secondary``), read through HypoFuzz's
    database API."""
    from hypofuzz.database import FailureState, HypofuzzDatabase, test_keys_key

    hypofuzz_db = HypofuzzDatabase(database)
    for key in list(hypofuzz_db.fetch(test_keys_key)):
        for state in (FailureState.UNSHRUNK, FailureState.SHRUNK):
            if next(iter(hypofuzz_db.failures(state=state).fetch(key)), None) is not None:
                return True
    return False


def free_port() -> int:
    """A loopback TCP port free right now (for a server started next)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str | Skipped]:
    """A real ``redis-server`` on a free loopback port, no persistence, killed afterwards: its
    URL, or why there is none."""
    program = shutil.which("redis-server")
    if program is None:
        yield Skipped("no redis-server on PATH (Debian package redis-server)")
        return
    try:
        import redis
    except ImportError:
        yield Skipped("the redis package is not installed: pip install 'scopecheck[hypofuzz]'")
        return
    port = free_port()
    server = subprocess.Popen(
        [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    yield Skipped(f"redis-server on port {port} did not answer in 10 s")
                    return
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait()


def _hypofuzz_cli() -> str | Skipped:
    import importlib.util

    program = shutil.which("hypothesis", path=os.path.dirname(sys.executable))
    if program is None or importlib.util.find_spec("hypofuzz") is None:
        return Skipped("HypoFuzz is not installed: pip install 'scopecheck[hypofuzz]'")
    return program


def _start_worker(
    program: str, directory: Path, spec: str, record: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """One ``hypothesis fuzz -n 1`` over ``spec`` in ``directory``, in its own process group;
    its stderr is kept in ``directory/stderr`` for when it exits early."""
    directory.mkdir(parents=True)
    (directory / "test_targets.py").write_text(
        TARGETS.format(spec=spec, record=str(record)), encoding="utf-8"
    )
    with open(directory / "stderr", "wb") as stderr:
        return subprocess.Popen(
            [program, "fuzz", "--no-dashboard", "-n", "1", "--", "test_targets.py"],
            cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip


def _stop(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill each worker's whole process group (hub, HypoFuzz worker, manager)."""
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
    for worker in workers:
        worker.wait()


def _last_line(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "(nothing on stderr)"


def run_once(
    program: str,
    config: Configuration,
    kind: str,
    directory: Path,
    budget: float,
    redis_url: str | None,
) -> Run:
    """One run of ``config``: ``kind`` ``find`` fuzzes :data:`BUGGY` until the database holds
    a failure or ``budget`` seconds have passed, ``rate`` fuzzes :data:`TWIN` for ``budget``
    seconds."""
    from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

    from scopecheck.run.example_db import ENV_VAR, LOCAL_ENV_VAR

    spec = BUGGY if kind == "find" else TWIN
    record = directory / "examples"
    record.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, LOCAL_ENV_VAR)}
    base.pop("SCOPECHECK_PROFILE", None)
    watched: list[ExampleDatabase] = []
    envs = []
    for index in range(config.workers):
        home = directory / f"worker-{index}"
        if redis_url is not None:
            envs.append({**base, ENV_VAR: redis_url, LOCAL_ENV_VAR: str(home / "local")})
        else:
            envs.append({**base, ENV_VAR: str(home / "db")})
            watched.append(DirectoryBasedExampleDatabase(str(home / "db")))
    client = None
    if redis_url is not None:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        client = redis.Redis.from_url(redis_url)
        client.flushall()  # every run starts from an empty database
        watched.append(RedisExampleDatabase(client))
    start_ns = time.monotonic_ns()
    workers = [
        _start_worker(program, directory / f"worker-{index}", spec, record, env)
        for index, env in enumerate(envs)
    ]
    failure_s: float | None = None
    error: str | None = None
    try:
        while True:
            now = (time.monotonic_ns() - start_ns) / 1e9
            if kind == "find" and any(failure_saved(db) for db in watched):
                failure_s = now
                break
            if now >= budget:
                break
            exited = [(i, w.returncode) for i, w in enumerate(workers) if w.poll() is not None]
            if exited:
                index, status = exited[0]
                stderr = _last_line(directory / f"worker-{index}" / "stderr")
                error = f"worker {index} exited with status {status} after {now:.1f} s: {stderr}"
                break
            time.sleep(POLL)
    finally:
        stop_ns = time.monotonic_ns()
        _stop(workers)
        if client is not None:
            client.close()
    records = read_records(record, start_ns, stop_ns)
    stopped_s = (stop_ns - start_ns) / 1e9
    if not records and error is None:
        stderr = _last_line(directory / "worker-0" / "stderr")
        error = f"no example ran in {stopped_s:.1f} s: {stderr}"
    to_failure = None
    if failure_s is not None:
        to_failure = len({digest for at, digest in records if at <= failure_s})
    return Run(
        kind=kind,
        stopped_s=round(stopped_s, 3),
        first_example_s=round(records[0][0], 3) if records else None,
        executions=len(records),
        distinct=len({digest for _, digest in records}),
        failure_s=None if failure_s is None else round(failure_s, 3),
        examples_to_failure=to_failure,
        error=error,
    )


def bench_fleet(
    runs: int,
    budget: float = BUDGET,
    *,
    databases: Sequence[str] = DATABASES,
    workers: Sequence[int] = WORKERS,
) -> dict[str, Any]:
    """Distinct examples/s, start-up and time to first failure of every configuration
    (``databases`` × ``workers``), medians of ``runs``, and their ratios (module docstring)."""
    from scopecheck.bench.common import environment
    from scopecheck.run.validate import scratch_directory

    configurations = [Configuration(database, count) for database in databases for count in workers]
    skipped: dict[Configuration, Skipped] = {}
    found: dict[Configuration, list[tuple[Run, Run]]] = {c: [] for c in configurations}
    load_before = os.getloadavg()
    program = _hypofuzz_cli()
    with scratch_directory() as scratch, contextlib.ExitStack() as stack:
        redis_url: str | Skipped | None = None
        if "redis" in databases and not isinstance(program, Skipped):
            (Path(scratch) / "redis").mkdir()
            redis_url = stack.enter_context(redis_server(Path(scratch) / "redis"))
        for config in configurations:
            if isinstance(program, Skipped):
                skipped[config] = program
            elif config.database == "redis" and isinstance(redis_url, Skipped):
                skipped[config] = redis_url
        for repetition in range(runs):
            for config in configurations:
                if config in skipped or isinstance(program, Skipped):
                    continue
                url = redis_url if config.database == "redis" else None
                assert not isinstance(url, Skipped)
                pair = []
                for kind in ("find", "rate"):
                    where = Path(scratch) / f"{repetition}" / config.label.replace(", ", "-") / kind
                    pair.append(run_once(program, config, kind, where, budget, url))
                found[config].append((pair[0], pair[1]))
    rows = {
        config.label: summarise(config, found[config], skipped.get(config), budget)
        for config in configurations
    }
    return {
        "benchmark": "fleet",
        "environment": environment(),
        "load_average": {
            "start": [round(v, 2) for v in load_before],
            "end": [round(v, 2) for v in os.getloadavg()],
        },
        "runs": runs,
        "budget_s": budget,
        "poll_s": POLL,
        "backend": BUGGY,
        "rate_backend": TWIN,
        "configurations": rows,
        "two_workers_over_one": {
            database: _ratios(rows, Configuration(database, 2), Configuration(database, 1))
            for database in databases
            if set(workers) >= {1, 2}
        },
        "redis_over_directory": {
            workers_label(count): _ratios(
                rows, Configuration("redis", count), Configuration("directory", count)
            )
            for count in workers
            if set(databases) >= {"redis", "directory"}
        },
    }


def summarise(
    config: Configuration, runs: list[tuple[Run, Run]], skipped: Skipped | None, budget: float
) -> dict[str, Any]:
    """One configuration's figures: each a number, or ``{"skipped": why}`` /
    ``{"not_found": why}``; then every run."""
    row: dict[str, Any] = {"database": config.database, "workers": config.workers}
    if skipped is not None:
        return {
            **row,
            "skipped": skipped.reason,
            **{f: {"skipped": skipped.reason} for f in FIGURES},
        }
    finds = [find for find, _ in runs if find.error is None]
    rates = [rate.distinct_per_s for _, rate in runs if rate.distinct_per_s is not None]
    startups = [
        run.first_example_s
        for pair in runs
        for run in pair
        if run.error is None and run.first_example_s is not None
    ]
    errors = sorted({run.error for pair in runs for run in pair if run.error is not None})
    row["distinct_examples_per_s"] = (
        round(statistics.median(rates), 1) if rates else _every_run_failed(errors)
    )
    row["time_to_first_failure_s"] = (
        censored_median([f.failure_s for f in finds], budget)
        if finds
        else _every_run_failed(errors)
    )
    row["startup_s"] = (
        round(statistics.median(startups), 2) if startups else _every_run_failed(errors)
    )
    row["found"] = f"{sum(f.failure_s is not None for f in finds)} of {len(finds)}"
    if errors:
        row["errors"] = errors
    row["all_runs"] = [
        {"find": attrs.asdict(find), "rate": attrs.asdict(rate)} for find, rate in runs
    ]
    for each, (_, rate) in zip(row["all_runs"], runs, strict=True):
        per_s = rate.distinct_per_s
        each["rate"]["distinct_per_s"] = None if per_s is None else round(per_s, 1)
    return row


def _every_run_failed(errors: list[str]) -> dict[str, str]:
    return {"skipped": "every run failed: " + "; ".join(errors)}


def censored_median(times: list[float | None], budget: float) -> float | dict[str, str]:
    """The median time, a run without a failure (``None``) counting as later than any: a time
    when the middle run(s) found the bug, else ``{"not_found": why}``."""
    ordered = sorted(times, key=lambda t: float("inf") if t is None else t)
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    known = [t for t in middle if t is not None]
    if len(known) < len(middle):
        missed = sum(t is None for t in times)
        return {
            "not_found": f"the bug was not found within {budget:g} s in {missed} of "
            f"{len(times)} run{'s' * (len(times) != 1)}"
        }
    return round(statistics.mean(known), 2)


def _ratios(
    rows: dict[str, Any], top: Configuration, bottom: Configuration
) -> dict[str, float | dict[str, str]]:
    """``top``'s figures ÷ ``bottom``'s: a number, or ``{"skipped": why}`` when either side
    has none."""
    found: dict[str, float | dict[str, str]] = {}
    for figure in FIGURES[:2]:
        sides = [(config.label, rows[config.label][figure]) for config in (top, bottom)]
        missing = [
            f"{label}: {next(iter(value.values()))}"
            for label, value in sides
            if not isinstance(value, (int, float))
        ]
        if missing:
            found[figure] = {"skipped": "; ".join(missing)}
        elif sides[1][1] == 0:
            found[figure] = {"skipped": f"{bottom.label}: 0"}
        else:
            found[figure] = round(sides[0][1] / sides[1][1], 3)
    return found


def render(console: Any, result: dict[str, Any]) -> None:
    """One row per configuration (medians, then each run), then the ratios."""
    from rich.table import Table

    def shown(value: Any, digits: int = 1) -> str:
        if isinstance(value, (int, float)):
            return f"{value:,.{digits}f}"
        return next(iter(value.values())) if isinstance(value, dict) else "-"

    budget = result["budget_s"]
    table = Table(
        title=f"HypoFuzz fleet: {result['backend']} (time to first failure) and "
        f"{result['rate_backend']} (examples/s), {budget:g} s a run, median of {result['runs']}",
        caption=f"load average {result['load_average']['start']} at the start, "
        f"{result['load_average']['end']} at the end",
    )
    for column in (
        "configuration", "distinct examples/s", "each run", "start-up s",
        "first failure s", "each run", "found",
    ):  # fmt: skip
        table.add_column(column)
    for label, row in result["configurations"].items():
        if "skipped" in row:
            table.add_row(label, f"skipped: {row['skipped']}", "", "", "", "", "")
            continue
        rates = [each["rate"]["distinct_per_s"] for each in row["all_runs"]]
        failures = [each["find"]["failure_s"] for each in row["all_runs"]]
        table.add_row(
            label,
            shown(row["distinct_examples_per_s"]),
            ", ".join("-" if r is None else f"{r:,.1f}" for r in rates),
            shown(row["startup_s"], 2),
            shown(row["time_to_first_failure_s"], 2),
            ", ".join(f"none in {budget:g} s" if f is None else f"{f:.2f}" for f in failures),
            row["found"],
        )
    console.print(table)
    for label, row in result["configurations"].items():
        for error in row.get("errors", []):
            console.print(f"[red]{label}[/]: {error}")
    ratios = Table(title="ratios of the medians")
    for column in ("", "distinct examples/s", "time to first failure"):
        ratios.add_column(column)
    for database, pair in result["two_workers_over_one"].items():
        ratios.add_row(
            f"2 workers ÷ 1 worker, {database}",
            shown(pair["distinct_examples_per_s"], 2),
            shown(pair["time_to_first_failure_s"], 2),
        )
    for workers, pair in result["redis_over_directory"].items():
        ratios.add_row(
            f"redis ÷ directory, {workers}",
            shown(pair["distinct_examples_per_s"], 2),
            shown(pair["time_to_first_failure_s"], 2),
        )
    console.print(ratios)
