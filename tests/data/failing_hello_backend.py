"""A backend whose first hello over a root holding ``poison`` fails after it wrote a file there
(a store cleaning up a half-made one and giving up); every later hello succeeds.  Each process
notes its pid in ``<root>/pids``."""

from __future__ import annotations

import os
from typing import Any

from scopecheck import StorageIOError
from scopecheck.examples.good_backend import DictRepository


def make_backend(clock: Any, *, root: str) -> DictRepository:
    with open(os.path.join(root, "pids"), "a") as pids:
        pids.write(f"{os.getpid()}\n")
    poison = os.path.join(root, "poison")
    if os.path.exists(poison):
        os.unlink(poison)
        with open(os.path.join(root, "scratch"), "wb") as scratch:
            scratch.write(b"\0" * 20000)
        raise StorageIOError("io_error", "cannot open the store")
    return DictRepository(clock)
