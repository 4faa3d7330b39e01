"""The backends under test: Memory, JSONL and SQLite.  They import the contract vocabulary from
``models`` but never the reference model (``scopecheck.models.reference``) — see
``tests/test_layering.py``.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
