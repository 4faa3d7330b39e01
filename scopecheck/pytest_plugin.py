"""pytest plugin: run the conformance suite and the machine against a third-party backend::

    pytest --scopecheck-backend=PATH_OR_MODULE:FACTORY --pyargs scopecheck.conformance

Installing scopecheck registers this plugin in every pytest run of the venv, so it is inert
unless asked (INSTALL-2): it adds the ``--scopecheck-backend`` option and declares the markers
scopecheck's own tests use (``rule``, ``slow``), so a user's ``--strict-markers`` collects the
conformance suite; it never loads or registers a Hypothesis profile and never touches the
user's settings.  The conformance suite passes scopecheck's profile to the runs it makes
(``$SCOPECHECK_PROFILE``, default ``dev``) instead of changing the default.

When the factory takes ``fs`` and ``root`` (its file I/O goes through ``scopecheck.FileSystem``),
``scopecheck/conformance/test_crash.py`` also runs the generic crash sweep against it; otherwise
that test is reported *skipped* ("crash exploration: skipped (backend does not take a
FileSystem)"), never passed (CRASH-FS-8).
"""

from __future__ import annotations

import pytest

#: The markers scopecheck's suites use; declared so ``--strict-markers`` accepts them.
MARKERS = (
    "rule(*ids): the scopecheck spec rules (spec/rules/*.toml) this test checks",
    "slow: a scopecheck test that runs longer (still part of the default run)",
    "hypofuzz: runs HypoFuzz for a few seconds (needs the hypofuzz extra)",
)


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
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    specs = config.getoption("scopecheck_backend") or []
    if specs:
        from scopecheck.adapters import load_backend
        from scopecheck.models.errors import ScopecheckError

        for spec in specs:
            try:
                load_backend(spec)
            except ScopecheckError as exc:
                raise pytest.UsageError(f"--scopecheck-backend: {exc}") from None
