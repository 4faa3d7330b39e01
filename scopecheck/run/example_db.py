"""The example database the profiles use: where failing examples are saved and replayed from.

``$SCOPECHECK_DB`` names it (FLEET-1):

* unset: Hypothesis's directory database at ``.hypothesis/examples``;
* a path: a directory database there;
* ``redis://HOST:PORT/DB`` (or ``rediss://``): a database shared by every worker and machine
  that names the same Redis (Hypothesis's ``RedisExampleDatabase``), **beside** a local
  directory database (``$SCOPECHECK_LOCAL_DB``, default ``.hypothesis/examples``).

A shared database is never the only copy of a finding (FLEET-2): :class:`SharedDatabase` saves
every example locally first and then in Redis, and reads both.  When Redis stops answering in
the middle of a run, the first failed call prints one line on stderr saying so and where the
findings are kept, and the run goes on with the local database alone.  A Redis that cannot be
reached when the database is first built is a :class:`~scopecheck.models.errors.UsageError`
(``database_unreachable``) naming the URL: a fleet worker that would silently fuzz alone is
worse than one that does not start.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from typing import TypeVar

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from scopecheck.models.errors import UsageError

#: Where the database is named, and the local copy beside a shared one.
ENV_VAR = "SCOPECHECK_DB"
LOCAL_ENV_VAR = "SCOPECHECK_LOCAL_DB"
DEFAULT_PATH = ".hypothesis/examples"
#: Seconds a Redis command may take before the shared database counts as unreachable.
REDIS_TIMEOUT = 5.0

T = TypeVar("T")


def is_shared(location: str) -> bool:
    return location.startswith(("redis://", "rediss://"))


class SharedDatabase(ExampleDatabase):
    """A local directory database and a shared one, written and read together (FLEET-2).

    ``save``, ``delete`` and ``move`` go to the local database first, then to the shared one;
    ``fetch`` yields the local examples, then the shared ones not seen locally.  The first
    exception from the shared database marks it down for the rest of the process: one line on
    stderr, and from then on only the local database is used.  Listening for changes
    (HypoFuzz's dashboard) is the local database's."""

    def __init__(self, local: ExampleDatabase, shared: ExampleDatabase, url: str) -> None:
        super().__init__()
        self.local = local
        self.shared = shared
        self.url = url
        #: Why the shared database was given up (``None`` while it answers).
        self.down: str | None = None

    def __repr__(self) -> str:
        return f"SharedDatabase({self.local!r}, {self.url!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SharedDatabase)
            and self.local == other.local
            and self.url == other.url
        )

    def __hash__(self) -> int:
        return hash((SharedDatabase, self.url))

    def _shared(self, call: Callable[[], T]) -> T | None:
        """``call()`` on the shared database, or ``None`` once it has failed."""
        if self.down is not None:
            return None
        try:
            return call()
        except Exception as exc:  # redis raises its own ConnectionError, TimeoutError, ...
            self.down = f"{type(exc).__name__}: {exc}"
            local = getattr(self.local, "path", "the local database")
            print(
                f"scopecheck: error: the shared example database {self.url} stopped answering "
                f"({self.down}); findings from here on are kept only in {local}",
                file=sys.stderr,
                flush=True,
            )
            return None

    def fetch(self, key: bytes) -> Iterable[bytes]:
        seen = set()
        for value in self.local.fetch(key):
            seen.add(value)
            yield value
        # The shared fetch is a generator: it is read here, so its errors are caught here.
        for value in self._shared(lambda: list(self.shared.fetch(key))) or []:
            if value not in seen:
                yield value

    def save(self, key: bytes, value: bytes) -> None:
        self.local.save(key, value)
        self._shared(lambda: self.shared.save(key, value))

    def delete(self, key: bytes, value: bytes) -> None:
        self.local.delete(key, value)
        self._shared(lambda: self.shared.delete(key, value))

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.local.move(src, dest, value)
        self._shared(lambda: self.shared.move(src, dest, value))

    def _start_listening(self) -> None:
        self.local.add_listener(self._broadcast_change)

    def _stop_listening(self) -> None:
        self.local.remove_listener(self._broadcast_change)


def redis_database(url: str) -> ExampleDatabase:
    """Hypothesis's ``RedisExampleDatabase`` on ``url``, checked with a ``PING``: a
    ``UsageError`` (``database_unreachable``) when the package is missing or Redis does not
    answer (FLEET-1)."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise UsageError(
            "database_unreachable",
            f"${ENV_VAR}={url} needs the redis package: pip install 'scopecheck[hypofuzz]'",
        ) from None
    client = redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        raise UsageError(
            "database_unreachable",
            f"the shared example database ${ENV_VAR}={url} does not answer ({exc}); start it, "
            f"or unset ${ENV_VAR} to use the local directory database",
        ) from None
    return RedisExampleDatabase(client)


def example_database() -> ExampleDatabase:
    """The database ``$SCOPECHECK_DB`` names (see the module docstring); one per process for
    the same settings, so every profile shares one Redis connection."""
    return _database_at(
        os.environ.get(ENV_VAR) or DEFAULT_PATH, os.environ.get(LOCAL_ENV_VAR) or DEFAULT_PATH
    )


def named_database() -> ExampleDatabase | None:
    """The database ``$SCOPECHECK_DB`` names, or ``None`` when it is unset: what ``validate``
    replays before its seeded rounds, so a run that names no database reads none (INSTALL-12)
    and one that names a fleet's replays its findings (FLEET-3)."""
    return example_database() if os.environ.get(ENV_VAR) else None


@functools.lru_cache(maxsize=4)
def _database_at(location: str, local: str) -> ExampleDatabase:
    if not is_shared(location):
        return DirectoryBasedExampleDatabase(location)
    return SharedDatabase(DirectoryBasedExampleDatabase(local), redis_database(location), location)
