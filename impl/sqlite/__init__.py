"""The SQLite backend on APSW: both layouts share one schema (000 §8, spec/rules/sqlite.toml).

``SqliteRepository(root)`` keeps one database file per Session; ``SqliteContainerRepository(path)``
keeps many Sessions in one file.  Both hand out :class:`SqliteStorage`.
"""

from scopecheck.impl.sqlite.repository import (
    SqliteContainerRepository,
    SqliteRepository,
    decode_file_stem,
    encode_session_id,
)
from scopecheck.impl.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION, STORAGE_VERSION
from scopecheck.impl.sqlite.storage import SqliteStorage

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "STORAGE_VERSION",
    "SqliteContainerRepository",
    "SqliteRepository",
    "SqliteStorage",
    "decode_file_stem",
    "encode_session_id",
]
