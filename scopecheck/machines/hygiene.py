"""What a file backend may leave under its root (HYGIENE-1..4): the machines' filesystem checks.

Any world with a ``root`` directory (the bundled JSONL and SQLite worlds, a third-party factory
taking ``root``, a backend process) is checked; a world without one has nothing to check.

* A file is left over when an operation created it and nothing will remove or use it: judged
  by what the store does, not by the file's name (HYGIENE-4).  A temp-named file (a name
  ending in ``.tmp``, holding ``.tmp.`` or starting with ``.tmp``) is a candidate; which
  operation made it decides (:class:`Leftovers`).  One that appears while a store is opened --
  ``create``, ``open``, a fork making its destination, the factory's call at a restart -- is
  that store's companion (ZODB's ``Data.fs.tmp`` beside ``Data.fs``: opened at start-up, used
  by every commit, kept for the storage's life).  It is left over when a later opening of the
  same Session makes another beside it instead of reusing it (such files pile up), or when it
  survives its Session's ``delete()`` (HYGIENE-2 says so when its path names the Session).
* One that appears during any other operation -- a commit, a read, a close, a refused call --
  and is still there when the operation has returned is left over (HYGIENE-1): an atomic
  publish renames or removes its temp file before it acknowledges.
* Files the adapter declares its store's own (``own_files`` on the repository: glob patterns
  relative to the root, :func:`declared`) are never leftovers.
* A Session's paths are the ones its ``create()`` added under the root whose name holds the
  Session id (verbatim or percent-encoded, so a shared container or index created on the way is
  never mistaken for the Session); after ``delete()`` none of them remains, nor anything whose
  name extends one of them by ``.``, ``-`` or ``/`` (sidecar folders, journals) (HYGIENE-2).
* A fork adds nothing but its destination: every path it adds names the destination's id or
  holds such a path; a fork that fails adds nothing at all (HYGIENE-3).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any, TypeVar

from scopecheck.machines.failures import MismatchError
from scopecheck.models.fork import ForkOptions
from scopecheck.models.protocols import Repository, Storage
from scopecheck.models.scope import encode_uri_component

T = TypeVar("T")


def disk_root(world: object) -> str | None:
    """The real directory a world keeps its files in (``disk_root``), or ``None``: a Memory
    world, or one on a fake filesystem, has nothing on disk to check."""
    root = getattr(world, "disk_root", None)
    return root if isinstance(root, str) and os.path.isdir(root) else None


def tree(root: str) -> frozenset[str]:
    """Every file and directory under ``root``, as paths relative to it."""
    found: set[str] = set()
    for directory, dirs, files in os.walk(root):
        relative = os.path.relpath(directory, root)
        for name in (*dirs, *files):
            found.add(name if relative == "." else os.path.join(relative, name))
    return frozenset(found)


def is_temp(path: str) -> bool:
    """Whether ``path`` is named like a temp file: a candidate leftover (HYGIENE-4)."""
    name = os.path.basename(path)
    return name.endswith(".tmp") or ".tmp." in name or name.startswith(".tmp")


def temp_files(paths: frozenset[str], own: Sequence[str] = ()) -> list[str]:
    """The temp-named files among ``paths``, but those ``own`` declares (:func:`declared`)."""
    return sorted(p for p in paths if is_temp(p) and not declared(p, own))


def own_files(world: object) -> tuple[str, ...]:
    """The files a world's adapter declares its store's own (``own_files``; none by default)."""
    return tuple(getattr(world, "own_files", ()))


def declared(path: str, own: Sequence[str]) -> bool:
    """Whether ``path`` (relative to the root) matches one of the glob patterns ``own``, each
    matched from the right as :meth:`pathlib.PurePath.match` does: ``Data.fs.tmp`` is that name
    in any folder, ``*.zodb/Data.fs.tmp`` that name in a folder ending in ``.zodb``; ``*``
    never crosses a ``/`` (HYGIENE-4)."""
    return any(PurePosixPath(path).match(pattern) for pattern in own)


#: Who opened a store: a Session's id, or ``None`` for the repository itself (the factory).
Opener = str | None


class Leftovers:
    """The temp-named files of one world's root, each with the operation that made it, so a
    leftover is judged by what the store does (HYGIENE-1, HYGIENE-4).  ``companions`` maps a
    file that appeared while a store was opened to who opened it; every other temp-named
    file present after an operation was made by one that is not an opening.  What an opening
    or a delete suggests is judged after the step (:meth:`findings`), once every operation of
    the step has returned: a file a commit racing the opening made and removed is no finding."""

    def __init__(self, root: str, own: Sequence[str] = ()) -> None:
        self.root = root
        self.own = tuple(own)
        # What the factory's first call made is the repository's own.
        self.companions: dict[str, Opener] = dict.fromkeys(self.temps(), None)
        #: Openings that made files beside earlier ones of the same store: (opener, made,
        #: earlier); and Sessions deleted with companions left: (id, paths).
        self._piles: list[tuple[Opener, tuple[str, ...], tuple[str, ...]]] = []
        self._survivors: list[tuple[str, tuple[str, ...]]] = []

    def temps(self) -> frozenset[str]:
        """The temp-named files under the root now, but the declared ones."""
        return frozenset(temp_files(tree(self.root), self.own))

    def opening(self, call: Callable[[], T], who: Callable[[T], Opener]) -> T:
        """Run ``call``, which opens the store of ``who(result)``, and make what it made that
        store's companions, noting any it made beside earlier ones of that store (they pile
        up, HYGIENE-4).  A call that raises opened nothing: what it left is judged as any
        operation's (HYGIENE-1)."""
        before = self.temps()
        result = call()
        opener = who(result)
        now = self.temps()
        made = tuple(sorted(now - before))
        self._forget_gone(now)
        mine = (p for p, by in self.companions.items() if by == opener and p in before)
        earlier = tuple(sorted(mine))
        self.companions.update(dict.fromkeys(made, opener))
        if made and earlier:
            self._piles.append((opener, made, earlier))
        return result

    def deleted(self, session_id: str) -> None:
        """After ``delete(session_id)`` returned: note the companions of its store that survive
        it and do not name it (those that do are HYGIENE-2's); from now on they are the
        repository's, so each is said once (HYGIENE-4)."""
        now = self.temps()
        kept = sorted(p for p, by in self.companions.items() if by == session_id and p in now)
        for path in kept:
            self.companions[path] = None
        survivors = tuple(p for p in kept if not names_id(p, session_id))
        if survivors:
            self._survivors.append((session_id, survivors))

    def findings(self) -> list[MismatchError]:
        """What is left over now, after a step: temp files no opening made (HYGIENE-1), then
        files an opening made beside earlier ones and those that survived their Session's
        delete, if still there (HYGIENE-4).  Each a check of the disk: the state can still be
        compared after it."""
        now = self.temps()
        self._forget_gone(now)
        found = []
        left = sorted(now - self.companions.keys())
        if left:
            found.append(
                MismatchError(
                    f"temp files left under {self.root} after an acknowledged operation "
                    f"(HYGIENE-1): {left}",
                    rules=("HYGIENE-1",),
                    check="temp files left after an acknowledged operation",
                    diverged=False,
                )
            )
        for opener, made, earlier in self._piles:
            if any(p in now for p in made) and any(p in now for p in earlier):
                store = "the repository" if opener is None else f"Session {opener!r}"
                found.append(
                    MismatchError(
                        f"opening {store} again made {list(made)} under {self.root} beside "
                        f"{list(earlier)}, which an earlier opening made and nothing removed or "
                        "used since: such files pile up (HYGIENE-4)",
                        rules=("HYGIENE-4",),
                        check="temp files made at every opening pile up",
                        diverged=False,
                    )
                )
        for session_id, paths in self._survivors:
            if any(p in now for p in paths):
                found.append(
                    MismatchError(
                        f"repository.delete({session_id!r}) left {list(paths)} under "
                        f"{self.root}, made when the Session's store was opened: nothing will "
                        "remove or use them (HYGIENE-4)",
                        rules=("HYGIENE-4",),
                        check="a store's temp files survive its delete",
                        diverged=False,
                    )
                )
        self._piles.clear()
        self._survivors.clear()
        return found

    def _forget_gone(self, now: frozenset[str]) -> None:
        for path in [p for p in self.companions if p not in now]:
            del self.companions[path]


