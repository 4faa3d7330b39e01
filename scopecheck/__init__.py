"""scopecheck: property-based model checking of scoped session storage.

This module is the public API for a backend author: everything needed to write an adapter and
check it, re-exported from the modules that define it (the reference page is
``docs/api.md``).  Import from here; the submodules are the project's own layout and may move.

>>> from scopecheck import SESSION, ephemeral_scope, value, set_value, retire_scope
>>> op = ephemeral_scope("op-1")
>>> writes = [set_value(value("pi.result", "op-1"), "done"), retire_scope(op)]

The vocabulary (scopes, addresses, writes, records, errors, the protocols and the stateless
validation helpers) imports only attrs and orjson.  The runner, :func:`validate`, brings in
Hypothesis and pytest, so it is loaded on first use.
"""

from __future__ import annotations

import os as _os
import pkgutil as _pkgutil
from typing import TYPE_CHECKING, Any

if not _os.path.isdir(_os.path.join(__path__[0], "models")):
    # A source checkout: this folder holds the product surface alone, and the top-level folders
    # (models/, impl/, ...) come in as scopecheck.models, scopecheck.impl, ... through the
    # editable install's tree (docs/contributing.md).  When the checkout itself is on sys.path
    # (``python -m pytest`` run there) this folder is found first; add the installed tree.
    __path__ = _pkgutil.extend_path(__path__, __name__)
del _os, _pkgutil

from scopecheck.backends.factory import (
    BackendFactory,
    DirectoryBackendFactory,
    FactoryKind,
    FileSystemBackendFactory,
    factory_kind,
)
from scopecheck.impl.fs import FileSystem, OsFileSystem
from scopecheck.impl.memory import MemoryRepository
from scopecheck.impl.stats import add_usage, usage_problem
from scopecheck.impl.validation import (
    CheckedTransaction,
    ListQuery,
    check_list_query,
    check_name,
    check_references,
    check_session_id,
    check_shape,
    select_page,
    stop_page,
)
from scopecheck.models.addresses import ListAddress, ValueAddress, value, value_list
from scopecheck.models.errors import (
    CODES,
    ClosedError,
    CorruptError,
    ScopecheckError,
    StorageIOError,
    UsageError,
    usage,
)
from scopecheck.models.fork import BranchFork, ForkOptions, TreeFork, check_fork_options
from scopecheck.models.payload import decode_json, encode_json
from scopecheck.models.protocols import Clock, Repository, Storage
from scopecheck.models.records import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    Committed,
    EntryRecord,
    ListElement,
    Order,
    Snapshot,
    Stats,
    UsageRecord,
    UsageTotals,
    ValueRecord,
)
from scopecheck.models.scope import (
    MAX_ENCODED_SCOPE_ID,
    SESSION,
    EphemeralScope,
    Scope,
    SessionScope,
    ephemeral_scope,
)
from scopecheck.models.writes import (
    AppendList,
    DeleteList,
    DeleteValue,
    InsertEntry,
    InsertUsage,
    RetireScope,
    SetValue,
    Write,
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    insert_usage,
    retire_scope,
    set_value,
    usage_value,
)

if TYPE_CHECKING:
    from scopecheck.impl.jsonl import JsonlRepository
    from scopecheck.process.protocol import schema as protocol_schema
    from scopecheck.run.hypofuzz import fuzz_targets_for
    from scopecheck.run.validate import Verdict, validate

__version__ = "0.1.0"

__all__ = [
    "CODES",
    "DEFAULT_LIST_LIMIT",
    "MAX_ENCODED_SCOPE_ID",
    "MAX_LIST_LIMIT",
    "SESSION",
    "AppendList",
    "BackendFactory",
    "BranchFork",
    "CheckedTransaction",
    "Clock",
    "ClosedError",
    "Committed",
    "CorruptError",
    "DeleteList",
    "DeleteValue",
    "DirectoryBackendFactory",
    "EntryRecord",
    "EphemeralScope",
    "FactoryKind",
    "FileSystem",
    "FileSystemBackendFactory",
    "ForkOptions",
    "InsertEntry",
    "InsertUsage",
    "JsonlRepository",
    "ListAddress",
    "ListElement",
    "ListQuery",
    "MemoryRepository",
    "Order",
    "OsFileSystem",
    "Repository",
    "RetireScope",
    "Scope",
    "ScopecheckError",
    "SessionScope",
    "SetValue",
    "Snapshot",
    "Stats",
    "Storage",
    "StorageIOError",
    "TreeFork",
    "UsageError",
    "UsageRecord",
    "UsageTotals",
    "ValueAddress",
    "ValueRecord",
    "Verdict",
    "Write",
    "add_usage",
    "append_list",
    "check_fork_options",
    "check_list_query",
    "check_name",
    "check_references",
    "check_session_id",
    "check_shape",
    "decode_json",
    "delete_list",
    "delete_value",
    "encode_json",
    "ephemeral_scope",
    "factory_kind",
    "fuzz_targets_for",
    "insert_entry",
    "insert_usage",
    "protocol_schema",
    "retire_scope",
    "select_page",
    "set_value",
    "stop_page",
    "usage",
    "usage_problem",
    "usage_value",
    "validate",
    "value",
    "value_list",
]

#: Public names imported on first use, as (module, name there).
_LAZY = {
    "validate": ("scopecheck.run.validate", "validate"),
    "Verdict": ("scopecheck.run.validate", "Verdict"),
    "JsonlRepository": ("scopecheck.impl.jsonl", "JsonlRepository"),
    "protocol_schema": ("scopecheck.process.protocol", "schema"),
    "fuzz_targets_for": ("scopecheck.run.hypofuzz", "fuzz_targets_for"),
}


def __getattr__(name: str) -> Any:
    """The runner, HypoFuzz's targets, the JSONL backend and the protocol schema are imported on
    first use: the runner needs Hypothesis and pytest, and the vocabulary needs none of them."""
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        found = getattr(importlib.import_module(module), attribute)
        globals()[name] = found
        return found
    raise AttributeError(f"module 'scopecheck' has no attribute {name!r}")
