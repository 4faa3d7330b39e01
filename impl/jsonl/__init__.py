"""The JSONL backend: format-4 main log plus per-scope sidecars (000 §6, REFERENCE §1)."""

from scopecheck.impl.jsonl.storage import JsonlRepository, JsonlStorage

__all__ = ["JsonlRepository", "JsonlStorage"]
