"""The JSONL forks' scratch index: a private SQLite database that leaves no file behind.

Pass 1 of a JSONL fork (:class:`scopecheck.impl.jsonl.fork.Index`) and the closed-legacy normaliser
(:class:`scopecheck.impl.jsonl.legacy_fork.LegacyCapture`) index the source on disk so that memory
stays bounded whatever its size (FORK-16).  SQLite's anonymous temporary database (an empty file
name) is exactly that: pages beyond the cache spill to a file the unix VFS unlinks as soon as
it is open (other platforms delete it on close), so a process killed mid-fork leaves nothing
in the temp directory (FORK-18), where a named database in a temp directory stayed forever.
Nothing here is durable, so the journal and syncs are off.
"""

from __future__ import annotations

import apsw


def scratch_index(ddl: str) -> apsw.Connection:
    """A new anonymous database holding ``ddl``'s tables, inside an open transaction."""
    conn = apsw.Connection("")
    for pragma in ("journal_mode=OFF", "synchronous=OFF"):
        conn.execute(f"PRAGMA {pragma}").fetchall()
    conn.execute(ddl)
    conn.execute("BEGIN")
    return conn
