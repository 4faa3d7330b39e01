"""A factory that returns no repository: ``validate`` refuses it with one line (INSTALL-14)."""

from __future__ import annotations

from typing import Any


def make_backend(clock: Any) -> None:
    """Forgets to return the repository it built."""
    del clock
