"""Operation lifecycles as crash-sweep workloads, and the lifecycle invariants of a recovered
state (OP-19..OP-21; 000 §2.2, §2.3, §5, §9.5; 002 §3, §4, §7).

:func:`lifecycle_program` runs the harness model (:class:`scopecheck.models.lifecycle.Lifecycle`)
through a fixed interleaving of two lanes — acceptance, assistant frames, a tool batch,
whole-snapshot checkpoints with memos in the same transaction, settlement, outcomes, cancellation,
terminal cleanup with retirement, and a later operation on the same lane — and records, after every
prefix of its transactions, what recovery must find.  The crash sweeps commit those
transactions to a backend, crash or cut the power at every I/O step, reopen, and call
:func:`lifecycle_problems` on the survivor:

* **acknowledged prefix** — the reopened state is the model after the acknowledged
  transactions or after those plus the one in flight (the sweep's own snapshot check; a state
  between the two is a partial transaction);
* **recovery** — lane state → op state → derived addresses yields exactly that prefix's
  current frames, checkpoints and memos of every active operation (000 §9.5);
* **retirement** — an operation whose terminal transaction is in the prefix has nothing left
  in its scope, and no operation short of terminal lost its scope (000 §2.3);
* **coordination** — a lane naming a current operation has that operation's state, and an
  operation state exists only for a lane's current operation (002 §3: the pair is written in
  one transaction, so no crash may separate them).

The program is built once per call from the model; expected states come from the reference
model in :mod:`scopecheck.crashsim.workload`, never from a backend.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

import attrs

from scopecheck.models.lifecycle import OP_STATE, Lifecycle, Tx
from scopecheck.models.writes import AnyWrite

Size = Literal["short", "long"]

_CHUNK = "stdout line 0123456789 abcdefghij é€\n"


@attrs.frozen
class LifecycleProgram:
    """A lifecycle's transactions and what recovery must find after each prefix."""

    lanes: tuple[str, ...]
    txs: tuple[Tx, ...]
    #: ``recoveries[n]`` = :meth:`Lifecycle.expected_recovery` after the first ``n`` txs.
    recoveries: tuple[dict[str, Any], ...]
    #: Prefix length from which each operation's start / terminal transaction is committed.
    started_at: dict[str, int]
    terminal_at: dict[str, int]
    #: The harness whose recovery reads the reopened storage (a planted harness bug, or not).
    harness: type[Lifecycle] = Lifecycle

    @property
    def workload(self) -> list[tuple[AnyWrite, ...]]:
        return [tx.writes for tx in self.txs]

    def steps(self) -> list[str]:
        return [f"{tx.step}({tx.op})" for tx in self.txs]


def _window(step: int, big: bool) -> dict[str, Any]:
    """A checkpoint snapshot; ``big`` ones span several 4 KiB database pages."""
    text = _CHUNK * (160 if big else 2) + f"#{step}"
    return {"text": text, "totalBytes": len(text.encode()), "truncated": False}


def lifecycle_program(
    size: Size = "short", harness: type[Lifecycle] = Lifecycle
) -> LifecycleProgram:
    """Two lanes, three operations (five with ``long``, which adds frames, checkpoints, a
    supersession, a safe-replay reset and an unknown-outcome recovery).  ``harness`` plays the
    harness: a subclass planting a harness bug (``scopecheck/planted/ops.py``) shows the
    lifecycle invariants failing."""
    life = harness(["a", "b"])
    long = size == "long"
    ticks = iter(range(1, 10_000))
    steps: list[Callable[[], Tx | None]] = [
        lambda: life.start("a"),
        lambda: life.begin_response("a"),
        lambda: life.deliver(life.frame_job("a", "He")),
        lambda: life.start("b"),
        lambda: life.deliver(life.frame_job("a", "llo")),
        lambda: life.start_tools("b", [("bash", ("cursor",))]),
        lambda: life.deliver(life.checkpoint_job("b", "t1", _window(1, True), ("cursor", 1))),
        lambda: life.settle_response("a"),
        lambda: life.start_tools("a", [("bash", ("cursor",)), ("read", ())]),
        lambda: life.deliver(life.checkpoint_job("a", "t1", _window(2, False), ("cursor", 2))),
        lambda: life.deliver(life.checkpoint_job("a", "t2", _window(3, True))),
        lambda: life.tool_outcome("a", "t1"),
        lambda: life.cancel("b"),
        lambda: life.terminal("b", "completed"),  # → cancelled, retires b's scope
        lambda: life.deliver(life.checkpoint_job("a", "t2", _window(4, False))),
        lambda: life.tool_outcome("a", "t2"),
        lambda: life.terminal("a", "completed"),
        lambda: life.start("a"),
        lambda: life.begin_response("a"),
        lambda: life.deliver(life.frame_job("a", " again")),
    ]
    if long:
        steps += [
            *(lambda: life.deliver(life.frame_job("a", f" {next(ticks)}")) for _ in range(6)),
            lambda: life.supersede_response("a"),
            lambda: life.begin_response("a"),
            lambda: life.deliver(life.frame_job("a", "retry")),
            lambda: life.start("b"),
            lambda: life.start_tools("b", [("bash", ("cursor",))]),
            *(
                lambda: life.deliver(
                    life.checkpoint_job(
                        "b", "t1", _window(next(ticks), True), ("cursor", next(ticks))
                    )
                )
                for _ in range(4)
            ),
            lambda: life.deliver(life.reset_job("b", "t1")),
            lambda: life.deliver(life.checkpoint_job("b", "t1", _window(next(ticks), False))),
            lambda: life.settle_response("a"),
            lambda: life.recover_unknown("b"),
            lambda: life.terminal("b", "completed"),  # → interrupted
            lambda: life.terminal("a", "failed"),
        ]
    txs: list[Tx] = []
    recoveries = [life.expected_recovery()]
    started: dict[str, int] = {}
    terminal: dict[str, int] = {}
    for step in steps:
        tx = step()
        if tx is None:
            raise AssertionError("the lifecycle program's progress job was fenced")
        txs.append(tx)
        recoveries.append(copy.deepcopy(life.expected_recovery()))
        if tx.step == "start":
            started[tx.op] = len(txs)
        elif tx.step.startswith("terminal:"):
            terminal[tx.op] = len(txs)
    return LifecycleProgram(
        tuple(life.lanes), tuple(txs), tuple(recoveries), started, terminal, harness
    )


