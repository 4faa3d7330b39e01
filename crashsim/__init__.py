"""Crash simulation: trace-and-replay on pyfakefs for JSONL, a recording VFS for SQLite.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
