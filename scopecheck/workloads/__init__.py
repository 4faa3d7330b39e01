"""Workload generators: the seeds' measurement workloads as harness transactions.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
