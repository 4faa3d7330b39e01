"""The seeds' measurement workload (002 §1), as transactions from the lifecycle model.

"20 operations, each 400 assistant frames plus 2 tools at 60 checkpoints of a 50 KB window":
each operation is accepted, streams one assistant response frame by frame (one append per
frame), settles it, runs its tools side by side — every checkpoint a whole-snapshot replace of
the tool's output window, the window growing by ``growth_bytes`` per checkpoint (002 §9 quotes
2 KB of tool output per checkpoint) up to ``window_bytes`` — stages each tool's outcome as a
tool-result entry, and ends in terminal cleanup.

``scoped=True`` is the Step 1 shape (progress in ``ephemeral_scope(op)``, one retirement per
operation); ``scoped=False`` is the same workload before Step 1: the same addresses in the session
scope, with explicit deletes at settle, outcome and terminal
(:class:`scopecheck.models.lifecycle.Lifecycle`).

Payload text is synthetic by default; ``corpus`` names a pi session file (e.g.
``scopecheck.data.pi_session("large-session")``) whose assistant text and tool results feed
the frames and tool output instead.  Only the sizes matter for ``scopecheck bench size``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.models.lifecycle import Lifecycle, Tx

_FILLER = (
    "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. "
    "Sphinx of black quartz, judge my vow. 0123456789 ~ ls -la src/ && make test\n"
)


@attrs.frozen
class WorkloadParams:
    """Parameters of the seed workload; defaults are 002 §1's figures."""

    ops: int = 20
    frames: int = 400
    tools: int = 2
    checkpoints: int = 60
    window_bytes: int = 50 * 1024
    #: Tool output produced between two checkpoints (002 §9: "2 KB of tool output per checkpoint").
    growth_bytes: int = 2 * 1024
    #: Text per assistant frame: about one token.
    delta_bytes: int = 4
    #: Text kept in each settled tool-result entry (the model-facing summary).
    result_bytes: int = 256
    #: Every n-th checkpoint carries a memo in the same single-scope transaction (002 §3).
    memo_every: int = 10
    lanes: int = 1
    corpus: str | None = None

    def scaled(self, **changes: Any) -> WorkloadParams:
        return attrs.evolve(self, **changes)


SEED = WorkloadParams()
#: A small parameterisation for tests: same shape, a few hundred kilobytes.
SMALL = WorkloadParams(ops=3, frames=40, tools=2, checkpoints=12, window_bytes=8 * 1024)


class TextSource:
    """An endless stream of text cut into pieces of any length."""

    def __init__(self, text: str) -> None:
        self.text = text or _FILLER
        self.pos = 0

    def take(self, count: int) -> str:
        out: list[str] = []
        while count > 0:
            piece = self.text[self.pos : self.pos + count]
            out.append(piece)
            count -= len(piece)
            self.pos = (self.pos + len(piece)) % len(self.text)
        return "".join(out)


def corpus_texts(path: str) -> tuple[str, str]:
    """Assistant text and tool-result text of a pi session file (v1/v3 message lines)."""
    assistant: list[str] = []
    tools: list[str] = []
    for line in Path(path).read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        message = record.get("message") if isinstance(record, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            continue
        target = {"assistant": assistant, "toolResult": tools}.get(message.get("role", ""))
        if target is None:
            continue
        for part in message["content"]:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                target.append(part["text"])
    return "".join(assistant), "\n".join(tools)


def seed_workload(params: WorkloadParams = SEED, *, scoped: bool = True) -> Iterator[Tx]:
    """Yield the workload's transactions in commit order (operations run one after another,
    round-robin over ``params.lanes`` lanes)."""
    prose, output = corpus_texts(params.corpus) if params.corpus else (_FILLER, _FILLER)
    text, tool_text = TextSource(prose), TextSource(output)
    life = Lifecycle([f"lane{i}" for i in range(params.lanes)], scoped=scoped)
    for index in range(params.ops):
        lane = f"lane{index % params.lanes}"
        yield life.start(lane)
        yield life.begin_response(lane)
        for _ in range(params.frames):
            tx = life.deliver(life.frame_job(lane, text.take(params.delta_bytes)))
            assert tx is not None
            yield tx
        yield life.settle_response(lane)
        # The response's tool calls are placed as one batch (one session transaction).
        if params.tools:
            yield life.start_tools(lane, [("bash", ("cursor",))] * params.tools)
        invocations = life.running_tools(lane)
        produced = dict.fromkeys(invocations, "")
        for step in range(1, params.checkpoints + 1):
            total = step * params.growth_bytes
            for invocation in invocations:
                window = produced[invocation] + tool_text.take(params.growth_bytes)
                window = window[-params.window_bytes :]
                produced[invocation] = window
                snapshot = {
                    "text": window,
                    "totalBytes": total,
                    "truncated": total > params.window_bytes,
                }
                memo = ("cursor", {"offset": total}) if step % params.memo_every == 0 else None
                tx = life.deliver(life.checkpoint_job(lane, invocation, snapshot, memo))
                assert tx is not None
                yield tx
        for invocation in invocations:
            yield life.tool_outcome(lane, invocation, produced[invocation][-params.result_bytes :])
        yield life.terminal(lane, "completed")
