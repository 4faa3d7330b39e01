"""Adapters over real embedded stores, each in its default settings and, where the store has
one, its durable setting:

    scopecheck validate scopecheck.examples.stores.lmdb_store:make_backend

Every adapter keeps one Session per store (a file or a directory under ``root``) and writes one
record per commit; the Session semantics over those records are shared (``sessions.py``).  What
each store and setting does under crashes is in docs/findings.md.
"""
