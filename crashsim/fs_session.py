"""The one Session a ``FileSystem`` sweep runs, shared by the crash sweep
(:mod:`scopecheck.crashsim.generic_sweep`) and the fault runs
(:mod:`scopecheck.crashsim.generic_faults`): where it lives, what an empty one reads, and how
it is read back through a backend's factory (CRASH-FS-1..11).

Both sweeps import it and neither imports the other's private names; the crash sweep reaches
the fault runs, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scopecheck.crashsim.recovery import close
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository

if TYPE_CHECKING:
    from scopecheck.crashsim.sandbox import Sandbox, StepClock

#: The directory every sweep's backend keeps its files under, on the pyfakefs sandbox.
ROOT = "/sessions"
#: The one Session a sweep's workload creates, commits to and reads back.
SESSION = "s"

#: ``factory(clock, *, fs, root)``: a Repository over ``root`` doing its I/O through ``fs``.
Factory = Callable[..., Any]

#: What :data:`SESSION` reads just after it is created (the model's empty Session).
EMPTY: Snapshot = ReferenceRepository().create(SESSION).snapshot()


def read_session(factory: Factory, box: Sandbox, clock: StepClock) -> Snapshot | None:
    """The state of :data:`SESSION` reopened by ``factory`` over ``box``'s files, ``None`` if
    the repository does not list it; the repository is closed either way."""
    repo = factory(clock, fs=box.fs, root=ROOT)
    try:
        if SESSION not in repo.list():
            return None
        storage = repo.open(SESSION)
        snapshot: Snapshot = storage.snapshot()
        storage.close()
        return snapshot
    finally:
        close(repo)
