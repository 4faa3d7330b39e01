"""What a file backend may leave under its root (HYGIENE-1..3): the machines' filesystem checks.

Any world with a ``root`` directory (the bundled JSONL and SQLite worlds, a third-party factory
taking ``root``, a backend process) is checked; a world without one has nothing to check.

* No temp file outlives an acknowledged operation (HYGIENE-1): a name ending in ``.tmp``, or
  holding ``.tmp.`` or starting with ``.tmp``, is a temp file.
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

from scopecheck.models.scope import encode_uri_component


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
    name = os.path.basename(path)
    return name.endswith(".tmp") or ".tmp." in name or name.startswith(".tmp")


def temp_files(paths: frozenset[str]) -> list[str]:
    """The temp files among ``paths`` (HYGIENE-1)."""
    return sorted(p for p in paths if is_temp(p))


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
