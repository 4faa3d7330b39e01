"""Workloads for the JSONL crash simulator: named, generated, or loaded from a JSON file.

A workload is a list of *steps* run against one Session ``"s"`` of a JSONL repository:

* ``{"op": "create"}`` — create the Session (every workload starts with it);
* ``{"op": "commit", "writes": [...]}`` — one transaction (writes in the JSON form below);
* ``{"op": "reopen"}`` — close the handle and open the Session again (runs the open stages);
* ``{"op": "delete"}`` — close the handle and delete the Session (000 §6.5).

Writes in JSON (the file format of ``scopecheck crash --workload FILE``)::

    {"set": [scope, namespace, key, value]}      {"delete": [scope, namespace, key]}
    {"append": [scope, namespace, key, element, tag]}   {"drop": [scope, namespace, key]}
    {"entry": [id, parent_id, type, payload]}     {"usage": [id, usage, entry_id]}
    {"retire": scope_id}

``scope`` is ``null`` for the Session scope or an ephemeral scope ID.  A file holds either one
workload ``{"name": ..., "steps": [...]}`` or ``{"workloads": [...]}``.

The bundled workloads cover each crash bullet of 000 §2.3 and §9.3 (see :data:`BUNDLED`); the
``mixed-*`` ones are seeded random workloads from
:func:`scopecheck.crashsim.workload.make_workload`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson

from scopecheck.crashsim.workload import make_workload
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import UsageError
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import (
    AnyWrite,
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

STEP_OPS = ("create", "commit", "reopen", "delete")


@attrs.frozen
class Step:
    op: str
    writes: tuple[AnyWrite, ...] = ()


@attrs.frozen
class Workload:
    name: str
    steps: tuple[Step, ...]
    description: str = ""

    @property
    def commits(self) -> int:
        return sum(1 for s in self.steps if s.op == "commit")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "steps": [step_to_json(s) for s in self.steps],
        }


# -- JSON codec ----------------------------------------------------------------------------


def _scope(scope_id: str | None) -> Any:
    return None if scope_id is None else ephemeral_scope(scope_id)


def write_to_json(write: AnyWrite) -> dict[str, Any]:
    if isinstance(write, SetValue):
        a = write.address
        return {"set": [a.scope_id, a.namespace, a.key, orjson.loads(write.value_json)]}
    if isinstance(write, DeleteValue):
        a = write.address
        return {"delete": [a.scope_id, a.namespace, a.key]}
    if isinstance(write, AppendList):
        la = write.address
        return {
            "append": [
                la.scope_id,
                la.namespace,
                la.key,
                orjson.loads(write.element_json),
                write.tag,
            ]
        }
    if isinstance(write, DeleteList):
        la = write.address
        return {"drop": [la.scope_id, la.namespace, la.key]}
    if isinstance(write, InsertEntry):
        return {"entry": [write.id, write.parent_id, write.type, orjson.loads(write.payload_json)]}
    if isinstance(write, InsertUsage):
        return {"usage": [write.id, orjson.loads(write.usage_json), write.entry_id]}
    if isinstance(write, RetireScope):
        return {"retire": write.retired.id}
    raise TypeError(f"not a write: {write!r}")  # pragma: no cover


def write_from_json(data: Any) -> AnyWrite:
    """Inverse of :func:`write_to_json`; raises ``UsageError(invalid_payload)`` on bad input."""
    try:
        ((kind, args),) = data.items()
        if kind == "set":
            scope, ns, key, val = args
            return set_value(_addr(value, ns, key, scope), val)
        if kind == "delete":
            scope, ns, key = args
            return delete_value(_addr(value, ns, key, scope))
        if kind == "append":
            scope, ns, key, element, *tag = args
            return append_list(_addr(value_list, ns, key, scope), element, tag[0] if tag else None)
        if kind == "drop":
            scope, ns, key = args
            return delete_list(_addr(value_list, ns, key, scope))
        if kind == "entry":
            ident, parent, typ, payload = args
            return insert_entry(ident, parent, typ, payload)
        if kind == "usage":
            ident, use, *entry = args
            return insert_usage(ident, use, entry_id=entry[0] if entry else None)
        if kind == "retire":
            return retire_scope(ephemeral_scope(args))
    except UsageError:
        raise
    except (AttributeError, TypeError, ValueError) as exc:
        raise UsageError("invalid_payload", f"bad write {data!r}: {exc}") from None
    raise UsageError("invalid_payload", f"unknown write kind in {data!r}")


def _addr(make: Callable[..., Any], ns: str, key: str, scope: str | None) -> Any:
    return make(ns, key) if scope is None else make(ns, key, _scope(scope))


def step_to_json(step: Step) -> dict[str, Any]:
    if step.op == "commit":
        return {"op": "commit", "writes": [write_to_json(w) for w in step.writes]}
    return {"op": step.op}


def step_from_json(data: Any) -> Step:
    if not isinstance(data, dict) or data.get("op") not in STEP_OPS:
        raise UsageError("invalid_payload", f"bad step {data!r}; op is one of {STEP_OPS}")
    if data["op"] == "commit":
        writes = data.get("writes")
        if not isinstance(writes, list) or not writes:
            raise UsageError(
                "invalid_payload", f"commit step needs a non-empty writes list: {data!r}"
            )
        return Step("commit", tuple(write_from_json(w) for w in writes))
    return Step(data["op"])


def workload_from_json(data: Any) -> Workload:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise UsageError("invalid_payload", 'a workload is {"name": ..., "steps": [...]}')
    steps = tuple(step_from_json(s) for s in data["steps"])
    if not steps or steps[0].op != "create":
        steps = (Step("create"), *steps)
    return Workload(str(data.get("name", "file")), steps, str(data.get("description", "")))


def load_workloads(path: str) -> list[Workload]:
    """Workloads from a JSON file (one workload, or ``{"workloads": [...]}``)."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise UsageError("not_found", f"no workload file at {path}") from None
    except (orjson.JSONDecodeError, IsADirectoryError, PermissionError) as exc:
        raise UsageError("invalid_payload", f"{path} is not a JSON workload file: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("workloads"), list):
        return [workload_from_json(w) for w in data["workloads"]]
    return [workload_from_json(data)]


# -- bundled ---------------------------------------------------------------------------------


def _commits(*transactions: tuple[AnyWrite, ...] | list[AnyWrite]) -> list[Step]:
    return [Step("commit", tuple(t)) for t in transactions]


A = ephemeral_scope("op-A")
B = ephemeral_scope("op/B")


def _w(name: str, description: str, steps: list[Step]) -> Workload:
    return Workload(name, (Step("create"), *steps), description)


def _retire_before() -> Workload:
    return _w(
        "crash-before-retirement",
        "000 §2.3: a crash before the retirement commits leaves the scope live",
        _commits(
            [set_value(value("pi.op.state", "k", A), {"step": 1})],
            [append_list(value_list("frames", "r", A), "f1", tag="t")],
            [insert_entry("e1", None, "message", {"text": "hi"})],
            [retire_scope(A), set_value(value("pi.result", "A"), "ok")],
        ),
    )


def _retire_then_unlink() -> Workload:
    return _w(
        "crash-after-retire-before-unlink",
        "000 §2.3/§6.2: a crash between the durable retire record and the sidecar unlink "
        "leaves the scope logically absent; reopen retries the unlink",
        _commits(
            [set_value(value("memo", "m", A), 1), append_list(value_list("f", "k", A), "x")],
            [set_value(value("memo", "m", B), 2)],
            [retire_scope(A), retire_scope(B), insert_entry("e1", None, "message", {})],
            [set_value(value("app", "after"), True)],
        ),
    )


def _torn_sidecar() -> Workload:
    long_text = "x" * 300
    return _w(
        "torn-sidecar-final-transaction",
        "000 §6.3/§9.3: a torn final sidecar transaction is discarded wholly and repaired",
        [
            *_commits(
                [append_list(value_list("frames", "r", A), long_text)],
                [
                    append_list(value_list("frames", "r", A), "two"),
                    set_value(value("memo", "m", A), {"big": long_text}),
                ],
            ),
            Step("reopen"),
            *_commits([append_list(value_list("frames", "r", A), "three")]),
        ],
    )


def _reused_lifetime() -> Workload:
    return _w(
        "crash-during-reused-lifetime",
        "000 §2.3: records after the latest retirement reopen normally; earlier ones never",
        [
            *_commits(
                [set_value(value("s", "k", A), "life-1")],
                [retire_scope(A)],
                [set_value(value("s", "k", A), "life-2"), append_list(value_list("l", "k", A), 1)],
                [retire_scope(A), set_value(value("app", "x"), 1)],
                [append_list(value_list("l", "k", A), "life-3")],
            ),
            Step("reopen"),
            *_commits([set_value(value("s", "k", A), "life-3b")]),
        ],
    )


def _first_sidecar() -> Workload:
    return _w(
        "crash-during-first-sidecar-creation",
        "000 §6.1/§6.3: the first scoped write creates .scopes and the sidecar via temp + "
        "rename; a temp file never becomes a sidecar",
        _commits(
            [insert_entry("e1", None, "message", {"text": "start"})],
            [set_value(value("pi.op.state", "k", A), {"phase": "run"})],
            [set_value(value("pi.op.state", "k", B), {"phase": "run"})],
        ),
    )


def _torn_tail_repair() -> Workload:
    return _w(
        "crash-during-torn-tail-repair",
        "REFERENCE §1/JSONL-18: crash states with torn tails are reopened, and the repair "
        "(republish of the complete prefix) is itself crashed at every step",
        [
            *_commits(
                [insert_entry("e1", None, "message", {"text": "a" * 120})],
                [append_list(value_list("f", "k", A), "b" * 120)],
                [insert_usage("u1", usage_value(input=1, cost_total=0.5), entry_id="e1")],
            ),
            Step("reopen"),
            *_commits([set_value(value("app", "k"), "after")]),
        ],
    )


def _repository_delete() -> Workload:
    return _w(
        "crash-during-repository-delete",
        "000 §6.5: a crash while deleting removes the Session or leaves it intact; a later "
        "create never sees old sidecars",
        [
            *_commits(
                [set_value(value("memo", "m", A), 1)],
                [set_value(value("memo", "m", B), 2)],
                [insert_entry("e1", None, "message", {})],
            ),
            Step("delete"),
            Step("create"),
            *_commits([set_value(value("memo", "m", A), "new")]),
        ],
    )


def _process_mix() -> Workload:
    """The workload of the real-directory process-crash sweep (tests/jsonl/test_crash_sweep.py),
    which imports it from here."""
    return _w(
        "process-crash-mix",
        "entries, usage, two scopes with retirement and reuse, double retirement",
        _commits(
            [
                insert_entry("e1", None, "message", {"text": "hi"}),
                set_value(value("pi.op.state", "A"), 1),
            ],
            [append_list(value_list("frames", "r1", A), "f1", tag="t")],
            [set_value(value("tool", "out", B), {"partial": 1})],
            [append_list(value_list("frames", "r1", A), "f2"), set_value(value("memo", "m", A), 2)],
            [insert_usage("u1", usage_value(input=3, cost_total=0.1), entry_id="e1")],
            [
                retire_scope(A),
                set_value(value("pi.op.state", "A"), None),
                insert_entry("e2", "e1", "t"),
            ],
            [append_list(value_list("frames", "r2", A), "new lifetime")],
            [delete_value(value("tool", "out", B))],
            [retire_scope(B), retire_scope(A)],
            [set_value(value("tool", "out", B), "again")],
        ),
    )


def generated(seed: int, transactions: int, reopen_every: int = 0) -> Workload:
    """A seeded random workload (``scopecheck.crashsim.workload.make_workload``) as crash steps."""
    steps: list[Step] = [Step("create")]
    for index, tx in enumerate(make_workload(seed, transactions, big_every=0)):
        steps.append(Step("commit", tx))
        if reopen_every and index % reopen_every == reopen_every - 1:
            steps.append(Step("reopen"))
    return Workload(
        f"mixed-{transactions}-seed{seed}",
        tuple(steps),
        f"make_workload({seed}, {transactions}) with a reopen every {reopen_every or 'never'}",
    )


BUNDLED: dict[str, Callable[[], Workload]] = {
    "crash-before-retirement": _retire_before,
    "crash-after-retire-before-unlink": _retire_then_unlink,
    "torn-sidecar-final-transaction": _torn_sidecar,
    "crash-during-reused-lifetime": _reused_lifetime,
    "crash-during-first-sidecar-creation": _first_sidecar,
    "crash-during-torn-tail-repair": _torn_tail_repair,
    "crash-during-repository-delete": _repository_delete,
    "process-crash-mix": _process_mix,
    "mixed-50-seed1": lambda: generated(1, 50, reopen_every=17),
    "mixed-50-seed2": lambda: generated(2, 50),
    "mixed-80-seed3": lambda: generated(3, 80, reopen_every=30),
}
"""Every bundled workload by name; ``scopecheck crash`` with no ``--workload`` runs them all."""

#: The small named workloads (the crash bullets), cheap enough for the default test run.
NAMED = [name for name in BUNDLED if not name.startswith("mixed-")]


def resolve(name_or_file: str) -> list[Workload]:
    """A bundled workload by name, ``mixed-N-seedS`` for any N and S, or a JSON file."""
    if name_or_file in BUNDLED:
        return [BUNDLED[name_or_file]()]
    if name_or_file.startswith("mixed-") and "-seed" in name_or_file:
        try:
            count, seed = name_or_file[len("mixed-") :].split("-seed")
            return [generated(int(seed), int(count))]
        except ValueError:
            pass
    if Path(name_or_file).exists() or name_or_file.endswith(".json"):
        return load_workloads(name_or_file)
    raise UsageError(
        "not_found",
        f"unknown workload {name_or_file!r}; bundled: {', '.join(BUNDLED)} (or a JSON file)",
    )
