"""The SQLite backend on APSW: both layouts share one schema (000 §8, spec/rules/sqlite.toml).

``SqliteRepository(root)`` keeps one database file per Session; ``SqliteContainerRepository(path)``
keeps many Sessions in one file.  Both hand out :class:`SqliteStorage`, and both take the
durability settings and the contract's policy points (sequence allocation, retirement, the fork
classifier and stage) as keyword-only constructor arguments.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from scopecheck.impl.sqlite.repository import (
    SqliteContainerRepository,
    SqliteRepository,
    decode_file_stem,
    encode_session_id,
)
from scopecheck.impl.sqlite.retirement import SCOPED_DELETES, Retirement, ScopedDeletes
from scopecheck.impl.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION, STORAGE_VERSION
from scopecheck.impl.sqlite.storage import SqliteStorage

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "SCOPED_DELETES",
    "STORAGE_VERSION",
    "Retirement",
    "ScopedDeletes",
    "SqliteContainerRepository",
    "SqliteRepository",
    "SqliteStorage",
    "decode_file_stem",
    "encode_session_id",
]
