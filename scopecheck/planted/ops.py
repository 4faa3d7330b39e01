"""Planted harness bugs: broken operation lifecycles the lifecycle machine must catch.

Each mutant is a :class:`~scopecheck.models.lifecycle.Lifecycle` subclass overriding one hook, run
by the lifecycle machine on the Memory backend (the storage is correct; the owner is wrong).  They
are the mistakes 000 §2.2, §5 and §9.5 warn about.
"""

from __future__ import annotations

from typing import Any

from scopecheck.backends.registry import MEMORY, Backend
from scopecheck.models.lifecycle import (
    Lifecycle,
    Operation,
    Outcome,
    ProgressJob,
    operation_state,
    pending_assistant_frames,
)
from scopecheck.models.scope import EphemeralScope
from scopecheck.models.writes import AnyWrite, delete_list, retire_scope
from scopecheck.planted import Mutant, register


def _lifecycle_mutant(name: str, description: str) -> Any:
    def decorate(harness: type[Lifecycle]) -> type[Lifecycle]:
        def machine(backend: Backend) -> Any:
            from scopecheck.machines.lifecycle import make_lifecycle_machine

            return make_lifecycle_machine(backend, harness)

        register(Mutant(name, "memory", description, lambda: MEMORY, machine=machine))
        return harness

    return decorate


@_lifecycle_mutant(
    "ops-cancel-without-retirement",
    "the cancelled terminal path deletes op state but never retires the scope (000 §5.2)",
)
class CancelWithoutRetirement(Lifecycle):
    def retirement(self, op: Operation, outcome: Outcome) -> list[AnyWrite]:
        return [] if outcome == "cancelled" else super().retirement(op, outcome)


@_lifecycle_mutant(
    "ops-retire-twice", "terminal cleanup emits the retirement twice (000 §5.2 'exactly one')"
)
class RetireTwice(Lifecycle):
    def retirement(self, op: Operation, outcome: Outcome) -> list[AnyWrite]:
        return [*super().retirement(op, outcome), retire_scope(EphemeralScope(op.id))]


@_lifecycle_mutant(
    "ops-unfenced-late-progress",
    "a progress job queued before terminal commits after the retirement (000 §2.2 fencing)",
)
class UnfencedLateProgress(Lifecycle):
    def admit(self, job: ProgressJob) -> bool:
        return job.op in self.ops


@_lifecycle_mutant(
    "ops-settle-deletes-frames",
    "settlement still deletes the frames in the session transaction (000 §5.2 mixed scope)",
)
class SettleDeletesFrames(Lifecycle):
    def settle_writes(self, op: Operation, response: str) -> list[AnyWrite]:
        return [delete_list(pending_assistant_frames(op.id, response))]


@_lifecycle_mutant(
    "ops-recovery-scans-scope",
    "recovery scans the operation scope for tool output instead of following op state "
    "(000 §5.3 residue)",
)
class RecoveryScansScope(Lifecycle):
    def recover(self, reader: Any) -> dict[str, Any]:
        result = super().recover(reader)
        for op_id, found in result.items():
            rows = reader.scan_values("pi.pending.tool_output", f"{op_id}:", EphemeralScope(op_id))
            for key, record in rows:
                invocation = key.split(":", 1)[1]
                tool = found["tools"].get(invocation)
                if tool is not None:
                    tool["checkpoint"] = record.value
        return result


@_lifecycle_mutant(
    "ops-recovery-reads-residue",
    "recovery falls back to the last settled response's frames when none is streaming "
    "(000 §5.3 residue)",
)
class RecoveryReadsResidue(Lifecycle):
    def recover(self, reader: Any) -> dict[str, Any]:
        result = super().recover(reader)
        for op_id, found in result.items():
            state = reader.get_value(operation_state(op_id))
            count = 0 if state is None else state.value.get("responses", 0)
            if found["response"] is None and count:
                page = reader.read_list(pending_assistant_frames(op_id, f"{op_id}.r{count}"))
                found["frames"] = [element.value for element in page]
        return result
