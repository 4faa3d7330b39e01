"""The backend process protocol (``protocol``, ``client``, ``server``) and the crash exploration
of a backend process from its system calls (``syscall_crash``).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
