"""The fork conformance cases' world: one source Session on a backend, mirrored in the model.

Every successful fork is compared with the reference model (:mod:`scopecheck.models.fork_model`
through :class:`~scopecheck.models.reference.ReferenceRepository`), and every refusal with the
model's error code, leaving no destination behind.  A backend's storage handles expose
``parent_session_id`` (FORK-11).
"""

from __future__ import annotations

from typing import Any

import pytest

from scopecheck.backends.registry import BUNDLED, Backend, World
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    append_list,
    delete_list,
    insert_entry,
    insert_usage,
    set_value,
    usage_value,
)

IDLE: dict[str, Any] = {"currentOperationId": None, "lastOperationId": None, "inbox": []}
BUSY: dict[str, Any] = {
    "currentOperationId": "op1",
    "lastOperationId": None,
    "inbox": [{"entryId": "e3", "kind": "x"}],
}


class Env:
    """A backend world and the model, driven together (``backend``: a bundled name or a
    :class:`~scopecheck.backends.registry.Backend`)."""

    def __init__(self, backend: str | Backend) -> None:
        chosen = BUNDLED[backend] if isinstance(backend, str) else backend
        self.backend = chosen.name
        self.now = 1_750_000_000_000
        self.world: World = chosen.new_world(self.clock)
        self.repo: Any = self.world.repository()
        self.model = ReferenceRepository()
        self.source = self.repo.create("src")
        self.msource = self.model.create("src")

    def clock(self) -> int:
        return self.now

    def commit(self, *writes: AnyWrite) -> list[int]:
        self.now += 1
        got = self.source.commit(list(writes))
        want = self.msource.commit(list(writes), self.now)
        assert [c.seq for c in got] == [c.seq for c in want]
        return [c.seq for c in got]

    def fork(self, options: ForkOptions) -> Any:
        """Fork on both; on success compare the destination with the model and return the
        backend's open destination handle."""
        try:
            dest = self.repo.fork("src", options)
        except ScopecheckError as exc:
            with pytest.raises(ScopecheckError) as want:
                self.model.fork("src", options, options.id or "x")
            assert want.value.code == exc.code, (exc, want.value)
            raise
        self.model.fork("src", options, dest)
        handle = self.repo.open(dest)
        expected = self.model.open(dest).snapshot()
        assert handle.snapshot() == expected
        assert getattr(handle, "parent_session_id", None) == "src", "FORK-11: parentSessionId"
        return handle

    def codes(self, options: ForkOptions) -> str:
        """Fork must fail: no artefact appears and a fresh destination id stays free."""
        before = self.repo.list()
        fresh = options.id is not None and options.id not in before
        with pytest.raises(ScopecheckError) as info:
            self.fork(options)
        assert self.repo.list() == before  # no destination artefact
        if fresh and options.id is not None:  # the id was not reserved
            self.repo.create(options.id).close()
            self.repo.delete(options.id)
        return info.value.code

    def close(self) -> None:
        self.world.cleanup()


def rich_source(env: Env) -> dict[str, int]:
    """The shared conformance source of 001 §5 "Backend equivalence": entries (with an
    unreachable root), two lanes (one configured, one data-only), labels, app scalars and
    lists with deletes, open-operation state with pending/frame/checkpoint, usage rows, and
    ephemeral state.  Returns seqs of interesting rows."""
    seqs: dict[str, int] = {}
    env.commit(
        insert_entry("e1", None, "message", {"text": "root"}),
        insert_entry("e2", "e1", "message", {"text": "two"}),
        insert_entry("e3", "e2", "custom", {"x": 1}),
    )
    env.commit(insert_entry("e4", "e1", "message"), insert_entry("e5", None, "message"))
    (seqs["tip"], seqs["config"], seqs["state"]) = env.commit(
        set_value(value("pi.branch.tip", "main"), "e3"),
        set_value(value("pi.lane.config", "main"), {"model": "m"}),
        set_value(value("pi.lane.state", "main"), BUSY),
    )
    (seqs["side"],) = env.commit(set_value(value("pi.branch.tip", "side"), "e4"))
    env.commit(
        set_value(value("pi.session.name"), "named"),
        set_value(value("pi.entry.label", "e2"), "L2"),
        set_value(value("pi.entry.label", "e4"), "L4"),
        set_value(value("pi.entry.label", "e5"), "L5"),
    )
    env.commit(
        set_value(value("pi.result", "op1"), {"ok": 1}),
        set_value(value("pi.op.meta", "op1"), {}),
        set_value(value("pi.op.state", "op1"), {}),
        set_value(value("pi.pending.entry", "e9"), {}),
        set_value(value("pi.pending.tool_output", "op1:t1"), {}),
        append_list(value_list("pi.pending.assistant_frame", "op1:r1"), {"d": 1}),
    )
    env.commit(insert_usage("u1", usage_value(input=5, output=7), "e1"))
    (seqs["app1"],) = env.commit(set_value(value("my-app.state"), "v1"))
    env.commit(
        append_list(value_list("my-app.log"), "a"), append_list(value_list("my-app.log"), "b", "t")
    )
    env.commit(delete_list(value_list("my-app.log")))
    (seqs["log"],) = env.commit(append_list(value_list("my-app.log"), "c"))
    op = ephemeral_scope("op1")
    env.commit(
        set_value(value("my-app.eph", "", op), 1), append_list(value_list("pi.future", "", op), 1)
    )
    return seqs