class WatchedRepository:
    """A repository whose openings -- ``create``, ``open``, ``fork`` -- and deletes tell
    ``leftovers`` what they made and what they left.  Every other attribute is the
    repository's own."""

    def __init__(self, inner: Any, leftovers: Leftovers) -> None:
        self.inner = inner
        self.leftovers = leftovers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, session_id: str) -> Storage:
        handle: Storage = self.leftovers.opening(
            lambda: self.inner.create(session_id), lambda _: session_id
        )
        return handle

    def open(self, session_id: str) -> Storage:
        handle: Storage = self.leftovers.opening(
            lambda: self.inner.open(session_id), lambda _: session_id
        )
        return handle

    def fork(self, source_id: str, options: ForkOptions) -> str:
        """A fork makes its destination's store: what it made is the destination's."""
        return self.leftovers.opening(lambda: str(self.inner.fork(source_id, options)), str)

    def list(self) -> list[str]:
        return list(self.inner.list())

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)
        self.leftovers.deleted(session_id)

    def close(self) -> None:
        self.inner.close()


def watched(repo: Repository, leftovers: Leftovers | None) -> Repository:
    """``repo`` watched by ``leftovers`` (:class:`WatchedRepository`), or as it is when its world
    has no root."""
    if leftovers is None:
        return repo
    return WatchedRepository(repo, leftovers)


def id_forms(session_id: str) -> tuple[str, ...]:
    """The spellings of an id a backend may put in a file name."""
    quoted = urllib.parse.quote(session_id, safe="")
    return tuple({session_id, quoted, encode_uri_component(session_id)})


def names_id(path: str, session_id: str) -> bool:
    """Whether some component of ``path`` holds the id (sidecars sit in a folder naming it)."""
    return any(form in path for form in id_forms(session_id))


def session_paths(before: frozenset[str], after: frozenset[str], session_id: str) -> set[str]:
    """The paths ``create(session_id)`` added that name it (HYGIENE-2)."""
    return {p for p in after - before if names_id(p, session_id)}


def leftovers(paths: set[str], now: frozenset[str]) -> list[str]:
    """What remains of a deleted Session whose paths were ``paths`` (HYGIENE-2)."""
    return sorted(
        p for p in now if any(p == s or p.startswith((s + ".", s + "-", s + "/")) for s in paths)
    )


def strays(before: frozenset[str], after: frozenset[str], dest_id: str) -> list[str]:
    """Paths a fork added that do not name its destination (HYGIENE-3)."""
    added = after - before
    return sorted(p for p in added if not names_id(p, dest_id) and not holds(p, added, dest_id))


def holds(path: str, added: frozenset[str], dest_id: str) -> bool:
    """A directory the fork made to hold the destination's files (a new cwd folder)."""
    return any(other.startswith(path + "/") and names_id(other, dest_id) for other in added)
