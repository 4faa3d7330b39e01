"""Where a machine's backend comes from: the registry of bundled backends and their worlds
(``registry``), a user's ``PATH_OR_MODULE:FACTORY`` and the worlds it runs in (``adapters``,
``factory``), the one lookup of a backend by the name a user or a reproducer gives
(``resolve``), and the crash explorers a backend can carry (``crash_explorers``).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
