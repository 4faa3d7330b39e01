"""The backends under test: Memory, JSONL and SQLite.  They import the contract vocabulary from
``models`` but never the reference model (``scopecheck.models.reference``) — see
``tests/test_layering.py``."""
