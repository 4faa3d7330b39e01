"""Data the CLI's workloads and benchmarks read, shipped inside the package (INSTALL-8).

``pi-sessions/`` holds two real transcripts of the pi coding agent (format v1; provenance and
licence in its ``README.md``): the legacy-import world and benchmarks start from them, and the
seeds' workload can take its payload text from them.  Nothing here is written to; copy a file
before changing it.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from __future__ import annotations

from pathlib import Path

#: The directory of the real legacy transcripts.
PI_SESSIONS = Path(__file__).resolve().parent / "pi-sessions"

#: The transcripts by name (file stem).
TRANSCRIPTS = ("large-session", "before-compaction")


def pi_session(name: str) -> Path:
    """The path of transcript ``name`` (one of :data:`TRANSCRIPTS`)."""
    if name not in TRANSCRIPTS:
        raise ValueError(f"no transcript {name!r}; choose one of {', '.join(TRANSCRIPTS)}")
    return PI_SESSIONS / f"{name}.jsonl"
