"""Where a repository keeps its Sessions' main logs (JSONL-1, JSONL-26).

Three layouts, one question each answers -- where is Session *id*, where does a new one go, and
which Sessions are there:

* :class:`FlatLayout`, scopecheck's own: ``<root>/<encodeURIComponent(id)>.jsonl``; the name is
  the id, so nothing is read to find a Session.
* :class:`UpstreamLayout`, the upstream TypeScript repository's:
  ``<root>/--<cwd>--/<createdAt>_<encodeURIComponent(id)>.jsonl``, where ``<cwd>`` is the
  working directory without its leading separator and with ``/``, ``\\`` and ``:`` replaced by
  ``-``, and ``<createdAt>`` the ISO time with ``:`` and ``.`` replaced by ``-``.  The directory
  name is lossy (``/a/b`` and ``/a-b`` share it) and the file name carries a time, so a
  Session is found by the id *in its header*, and only a header whose ``cwd`` is this
  repository's counts -- the re-check upstream makes.
* :class:`FileLayout`: one session file named by its path, whatever its name; its id is the
  header's.

Every layout keeps a Session's sidecars in ``<main>.scopes/`` (:mod:`.session_paths`), so nothing
else in the backend depends on which one is in use.
"""

from __future__ import annotations

import datetime
import posixpath
from typing import Any, Protocol

import orjson

from scopecheck.impl.fs import FileSystem
from scopecheck.impl.jsonl import session_paths
from scopecheck.models.errors import CorruptError, StorageIOError, usage
from scopecheck.models.scope import encode_uri_component


class Layout(Protocol):
    """How a :class:`~scopecheck.impl.jsonl.JsonlRepository` maps Session ids to main logs."""

    def find(self, fs: FileSystem, session_id: str) -> str | None:
        """The main log of the existing Session ``session_id``, or ``None``."""
        ...

    def place(self, session_id: str, created_at: int) -> str:
        """Where a new Session's main log goes (the caller checked that none exists)."""
        ...

    def session_ids(self, fs: FileSystem) -> list[str]:
        """The ids of the Sessions there, sorted."""
        ...


def header_fields(fs: FileSystem, path: str) -> dict[str, Any] | None:
    """The decoded first line of ``path`` when it is a complete JSON object (a format-4 header
    or a legacy one: both carry ``id`` and ``cwd``), else ``None``.  Never raises for a file
    that is not a Session; a file that cannot be read is not one here either."""
    try:
        lines = fs.iter_prefix_lines(path, fs.file_size(path))
        try:
            first = next(iter(lines), None)
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        if first is None or not first[1]:
            return None  # empty, or a torn header: open reports it
        obj = orjson.loads(first[0])
    except (StorageIOError, orjson.JSONDecodeError):
        return None
    return obj if type(obj) is dict else None


def header_session_id(fs: FileSystem, path: str) -> str:
    """The Session id ``path``'s header names (``not_found`` if it names none)."""
    fields = header_fields(fs, path)
    session_id = None if fields is None else fields.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise usage("not_found", f"{path} does not start with a session header naming its id")
    return session_id


class FlatLayout:
    """``<root>/<encoded id>.jsonl`` (JSONL-1)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find(self, fs: FileSystem, session_id: str) -> str | None:
        path = session_paths.main_path(self.root, session_id)
        return path if fs.exists(path) else None

    def place(self, session_id: str, created_at: int) -> str:
        return session_paths.main_path(self.root, session_id)

    def session_ids(self, fs: FileSystem) -> list[str]:
        found = []
        for entry in fs.list_dir(self.root):
            if entry.is_file:
                session_id = session_paths.decode_main_name(entry.name)
                if session_id is not None:
                    found.append(session_id)
        return sorted(found)


def cwd_directory_name(cwd: str) -> str:
    """Upstream's directory for ``cwd``: ``--home-user-project--`` for ``/home/user/project``."""
    stripped = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    return "--" + stripped.replace("/", "-").replace("\\", "-").replace(":", "-") + "--"


def iso_file_time(created_at: int) -> str:
    """``new Date(createdAt).toISOString()`` with ``:`` and ``.`` replaced by ``-``."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    moment = epoch + datetime.timedelta(milliseconds=created_at)
    return moment.strftime("%Y-%m-%dT%H-%M-%S-") + f"{moment.microsecond // 1000:03d}Z"


class UpstreamLayout:
    """``<root>/--<cwd>--/<createdAt>_<encoded id>.jsonl``, found by header (JSONL-26)."""

    def __init__(self, root: str, cwd: str) -> None:
        self.cwd = cwd
        self.directory = session_paths.child_path(root, cwd_directory_name(cwd))

    def _sessions(self, fs: FileSystem) -> dict[str, list[str]]:
        """Header id → main logs in the cwd directory: a regular ``*.jsonl`` file whose name
        ends in ``_<encoded header id>.jsonl`` and whose header's ``cwd`` is ours."""
        if not fs.is_dir(self.directory):
            return {}
        found: dict[str, list[str]] = {}
        for entry in fs.list_dir(self.directory):
            if not entry.is_file or not entry.name.endswith(session_paths.MAIN_SUFFIX):
                continue
            path = posixpath.join(self.directory, entry.name)
            fields = header_fields(fs, path)
            if fields is None or fields.get("cwd") != self.cwd:
                continue  # another cwd sharing the lossy directory name, or no Session
            session_id = fields.get("id")
            if not isinstance(session_id, str) or not session_id:
                continue
            try:
                suffix = "_" + encode_uri_component(session_id) + session_paths.MAIN_SUFFIX
            except UnicodeEncodeError:
                continue
            if entry.name.endswith(suffix):
                found.setdefault(session_id, []).append(path)
        return found

    def find(self, fs: FileSystem, session_id: str) -> str | None:
        paths = self._sessions(fs).get(session_id, [])
        if len(paths) > 1:
            raise CorruptError(
                "corrupt",
                f"{len(paths)} session files in {self.directory} hold session "
                f"{session_id!r}: {', '.join(sorted(posixpath.basename(p) for p in paths))}",
                file=sorted(paths)[0],
            )
        return paths[0] if paths else None

    def place(self, session_id: str, created_at: int) -> str:
        name = f"{iso_file_time(created_at)}_{session_paths.encode_session_id(session_id)}"
        return session_paths.child_path(self.directory, name + session_paths.MAIN_SUFFIX)

    def session_ids(self, fs: FileSystem) -> list[str]:
        return sorted(self._sessions(fs))


class FileLayout:
    """One session file named by its path; the Session's id is the one in its header."""

    def __init__(self, path: str, session_id: str) -> None:
        self.path = path
        self.session_id = session_id

    def find(self, fs: FileSystem, session_id: str) -> str | None:
        return self.path if session_id == self.session_id and fs.exists(self.path) else None

    def place(self, session_id: str, created_at: int) -> str:
        raise usage(
            "invalid_session_id",
            f"this repository is the one session file {self.path}: create Sessions in a "
            "repository over a directory",
        )

    def session_ids(self, fs: FileSystem) -> list[str]:
        return [self.session_id] if fs.exists(self.path) else []
