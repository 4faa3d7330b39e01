"""Benchmarks: commands that print figures from one run, never timed assertions (STYLE)."""
