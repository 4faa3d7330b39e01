"""pytest plugin: run the conformance suite and the machine against a third-party backend::

pytest --scopecheck-backend=PATH_OR_MODULE:FACTORY --pyargs scopecheck.conformance

When the factory takes ``fs`` and ``root`` (its file I/O goes through ``impl.fs``),
``scopecheck/conformance/test_crash.py`` also runs the generic crash sweep against it; otherwise
that test is reported *skipped* ("crash exploration: skipped (backend does not take a
FileSystem)"), never passed (CRASH-FS-8).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("scopecheck")
    group.addoption(
        "--scopecheck-backend",
        action="append",
        dest="scopecheck_backend",
        default=[],
        metavar="PATH_OR_MODULE:FACTORY",
        help="Backend factory to check (repeatable); default: the bundled backends.",
    )


def pytest_configure(config: pytest.Config) -> None:
    from scopecheck.profiles import load_profile

    load_profile()
    specs = config.getoption("scopecheck_backend") or []
    if specs:
        from models.errors import ScopecheckError
        from scopecheck.adapters import load_backend

        for spec in specs:
            try:
                load_backend(spec)
            except ScopecheckError as exc:
                raise pytest.UsageError(f"--scopecheck-backend: {exc}") from None
