"""Files no reopen reads (CRASH-SYS-19): a store's own log for people -- RocksDB's and
LevelDB's ``LOG`` and ``LOG.old.*`` -- takes unsynced writes at every step, and torn at every
cut its writes crowd out the tears of the files recovery does read: four of five RocksDB
images were torn info logs.  What such a file holds cannot change what a reopen reads, so it is
torn once per crash point, its size kept in play.

A reopen's reads are known by name, from traced reopens of the round's own images; a store
names its files by number (``000008.log``, ``MANIFEST-000005``, ``LOG.old.1796490840960113``),
so a file counts as read when any file of its *shape* -- its base name with each run of digits
as ``#`` -- was read: an earlier ``MANIFEST-000001`` is read when ``MANIFEST-000005`` was, and a
folder renamed into place reads as its files do.  That errs towards tearing more."""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

_DIGITS = re.compile(r"\d+")


def shape(path: str) -> str:
    """The base name of ``path`` with each run of digits as ``#``."""
    return _DIGITS.sub("#", path.rsplit("/", 1)[-1])


@attrs.frozen
class Unread:
    """Called with a path: whether no traced reopen read a file of its shape."""

    read: frozenset[str]

    @classmethod
    def of(cls, paths: Iterable[str]) -> Unread:
        """From the paths the traced reopens opened for reading."""
        return cls(frozenset(shape(path) for path in paths))

    def __call__(self, path: str) -> bool:
        return shape(path) not in self.read
