"""Static scope typing (000 §2.4, 002 §6), checked by mypy in tests/test_typing.py.

Every line marked ``# type: ignore[...]`` MUST be a type error: mypy runs with
``warn_unused_ignores``, so if the enforcement is ever weakened the ignore becomes unused and the
check fails.  Every unmarked line must type-check.  Never imported at run time.
"""

from collections.abc import Sequence
from typing import Any

from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.protocols import Storage
from scopecheck.models.scope import EphemeralScope, Scope, SessionScope, ephemeral_scope
from scopecheck.models.writes import (
    Write,
    append_list,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)


def cases(storage: Storage) -> None:
    op = ephemeral_scope("op")
    lane: ValueAddress[int, SessionScope] = value("pi.lane.state", "main")
    output: ValueAddress[str, EphemeralScope] = value("pi.pending.tool_output", "x", op)
    frames: ListAddress[str, EphemeralScope] = value_list("frames", "r", op)

    # Session addresses default to SessionScope; ephemeral overloads keep EphemeralScope.
    default_scoped: ValueAddress[Any, SessionScope] = value("ns", "k")
    ephemeral_scoped: ValueAddress[Any, EphemeralScope] = value("ns", "k", op)
    wrong_default: ValueAddress[Any, EphemeralScope] = value("ns", "k")  # type: ignore[assignment]

    # Addresses are covariant in scope: readers accept any scope.
    any_scope: ValueAddress[int, Scope] = lane
    storage.get_value(lane)
    storage.get_value(output)
    storage.read_list(frames)

    # ...and invariant in the element type.
    widened: ValueAddress[object, SessionScope] = lane  # type: ignore[assignment]
    set_value(lane, "not an int")  # type: ignore[misc]

    # Same-scope session transactions type-check, with retirements, entries and usage.
    storage.commit([set_value(lane, 1), set_value(value("a"), 2)])
    storage.commit([set_value(lane, 1), retire_scope(op)])
    storage.commit(
        [insert_entry("e", None, "message"), insert_usage("u", usage_value()), retire_scope(op)]
    )

    # Same-scope ephemeral transactions type-check.
    storage.commit([set_value(output, "o"), append_list(frames, "f")])

    # Mixing a session write with an ephemeral write is a type error.
    storage.commit([set_value(lane, 1), set_value(output, "o")])  # type: ignore[arg-type]
    storage.commit([set_value(output, "o"), retire_scope(op)])  # type: ignore[arg-type]
    storage.commit([insert_entry("e", None, "m"), append_list(frames, "f")])  # type: ignore[arg-type]

    # Writes are invariant in scope: an ephemeral write is not a session write.
    session_writes: Sequence[Write[SessionScope]] = [set_value(output, "o")]  # type: ignore[arg-type]

    # Two ephemeral IDs share one static type: this type-checks (TX-3 catches it at run time).
    other = ephemeral_scope("other")
    storage.commit([set_value(output, "o"), set_value(value("n", "k", other), 1)])
    del default_scoped, ephemeral_scoped, wrong_default, any_scope, widened, session_writes
