"""Test-wide setup: the Hypothesis profile comes from $SCOPECHECK_PROFILE (default ``dev``),
and tests marked ``long`` run only with ``SCOPECHECK_LONG=1``.

The default run stays near ten minutes on two cores by keeping one case of each kind of the
long parametrised catalogues (:func:`one_of_each`); ``SCOPECHECK_LONG=1 python -m pytest -n 2``
runs every planted bug and every variant."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from typing import Any

import pytest

from scopecheck.run.profiles import load_profile

load_profile()

#: Whether the long tests run too.
LONG = os.environ.get("SCOPECHECK_LONG") == "1"


def one_of_each(
    items: Iterable[Any],
    kind: Callable[[Any], object],
    name: Callable[[Any], str],
    slow: Collection[str] = (),
) -> list[Any]:
    """``items`` as pytest parameters named by ``name``: the first of each ``kind`` in the
    default run, every other one marked ``long`` -- and so is an item named in ``slow`` (the
    measured slowest).  A slow item still stands for its kind: when it comes first, none of
    that kind is in the default run, so name in ``slow`` only kinds whose rule has other
    tests there."""
    seen: set[object] = set()
    params = []
    for item in items:
        key = kind(item)
        marks = (pytest.mark.long,) if key in seen or name(item) in slow else ()
        seen.add(key)
        params.append(pytest.param(item, id=name(item), marks=marks))
    return params


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if LONG:
        return
    skip = pytest.mark.skip(reason="long run only: set SCOPECHECK_LONG=1")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)
