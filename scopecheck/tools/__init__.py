"""The project's own tooling beside the checks: the spec rules and their coverage (``rules``,
with the collection plugin ``rules_plugin``), the read-only inspectors of session files on disk
(``inspect_jsonl``, ``inspect_legacy``), CrossHair over the pure functions' contracts
(``crosshair_check``), and the mutation-score tree and statistics (``mutation_tree``,
``mutation_stats``, each runnable with ``python -m``).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
