"""The suite-wide leak check: a test that leaves a temp folder, a mount or a process behind
fails (INSTALL-21).

Each pytest process (each xdist worker) gets a temporary directory of its own, set as
``$TMPDIR`` and ``tempfile.tempdir`` before any test runs, so whatever scopecheck or a test
creates with ``tempfile`` lands there and no other process's files are mistaken for ours.
Around every test the guard takes three readings -- the entries of that directory, the mount
points under the system's temporary directories, and the processes descending from this one
-- and after the test's own teardown it fails the test with what it left: a folder nobody
removed, a FUSE mount nobody unmounted, a backend, strace or daemon nobody stopped.

What a fixture of a wider scope (module, session) starts is its own, not a test's: processes
started while such a fixture was set up are exempt until it is torn down.  pytest's own
``tmp_path`` folders live under its base temp, outside the guarded directory.

Only the project's own test session is guarded (its rootdir is the repository): a pytest run
of the conformance suite that a test or ``validate`` starts inside the checkout sees this file
too, and there what the run leaves is the outer test's to answer for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scopecheck.run.stopping import descendants, mounts_under

#: Seconds a test's processes get to finish exiting after its teardown before they count as
#: left behind (a backend that was told to stop and is tearing down its interpreter).
SETTLE = 5.0

_exempt: set[int] = set()
_guarded: list[str] = []
#: The repository: the rootdir of the session this guard watches.
REPOSITORY = Path(__file__).resolve().parent.parent


def _entries(folder: str) -> set[str]:
    """The entries of ``folder``, but pytest's own base temps (``pytest-of-USER``: a pytest run
    inside a test keeps them, as pytest does, and they go with this directory at the end)."""
    try:
        return {name for name in os.listdir(folder) if not name.startswith("pytest-of-")}
    except OSError:
        return set()


def _alive(pids: set[int]) -> set[int]:
    """Of ``pids``, the ones still running (not zombies waiting to be reaped)."""
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            alive.add(pid)
    return alive


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def _watched(item: pytest.Item) -> list[str]:
    """Where this process's tests mount things: its temporary directory and pytest's base
    temp of this process (another xdist worker's mounts are not this test's)."""
    folders = list(_guarded)
    factory = getattr(item.config, "_tmp_path_factory", None)
    if factory is not None:
        folders.append(str(factory.getbasetemp()))
    return [os.path.realpath(folder) for folder in folders]


def _mounts(item: pytest.Item) -> set[str]:
    return {point for folder in _watched(item) for point in mounts_under(folder)}


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """A temporary directory for this pytest process alone; pytest's base temp stays where
    pytest puts it (made first, before ``$TMPDIR`` changes)."""
    if Path(config.rootpath).resolve() != REPOSITORY:
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()
    folder = tempfile.mkdtemp(prefix=f"scopecheck-tests-{os.getpid()}-")
    _guarded.append(folder)
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's temporary directory (what a test left in it was reported)."""
    del config
    for folder in _guarded:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object]) -> Iterator[None]:
    """Processes a fixture of a wider scope than a function starts are its own."""
    if fixturedef.scope == "function" or not _guarded:
        yield
        return
    before = set(descendants(os.getpid()))
    yield
    _exempt.update(set(descendants(os.getpid())) - before)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not _guarded:
        yield
        return
    folder = _guarded[0]
    files = _entries(folder)
    mounts = _mounts(item)
    processes = set(descendants(os.getpid()))
    yield
    left: list[str] = []
    new_files = sorted(_entries(folder) - files)
    if new_files:
        left.append(f"in $TMPDIR {folder}: {', '.join(new_files[:10])}")
    new_mounts = sorted(_mounts(item) - mounts)
    if new_mounts:
        left.append(f"mounted: {', '.join(new_mounts[:10])}")
    end = time.monotonic() + SETTLE
    while True:
        strays = _alive(set(descendants(os.getpid())) - processes - _exempt)
        if not strays or time.monotonic() > end:
            break
        time.sleep(0.1)
    if strays:
        left += [f"process {pid}: {_command(pid)}" for pid in sorted(strays)[:10]]
    for name in new_files:  # the next test starts clean
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        if os.path.lexists(os.path.join(folder, name)):
            os.unlink(os.path.join(folder, name))
    if left:
        _report(item, left)


def _report(item: pytest.Item, left: list[str]) -> None:
    """Fail ``item`` for what it left behind, as a failure of its own teardown."""
    message = f"{item.nodeid} left behind:\n  " + "\n  ".join(left)
    report = pytest.TestReport(
        item.nodeid,
        item.location,
        keywords={},
        outcome="failed",
        longrepr=message,
        when="teardown",
    )
    item.ihook.pytest_runtest_logreport(report=report)
