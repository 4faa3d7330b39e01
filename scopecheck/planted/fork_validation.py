"""Planted fork-validation bugs: the checks a fork makes before it copies (FORK-1, REPO-1).

Each bug is planted the same way in Memory, JSONL and SQLite (per-file), from outside: a
subclass of the real repository whose public ``fork`` catches one refusal and does something
plausible instead, or pre-empts a check, then calls the real ``fork``.  The backends themselves
are unchanged, so a bug caught on one backend and missed on another is a blind spot of the
machine, not of the backend.

* ``*-fork-refusal-keeps-destination``: a fork with no destination id mints one and reserves
  it before the checks that read the source; a refusal returns its error but keeps the empty
  Session.  In a per-file world that is a new file the disk diff sees (HYGIENE-3); in Memory
  (or a SQLite container) it is only a registry entry under an id nobody names again, which
  the fork machine sees through ``repository.list()`` after every fork (FORK-1, CHECK-8).
* ``*-fork-data-only-branch-forks-tree``, ``*-fork-accepts-dict-options``,
  ``*-fork-missing-source-empty``, ``*-fork-replaces-closed-destination``: refusals that the
  machine's other steps reach rarely or never and its ``fork_refused`` step makes on purpose (a
  data-only lane, options that are no ``ForkOptions``, a source that does not exist, a closed
  Session under the destination id, CHECK-8).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import attrs

from scopecheck.backends.registry import Backend, JsonlWorld, SqliteWorld, memory_world
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.memory import MemoryRepository, new_fork_id
from scopecheck.impl.sqlite import SqliteRepository
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import BranchFork, TreeFork
from scopecheck.planted import Mutant, register

#: The real ``fork`` of the repository a bug is planted in.
Fork = Callable[[str, Any], str]
#: A planted ``fork``: ``(repository, real fork, source id, options) -> destination id``.
Body = Callable[[Any, Fork, str, Any], str]

#: Refusals that come from reading the source (lane, entry and namespace checks), after the
#: destination id is known (FORK-2, FORK-3, FORK-8).
SOURCE_REFUSALS = frozenset(
    {
        "unknown_branch",
        "data_only_branch",
        "corrupt",
        "unknown_entry",
        "entry_not_on_branch",
        "unknown_namespace",
    }
)


def keeps_refused_destination(repo: Any, real_fork: Fork, source_id: str, options: Any) -> str:
    """A fork without a destination id mints one and reserves it as an empty Session before
    the checks that read the source; when one of them refuses, the error is returned but the
    reservation stays -- the "reserved-but-leaked id" every rejection must release (FORK-1)."""
    if not isinstance(options, (BranchFork, TreeFork)) or options.id is not None:
        return real_fork(source_id, options)
    dest = new_fork_id()
    try:
        return real_fork(source_id, attrs.evolve(options, id=dest))
    except ScopecheckError as exc:
        if exc.code in SOURCE_REFUSALS:
            with contextlib.suppress(ScopecheckError):
                repo.create(dest).close()
        raise


def data_only_as_tree(repo: Any, real_fork: Fork, source_id: str, options: Any) -> str:
    """A branch fork of a data-only branch (a tip without lane config and state) forks the
    whole tree instead -- what the ``data_only_branch`` refusal tells the caller to do, done
    silently -- instead of refusing (FORK-2)."""
    del repo
    try:
        return real_fork(source_id, options)
    except ScopecheckError as exc:
        if exc.code != "data_only_branch":
            raise
        return real_fork(source_id, TreeFork(id=options.id))


def accepts_dict_options(repo: Any, real_fork: Fork, source_id: str, options: Any) -> str:
    """Options are read by their fields, so the TypeScript spelling passes: a dict with
    ``scope: "tree"`` forks the tree (unknown keys such as ``entry_id`` ignored) and one with
    ``scope: "branch"`` but no branch forks ``main`` -- instead of ``invalid_fork_options``: no
    default scope, no implicit main (FORK-1)."""
    del repo
    if isinstance(options, dict):
        if options.get("scope") == "tree":
            options = TreeFork(id=options.get("id"))
        elif options.get("scope") == "branch":
            options = BranchFork(options.get("branch") or "main", id=options.get("id"))
    return real_fork(source_id, options)


def missing_source_empty(repo: Any, real_fork: Fork, source_id: str, options: Any) -> str:
    """A source that does not exist is taken for an empty one: the fork creates its
    destination as a new, empty Session instead of refusing with ``not_found`` (FORK-1)."""
    try:
        return real_fork(source_id, options)
    except ScopecheckError as exc:
        if exc.code != "not_found" or not isinstance(options, (BranchFork, TreeFork)):
            raise
        dest = options.id if options.id is not None else new_fork_id()
        repo.create(dest).close()
        return dest


def replaces_closed_destination(repo: Any, real_fork: Fork, source_id: str, options: Any) -> str:
    """The destination check only asks whether the id is open: a closed Session under the
    destination id is deleted and forked over instead of ``already_exists`` (REPO-1, FORK-1).
    An open one still refuses (its delete is ``already_open``)."""
    try:
        return real_fork(source_id, options)
    except ScopecheckError as exc:
        dest = getattr(options, "id", None)
        if exc.code != "already_exists" or dest is None or dest == source_id:
            raise
        try:
            repo.delete(dest)
        except ScopecheckError:
            raise exc from None
        return real_fork(source_id, options)


def planted(base: type[Any], body: Body) -> type[Any]:
    """``base`` with its public ``fork`` replaced by ``body`` around the real one."""

    def fork(self: Any, source_id: str, options: Any) -> str:
        return body(self, functools.partial(base.fork, self), source_id, options)

    name = "".join(part.title() for part in body.__name__.split("_")) + base.__name__
    return type(name, (base,), {"fork": fork, "__doc__": body.__doc__})


def _memory(body: Body, label: str) -> Backend:
    world = memory_world(planted(MemoryRepository, body))
    return Backend(f"memory[{label}]", world, f"Memory, {label}")


def _jsonl(body: Body, label: str) -> Backend:
    repo = planted(JsonlRepository, body)
    return Backend(
        f"jsonl[{label}]", lambda clock: JsonlWorld(clock, repository_class=repo), f"JSONL, {label}"
    )


def _sqlite(body: Body, label: str) -> Backend:
    repo = planted(SqliteRepository, body)
    return Backend(
        f"sqlite[{label}]",
        lambda clock: SqliteWorld(clock, repository_class=repo),
        f"SQLite, {label}",
    )


_BACKENDS: dict[str, Callable[[Body, str], Backend]] = {
    "memory": _memory,
    "jsonl": _jsonl,
    "sqlite": _sqlite,
}

_BUGS: tuple[tuple[str, Body, str], ...] = (
    (
        "refusal-keeps-destination",
        keeps_refused_destination,
        "a fork with no destination id reserves a fresh one before the lane/entry checks and a "
        "refusal keeps the empty Session (FORK-1)",
    ),
    (
        "data-only-branch-forks-tree",
        data_only_as_tree,
        "a branch fork of a data-only branch (tip, no lane config/state) forks the whole tree "
        "instead of data_only_branch (FORK-2)",
    ),
    (
        "accepts-dict-options",
        accepts_dict_options,
        "fork options are read by their fields: a dict spelling forks the tree, or main, instead "
        "of invalid_fork_options (FORK-1)",
    ),
    (
        "missing-source-empty",
        missing_source_empty,
        "a fork of a Session that does not exist creates an empty destination instead of "
        "not_found (FORK-1)",
    ),
    (
        "replaces-closed-destination",
        replaces_closed_destination,
        "a fork onto a closed Session's id deletes it and forks over it instead of "
        "already_exists (REPO-1, FORK-1)",
    ),
)

#: Every planted bug of this module, one per bug and backend.
NAMES: tuple[str, ...] = tuple(f"{b}-fork-{bug}" for bug, _, _ in _BUGS for b in _BACKENDS)

for _bug, _body, _description in _BUGS:
    for _backend, _make in _BACKENDS.items():
        register(
            Mutant(
                f"{_backend}-fork-{_bug}",
                "fork",
                f"[{_backend}] {_description}",
                functools.partial(_make, _body, f"fork-{_bug}"),
                caught_by="fork-machine",
            )
        )
