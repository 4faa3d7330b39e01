"""The stateful machines that drive the reference model and a backend side by side: the
storage machine (``storage``), its fork extension (``fork``), the agent-lane lifecycle machine
(``lifecycle``), the strategies they draw from, the filesystem hygiene checks they run on a
world with a root, the SQLite fork read spy, and how a failed run reports its distinct failures.

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
