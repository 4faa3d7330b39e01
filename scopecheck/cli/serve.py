"""``scopecheck serve``: a Python factory behind the process protocol on stdin/stdout."""

from __future__ import annotations

import click


@click.command()
@click.argument("factory")
def serve(factory: str) -> None:
    """Run FACTORY (PATH_OR_MODULE:make_backend) behind the process protocol on stdin/stdout.

    The child a process backend runs as: `scopecheck validate --exec 'scopecheck serve
    my_backend.py:make_backend'` checks the factory in a separate process, with real
    restarts.  See docs/protocol.md."""
    from scopecheck.backends.factory import load_factory
    from scopecheck.process.server import main as serve_main

    serve_main(factory, load_factory)
