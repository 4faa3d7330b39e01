"""The runs behind the commands: time-boxed fuzzing (``fuzz``, spread over pytest-xdist
workers by ``parallel`` and ``fuzz_items``, and the HypoFuzz targets in ``fuzz_targets``),
``scopecheck validate`` and its verdict (``validate``, with the pytest plugin its child run
loads, ``report_plugin``), ``scopecheck crash`` (``crash``), the replay of a saved failure
(``replay``) and the Hypothesis settings profiles every run picks from (``profiles``).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
