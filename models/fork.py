"""Fork options: the Python spelling of 001 §1.1 ``ForkOptions``.

``BranchFork`` and ``TreeFork`` are the two arms of the union; there is no default scope and no
implicit ``main`` (FORK-1): a caller must name the scope by choosing the class, and a branch fork
must name its branch.  Options are validated when built, so a bad option is rejected before any
repository is touched and can never leave a destination artefact or a reserved id behind.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, TypeAlias

import attrs

from scopecheck.models.errors import usage

Position: TypeAlias = Literal["before", "at"]


def _name(what: str, *, optional: bool) -> Any:
    # A partial, not a closure, so the check runs (and can be mutation-tested) at validation time.
    return functools.partial(_check_name, what, optional)


def _check_name(
    what: str, optional: bool, _: object, __: attrs.Attribute[Any], name: object
) -> None:
    if name is None and optional:
        return
    if not isinstance(name, str) or not name or "\x00" in name:
        raise usage(
            "invalid_fork_options",
            f"fork {what} must be a non-empty str without NUL (got {name!r}) (FORK-1)",
            field=what,
            value=repr(name),
        )


def _position(_: object, __: attrs.Attribute[Any], position: object) -> None:
    if position not in ("before", "at"):
        raise usage(
            "invalid_fork_options",
            f"fork position must be 'before' or 'at' (got {position!r}) (FORK-1)",
            field="position",
            value=repr(position),
        )


@attrs.frozen
class BranchFork:
    """Fork one named, fully configured branch (001 §1.1 branch scope).

    ``entry_id`` (default: the branch tip) must lie on the branch's tip ancestry; ``position``
    ``"before"`` selects the target's parent and may yield a ``None`` destination tip.
    ``id`` is the destination id (default: a fresh id chosen by the repository).
    """

    branch: str = attrs.field(validator=_name("branch", optional=False))
    entry_id: str | None = attrs.field(default=None, validator=_name("entry_id", optional=True))
    position: Position = attrs.field(default="at", validator=_position)
    id: str | None = attrs.field(default=None, validator=_name("id", optional=True))

    @property
    def scope(self) -> Literal["branch"]:
        return "branch"


@attrs.frozen
class TreeFork:
    """Fork the whole immutable tree plus current application state (001 §1.1 tree scope)."""

    id: str | None = attrs.field(default=None, validator=_name("id", optional=True))

    @property
    def scope(self) -> Literal["tree"]:
        return "tree"


ForkOptions: TypeAlias = BranchFork | TreeFork


def check_fork_options(options: object) -> ForkOptions:
    """The options themselves, or ``invalid_fork_options``: a dict, ``None`` or any other
    object is refused — there is no default scope (FORK-1)."""
    if not isinstance(options, (BranchFork, TreeFork)):
        raise usage(
            "invalid_fork_options",
            f"fork options must be BranchFork(...) or TreeFork(...), got {options!r}; "
            "there is no default scope (FORK-1)",
        )
    return options
