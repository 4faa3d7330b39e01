"""A process killed in the middle of a JSONL fork leaves nothing in the temp directory
(FORK-18): the scratch index is SQLite's anonymous database, whose file is unlinked as soon as
it is open (``impl/jsonl/scratch.py``).

The fork runs in a child process whose ``TMPDIR`` is a fresh directory (SQLite reads it when
it starts) and which exits abruptly once the index holds the whole source, like ``kill -9``.
The index's page cache is cut to two pages so that its file really exists at that moment (a
small index otherwise never leaves memory), and the child checks that it does.  The planted
variant puts the index back in a named database in a temp directory, as it was, and the same
check sees it left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scopecheck.data import pi_session
from scopecheck.impl.jsonl.scratch import scratch_index

ROOT = Path(__file__).resolve().parents[2]
LEGACY = pi_session("large-session")

CHILD = r"""
import os, shutil, sys, tempfile
import apsw
from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl import fork as fork_module, legacy_fork
from scopecheck.models.addresses import value
from scopecheck.models.fork import TreeFork
from scopecheck.models.writes import insert_entry, set_value

root, kind, planted = sys.argv[1], sys.argv[2], sys.argv[3] == "planted"

def named_index(ddl):  # the planted bug: a named database in a temp directory
    conn = apsw.Connection(os.path.join(tempfile.mkdtemp(prefix="index-"), "index.sqlite"))
    conn.execute(ddl)
    conn.execute("BEGIN")
    return conn

real_index = fork_module.scratch_index

def small_cache_index(ddl):  # the real index, made to spill to its file at once
    conn = real_index(ddl)
    conn.execute("PRAGMA cache_size=2")
    return conn

fork_module.scratch_index = legacy_fork.scratch_index = (
    named_index if planted else small_cache_index
)

def spilled():  # whether the index's unlinked file is open here (else this proves nothing)
    scratch = os.environ["TMPDIR"]
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(scratch) and target.endswith("(deleted)"):
            return True
    return False

def killed(*args, **kwargs):
    os._exit(17 if planted or spilled() else 18)

repo = JsonlRepository(root, cwd="/")
if kind == "format-4":
    storage = repo.create("src")
    for n in range(300):
        storage.commit([insert_entry(f"e{n}", None, "note", {"n": n}),
                        set_value(value("my-app.k"), n)])
    storage.close()
    settled = fork_module.Index.settle
    def settle_then_die(self):  # pass 1 has indexed and settled every line
        settled(self)
        killed()
    fork_module.Index.settle = settle_then_die
    repo.fork("src", TreeFork(id="d"))
else:
    import orjson
    with open(sys.argv[4], "rb") as handle:
        source = orjson.loads(handle.readline())["id"]  # a legacy file is named by its id
    shutil.copyfile(sys.argv[4], os.path.join(root, f"{source}.jsonl"))
    built = legacy_fork.LegacyCapture._build
    def build_then_die(self, *args, **kwargs):
        built(self, *args, **kwargs)
        killed()
    legacy_fork.LegacyCapture._build = build_then_die
    repo.fork(source, TreeFork(id="d"))
os._exit(0)  # not reached: the fork must have been killed
"""


def run_killed_fork(tmp_path: Path, kind: str, planted: bool) -> list[str]:
    """Run the child; the names left in its temp directory."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    args = [sys.executable, "-c", CHILD, str(sessions), kind, "planted" if planted else "real"]
    if kind == "legacy":
        args.append(str(LEGACY))
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("SQLITE_TMPDIR", None)
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    # 17: killed where intended, with the real index's file open; 18: it never reached disk
    assert result.returncode == 17, result.stderr
    return sorted(str(path.relative_to(scratch)) for path in scratch.rglob("*"))


@pytest.mark.rule("FORK-18")
@pytest.mark.parametrize("kind", ["format-4", "legacy"])
def test_a_fork_killed_mid_way_leaves_nothing_in_the_temp_directory(
    tmp_path: Path, kind: str
) -> None:
    if kind == "legacy" and not LEGACY.is_file():
        pytest.fail(f"the legacy transcript is missing: {LEGACY}")
    assert run_killed_fork(tmp_path, kind, planted=False) == []


@pytest.mark.rule("FORK-18")
def test_the_named_index_a_fork_used_to_keep_is_seen_left_behind(tmp_path: Path) -> None:
    """BRIEF "Prove the checks can fail": the old named index survives the kill."""
    left = run_killed_fork(tmp_path, "format-4", planted=True)
    assert any(name.endswith("index.sqlite") for name in left), left


@pytest.mark.rule("FORK-18")
def test_the_scratch_index_is_anonymous_unjournalled_and_open_for_writing() -> None:
    """The index has no name (the anonymous database, nothing to leave behind), pays for no
    durability nobody needs (no journal, no syncs: SQLite's defaults are a rollback journal and
    full syncs), and is handed over inside a transaction so pass 1's inserts are not one
    transaction each."""
    conn = scratch_index("CREATE TABLE t(x)")
    try:
        assert conn.filename == ""
        assert conn.execute("PRAGMA journal_mode").fetchall() == [("off",)]
        assert conn.execute("PRAGMA synchronous").fetchall() == [(0,)]
        assert conn.in_transaction
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        conn.close()
