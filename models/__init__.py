"""The contract's vocabulary and the reference model: scopes, addresses, writes, records, errors,
the protocols, and the pure model every backend is compared with (``reference``, ``fork_model``,
``legacy``, ``lifecycle``).

Internal: the project's own layout, which may change in any release; import from
``scopecheck`` (docs/api.md, "What is public").
"""
