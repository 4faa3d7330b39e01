"""Writes, addresses and scopes print as the call that builds them.

A failing Hypothesis program and ``scopecheck replay`` show writes by their ``repr``; the printed
program is only worth something if pasting it back builds the same writes.  So the property is
``eval(repr(w)) == w`` over every write kind and every optional part (tag, parent, entry id,
adjustment, details, ephemeral scope) -- not the exact spelling, which may change freely.
"""

from __future__ import annotations

from typing import Any

import pytest

from scopecheck.models import addresses, scope, writes
from scopecheck.models.scope import SESSION, ephemeral_scope, scope_from_id, scope_id_of

NAMESPACE: dict[str, Any] = {
    "set_value": writes.set_value,
    "delete_value": writes.delete_value,
    "append_list": writes.append_list,
    "delete_list": writes.delete_list,
    "insert_entry": writes.insert_entry,
    "insert_usage": writes.insert_usage,
    "retire_scope": writes.retire_scope,
    "value": addresses.value,
    "value_list": addresses.value_list,
    "ephemeral_scope": scope.ephemeral_scope,
    "SESSION": SESSION,
}

OP = ephemeral_scope("op/1 ü")
USAGE = writes.usage_value(input=3, output=4, cost_input=0.5, cost_total=1.25)

CASES = [
    SESSION,
    OP,
    addresses.value("ns", "k"),
    addresses.value("ns", "k", OP),
    addresses.value_list("ns", ""),
    addresses.value_list("ns", "k", OP),
    writes.set_value(addresses.value("ns", "k"), {"a": [1, 2.5, None]}),
    writes.set_value(addresses.value("ns", "k", OP), "text"),
    writes.delete_value(addresses.value("ns", "k", OP)),
    writes.append_list(addresses.value_list("ns", "k"), 7),
    writes.append_list(addresses.value_list("ns", "k", OP), {"x": 1}, tag="marker"),
    writes.delete_list(addresses.value_list("ns", "k", OP)),
    writes.insert_entry("e1", None, "message", {"text": "hi"}),
    writes.insert_entry("e2", "e1", "tool", {}),
    writes.insert_usage("u1", USAGE),
    writes.insert_usage("u2", USAGE, entry_id="e1"),
    writes.insert_usage("u3", USAGE, adjustment=True),
    writes.insert_usage("u4", USAGE, details={"model": "m"}),
    writes.insert_usage("u5", USAGE, entry_id="e2", adjustment=True, details=[1, "two"]),
    writes.retire_scope(OP),
]


@pytest.mark.parametrize("obj", CASES, ids=[type(c).__name__ + str(i) for i, c in enumerate(CASES)])
def test_repr_builds_an_equal_object(obj: object) -> None:
    text = repr(obj)
    rebuilt = eval(text, dict(NAMESPACE))
    assert rebuilt == obj, text
    assert repr(rebuilt) == text


@pytest.mark.parametrize("s", [SESSION, OP, ephemeral_scope("a")])
def test_scope_from_id_inverts_scope_id_of(s: scope.Scope) -> None:
    assert scope_from_id(scope_id_of(s)) == s


def test_scope_id_of_session_is_none_and_of_ephemeral_is_its_id() -> None:
    assert scope_id_of(SESSION) is None
    assert scope_id_of(OP) == "op/1 ü"
    assert isinstance(scope_from_id("x"), scope.EphemeralScope)
