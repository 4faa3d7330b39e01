"""The JSONL backend: format-4 main log plus per-scope sidecars (000 §6, REFERENCE §1).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""

from scopecheck.impl.jsonl.storage import JsonlRepository, JsonlStorage

__all__ = ["JsonlRepository", "JsonlStorage"]
