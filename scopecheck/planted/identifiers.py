"""Planted bugs that only ids related on purpose can show: a lossy encoding that makes two
scope ids one, and a cleanup that retires a scope's prefix siblings with it (ADDR-1, RETIRE-2,
SCOPE-4).  Both are caught by the machine's ``related_scopes`` rule; with the ids of the rest
of the machine (``op1``, ``op2``, ``../ü``) neither can be seen.

Each wraps a real backend at a public seam -- the Session a repository hands out, or the
:class:`~scopecheck.impl.fs.FileSystem` a JSONL repository is given -- and the backend itself
is unchanged.
"""

from __future__ import annotations

import posixpath
import unicodedata
import urllib.parse
from collections.abc import Sequence
from typing import Any

import attrs

from scopecheck.impl.fs import ForwardingFileSystem
from scopecheck.models.records import Snapshot
from scopecheck.models.scope import EphemeralScope, ephemeral_scope
from scopecheck.models.writes import RetireScope
from scopecheck.planted import Mutant, register
from scopecheck.planted.seams import WrappedSession, jsonl_over, memory_over


def lossy_key(scope_id: str) -> str:
    """Percent-decoded, then NFC: ``a%2Fb`` and ``a/b``, ``é`` and ``e\u0301`` become one."""
    return unicodedata.normalize("NFC", urllib.parse.unquote(scope_id))


class LossyScopes(WrappedSession):
    """A Session storing every ephemeral scope under :func:`lossy_key` of its id and showing
    the id it was last written under -- one id alone round-trips perfectly."""

    def __init__(self, inner: Any, shared: dict[str, Any]) -> None:
        super().__init__(inner, shared)
        self._names: dict[str, str] = shared.setdefault("names", {})  # stored key -> id

    def _scope(self, scope: Any) -> Any:
        if not isinstance(scope, EphemeralScope):
            return scope
        stored = lossy_key(scope.id)
        self._names[stored] = scope.id
        return ephemeral_scope(stored)

    def _write(self, write: Any) -> Any:
        if isinstance(write, RetireScope):
            return attrs.evolve(write, retired=self._scope(write.retired))
        address = getattr(write, "address", None)
        if address is None:
            return write
        return attrs.evolve(write, address=attrs.evolve(address, scope=self._scope(address.scope)))

    def commit(self, writes: Sequence[Any]) -> Any:
        items = list(writes)
        done = self._inner.commit([self._write(w) for w in items])
        return tuple(attrs.evolve(c, write=w) for c, w in zip(done, items, strict=True))

    def get_value(self, address: Any) -> Any:
        return self._inner.get_value(attrs.evolve(address, scope=self._scope(address.scope)))

    def read_list(self, address: Any, **options: Any) -> Any:
        scoped = attrs.evolve(address, scope=self._scope(address.scope))
        return self._inner.read_list(scoped, **options)

    def scan_values(self, namespace: str, prefix: str = "", scope: Any = None) -> Any:
        return self._inner.scan_values(namespace, prefix, self._scope(scope))

    def snapshot(self) -> Snapshot:
        snap: Snapshot = self._inner.snapshot()

        def shown(rows: Any) -> Any:
            named = [((self._names.get(k[0], k[0]), k[1], k[2]), row) for k, row in rows]
            return tuple(sorted(named, key=lambda item: Snapshot.sort_key(item[0])))

        return attrs.evolve(snap, values=shown(snap.values), lists=shown(snap.lists))


class GlobCleanupFileSystem(ForwardingFileSystem):
    """A filesystem whose unlink of ``scope-<x>.scope`` also unlinks every ``scope-<x>*.scope``
    beside it: a retirement cleanup written as a glob on the encoded id."""

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)
        directory, name = posixpath.split(path)
        if not name.endswith(".scope"):
            return
        stem = name[: -len(".scope")]
        for entry in self.inner.list_dir(directory):
            if entry.name.startswith(stem) and entry.name.endswith(".scope"):
                self.inner.unlink(posixpath.join(directory, entry.name))


register(
    Mutant(
        "memory-lossy-scope-encoding",
        "memory",
        "scope ids stored percent-decoded and NFC-normalised: a/b and a%2Fb are one scope "
        "(ADDR-1, SCOPE-4)",
        lambda: memory_over("lossy-scope-encoding", LossyScopes, "Memory, lossy scope keys"),
    )
)
register(
    Mutant(
        "jsonl-retire-prefix-siblings",
        "jsonl",
        "retirement cleanup unlinks scope-<id>*.scope: retiring op also drops op1's sidecar "
        "(RETIRE-2)",
        lambda: jsonl_over("retire-prefix-siblings", GlobCleanupFileSystem, "JSONL, glob cleanup"),
    )
)