def brief(recovery: dict[str, Any]) -> str:
    """A recovery result in one short line: frame counts and checkpoint sizes, not texts."""
    parts = []
    for op, found in sorted(recovery.items()):
        tools = ",".join(
            f"{inv}:"
            + ("-" if t["checkpoint"] is None else f"{len(repr(t['checkpoint']))}B")
            + "".join(f"/{n}={m!r}" for n, m in sorted(t["memos"].items()))
            for inv, t in sorted(found["tools"].items())
        )
        parts.append(
            f"{op}(response={found['response']}, frames={len(found['frames'])}, tools=[{tools}])"
        )
    return "{" + "; ".join(parts) + "}"


def scope_rows(snapshot: Any, scope_id: str) -> list[tuple[Any, ...]]:
    """Physical identities of every value and list left in ``scope_id``."""
    return [k for k, _ in snapshot.values if k[0] == scope_id] + [
        k for k, _ in snapshot.lists if k[0] == scope_id
    ]


def lifecycle_problems(program: LifecycleProgram, storage: Any, prefix: int) -> list[str]:
    """The lifecycle invariants of a reopened ``storage`` taken as the state after the first
    ``prefix`` transactions of ``program`` (empty when they all hold)."""
    problems: list[str] = []
    recovered = program.harness(program.lanes).recover(storage)
    if recovered != program.recoveries[prefix]:
        problems.append(
            f"recovery after {prefix} transactions is {brief(recovered)}, "
            f"expected {brief(program.recoveries[prefix])}"
        )
    snapshot = storage.snapshot()
    for op, at in program.terminal_at.items():
        left = scope_rows(snapshot, op)
        if at <= prefix and left:
            problems.append(f"terminal of {op} committed but its scope still holds {left!r}")
    current: dict[str, str] = {}
    for (scope_id, namespace, key), record in snapshot.values:
        if scope_id is None and namespace == "pi.lane.state":
            op = record.value.get("currentOperationId")
            if op is not None:
                current[op] = key
    states = {
        key
        for (scope_id, namespace, key), _ in snapshot.values
        if scope_id is None and namespace == OP_STATE
    }
    for op, lane in sorted(current.items()):
        if op not in states:
            problems.append(f"lane {lane} runs {op} but its operation state is missing")
    for op in sorted(states - set(current)):
        problems.append(f"operation state of {op} present but no lane runs it")
    return problems


def lifecycle_checker(program: LifecycleProgram) -> Callable[[Any, int], list[str]]:
    """``check(storage, prefix)`` for the crash sweeps."""

    def check(storage: Any, prefix: int) -> list[str]:
        return lifecycle_problems(program, storage, prefix)

    return check


# -- the JSONL power-loss sweep of a lifecycle (scopecheck.crashsim.jsonl_sweep)
# ---------------------------


def jsonl_workload(program: LifecycleProgram, *, reopen: bool = True) -> Any:
    """``program`` as a :class:`scopecheck.crashsim.jsonl_workloads.Workload`: create, one commit
    per transaction, and (``reopen``) a close/reopen half-way — a controlled crash that must not
    retire anything (000 §5.3)."""
    from scopecheck.crashsim.jsonl_workloads import Step, Workload

    steps = [Step("create")]
    middle = len(program.txs) // 2
    for index, tx in enumerate(program.txs):
        if reopen and index == middle:
            steps.append(Step("reopen"))
        steps.append(Step("commit", tx.writes))
    return Workload(
        f"lifecycle-{len(program.txs)}",
        tuple(steps),
        "operation lifecycle: two lanes, frames, tool batches, checkpoints with memos, settle, "
        "outcomes, cancellation, terminal retirement, a later operation",
    )


def step_checker(program: LifecycleProgram, workload: Any) -> Callable[[Any, int], list[str]]:
    """``check(storage, steps)``: :func:`lifecycle_problems` with the prefix counted in
    workload steps (create and reopen steps commit nothing)."""
    commits = [0]
    for step in workload.steps:
        commits.append(commits[-1] + (1 if step.op == "commit" else 0))

    def check(storage: Any, steps: int) -> list[str]:
        return lifecycle_problems(program, storage, commits[steps])

    return check


def explore_jsonl_lifecycle(
    size: Size = "short",
    *,
    repo_class: Any = None,
    harness: type[Lifecycle] = Lifecycle,
    **options: Any,
) -> Any:
    """Every crash state of the lifecycle program on JSONL (``mode="unsynced"`` by default:
    process crashes, partial writes and power loss), each recovered state also checked
    against the lifecycle invariants (OP-21).  ``options`` go to
    :func:`scopecheck.crashsim.jsonl_sweep.explore_workload`."""
    from scopecheck.crashsim.jsonl_sweep import explore_workload
    from scopecheck.impl.jsonl import JsonlRepository

    program = lifecycle_program(size, harness)
    workload = jsonl_workload(program)
    options.setdefault("mode", "unsynced")
    return explore_workload(
        workload,
        repo_class=repo_class or JsonlRepository,
        invariants=step_checker(program, workload),
        **options,
    )
