"""Crash simulation: trace-and-replay on pyfakefs for JSONL, a recording VFS for SQLite."""
