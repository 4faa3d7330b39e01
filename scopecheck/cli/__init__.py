"""The ``scopecheck`` command line: one module per command, the group and entry point in
``main`` (``scopecheck.cli:main`` is the console script).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from scopecheck.cli.main import cli, main

__all__ = ["cli", "main"]
