"""A factory that raises: ``scopecheck validate`` must report it in one line."""


def make_backend(clock):  # type: ignore[no-untyped-def]
    raise RuntimeError("cannot connect to the storage service")
