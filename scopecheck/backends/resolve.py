"""A backend by the name a user gives on the command line or in a reproducer.

A name is a bundled backend or one of its extra worlds (:mod:`scopecheck.backends.registry`), a
planted bug of the catalogue (:mod:`scopecheck.planted`), or a user's backend as
``PATH_OR_MODULE:FACTORY`` (:mod:`scopecheck.backends.adapters`). It lives above all three:
they import :class:`~scopecheck.backends.registry.Backend`, this module imports them.
"""

from __future__ import annotations

from scopecheck.backends.adapters import load_backend
from scopecheck.backends.registry import BUNDLED, EXTRA, Backend, is_user_spec
from scopecheck.models.errors import UsageError


def resolve_backend(name: str) -> Backend:
    """A bundled backend, a catalogue mutant by name, or a user backend by
    ``PATH_OR_MODULE:FACTORY``; a ``UsageError`` that says what is wrong otherwise."""
    if name in BUNDLED or name in EXTRA:
        return BUNDLED.get(name) or EXTRA[name]
    if is_user_spec(name):
        return load_backend(name)
    from scopecheck.planted import all_mutants

    for mutant in all_mutants():
        made = mutant.make()
        if name in (mutant.name, made.name):
            return made
    known = ", ".join(sorted(BUNDLED) + sorted(EXTRA))
    raise UsageError("not_found", f"unknown backend {name!r}; bundled backends are: {known}")
