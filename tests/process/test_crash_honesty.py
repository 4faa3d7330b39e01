"""What the system-call crash explorer claims is true: a call killed before it ran has no
effect in the persistence model and a kill run really kills (CRASH-SYS-7, CRASH-SYS-17), a
dropped run says what truly happened (CRASH-COV-6), and a backend whose only fault is its
wire is one protocol failure, never a crash rule (CRASH-FS-12, PROC-2).  Real processes under
strace; the backends are the standard library's ``dbm.dumb`` adapter and the file-backed
example behind an older protocol page."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from scopecheck.crashsim.explore import Findings
from scopecheck.crashsim.fuse_faults import Fired
from scopecheck.crashsim.generic_sweep import workload
from scopecheck.crashsim.jsonl_sweep import model_states
from scopecheck.crashsim.persistence import FileOp, Image
from scopecheck.crashsim.story import lost_lines
from scopecheck.crashsim.strace import parse, unavailable
from scopecheck.crashsim.syscall_ops import extract
from scopecheck.process.syscall_crash import (
    Recording,
    SyscallSource,
    blind_at,
    check_fault_run,
    fault_run,
    fuse_plans,
    read_image,
    run_story,
    run_workload,
)

ROOT = Path(__file__).resolve().parents[2]
DBM = "scopecheck.examples.stores.dbm_dumb_store:make_durable_backend"
SERVE_DBM = (sys.executable, "-m", "scopecheck", "serve", DBM)
OLD_PROTOCOL = (sys.executable, str(ROOT / "tests" / "data" / "old_protocol_backend.py"))


@pytest.fixture(autouse=True)
def _strace_is_here() -> None:
    why = unavailable()
    assert why is None, f"these tests need strace with ptrace permitted ({why})"


@pytest.mark.rule("CRASH-SYS-17")
def test_a_call_that_never_returned_changes_nothing_in_the_model() -> None:
    """strace's ``= ?`` (the process was killed in the call: a kill run kills at its entry,
    before the kernel runs it) is not a rename done: the next process opening the old name
    does not contradict the model."""
    trace = [
        '10 mkdir("/r/s.new", 0755) = 0\n',
        '10 rename("/r/s.new", "/r/s") = ?\n',
        "10 +++ killed by SIGKILL +++\n",
    ]
    ops = extract(parse(trace), "/r", "/").ops
    assert [op.kind for op in ops] == ["mkdir"]


@pytest.mark.rule("CRASH-SYS-7", "CRASH-SYS-17", "CRASH-COV-6")
def test_a_kill_at_a_rename_kills_and_the_next_process_meets_what_the_disk_holds(
    tmp_path: Path,
) -> None:
    """The store builds a Session aside and renames it into place; killed at that rename, the
    next process removes the leftover it finds under its old name.  The kill run really kills
    (strace delivers an injected signal only without its seccomp filter), and the run's
    operations apply to the model without a contradiction -- the run that once ended in
    ``PathError: open of a missing s.dbm.new``.  A kill aimed at a call the rerun never makes
    is dropped, saying so."""
    source = SyscallSource(DBM, SERVE_DBM, str(ROOT), base=str(tmp_path))
    with source.round(0, Findings()) as rnd:
        assert rnd is not None
        rec = rnd.recording
        k = next(i for i, op in enumerate(rec.ops) if op.kind == "rename" and op.target == "s.dbm")
        (name, ordinal) = next((n, o) for c, call, n, o in rec.calls if call == rec.ops[k].call)
        expression = f"{name}:signal=SIGKILL:when={ordinal + 1}"
        root, traces = tmp_path / "root", tmp_path / "traces"
        root.mkdir()
        traces.mkdir()
        run = run_workload(SERVE_DBM, rec.workload, str(root), str(ROOT), str(traces),
                           inject=(0, expression))  # fmt: skip
        assert run.killed
        assert not any(op.kind == "rename" and op.target == "s.dbm" for op in run.ops)
        assert any(op.path == "s.dbm.new" and op.kind == "open" for op in run.ops[k:]), (
            "the next process no longer removes the leftover: the test lost its point"
        )
        assert check_fault_run(rnd.checker, run, read_image(str(root)), expression, True) is None
        missed = fault_run(SERVE_DBM, str(ROOT), rec, str(tmp_path), rnd.checker, 0,
                           f"{name}:signal=SIGKILL:when=9999", k)  # fmt: skip
    assert missed.outcome == "dropped"
    assert missed.why == "the kill never fired: the rerun never made the call it was aimed at"


@pytest.mark.rule("CRASH-COV-6")
def test_no_fuse_create_is_planned_for_a_file_a_directory_rename_moved() -> None:
    """A file made in ``s.new`` and found under ``s`` after the directory's rename exists: an
    open of it with ``O_CREAT`` makes nothing, so the mount would never see a create there --
    a run planned on it would be dropped as never fired."""
    ops = (
        FileOp("mkdir", "s.new"),
        FileOp("open", "s.new/lock", handle=1, flags=frozenset({"create"})),
        FileOp("rename", "s.new", "s"),
        FileOp("open", "s/lock", handle=2, flags=frozenset({"create"})),
    )
    wl = workload(0, 1)
    rec = Recording(wl, ops, (), (), (), (), (0,), model_states(wl))
    plans = fuse_plans(rec)
    assert [p.op for p in plans[1]] == ["create", "create"]
    assert 3 not in plans


@pytest.mark.rule("CRASH-SYS-6")
def test_an_fsync_of_the_root_directory_is_planned_to_fail_too() -> None:
    """A store that ignores a failed fsync of the directory it renamed into (SQLite's
    ``unixSync`` does, for the journal's directory) is found only if that fsync is failed: the
    root's fsyncs are counted and planned like any file's, on the mount's ``/``."""
    ops = (
        FileOp("open", "", handle=9, flags=frozenset({"directory"})),
        FileOp("open", "s.tmp", handle=1, flags=frozenset({"create"})),
        FileOp("sync", "s.tmp", handle=1),
        FileOp("rename", "s.tmp", "s"),
        FileOp("sync", "", handle=9),
        FileOp("sync", "", handle=9),
    )
    wl = workload(0, 1)
    rec = Recording(wl, ops, (), (), (), (), (0,), model_states(wl))
    plans = fuse_plans(rec)
    assert [(p.op, p.path, p.ordinal, p.errno) for p in plans[4] + plans[5]] == [
        ("fsync", "/", 1, "EIO"),
        ("fsync", "/", 2, "EIO"),
    ]


@pytest.mark.rule("CRASH-SYS-17")
def test_a_mapped_file_is_followed_through_renames_and_unlinks() -> None:
    ops = (
        FileOp("open", "s.new/db", handle=1, flags=frozenset({"create"})),
        FileOp("write", "s.new/db", handle=1, data=b"x"),
        FileOp("rename", "s.new", "s"),
        FileOp("unlink", "s/db"),
    )
    mapped = [(1, "s.new/db", "written through a shared mapping")]
    assert blind_at(ops, mapped, 1) == {}  # mapped right before op 1: not yet
    assert blind_at(ops, mapped, 2) == {"s.new/db": "written through a shared mapping"}
    assert blind_at(ops, mapped, 3) == {"s/db": "written through a shared mapping"}
    assert blind_at(ops, mapped, 4) == {}


@pytest.mark.rule("CRASH-FS-12", "PROC-2")
def test_a_backend_on_an_older_protocol_page_is_one_protocol_failure() -> None:
    """Its storage is right and its usage rows carry a field the protocol has not: one
    PROC-2 with what was sent and what came back, no crash rule judged on a reopen that did
    not speak the protocol, and the search says it stopped there."""
    source = SyscallSource("old", OLD_PROTOCOL, str(ROOT))
    found = source.explore(math.inf, 1)
    (failure,) = found.failures
    assert failure.rule == "PROC-2" and failure.kind == "protocol", failure.details()
    assert failure.profiles == ()  # the wire fails under every file-system profile alike
    assert "unexpected field(s) ['timestamp']" in failure.problem
    assert "sent:" in failure.problem and "answer:" in failure.problem
    assert any("stopped early" in text for text in found.findings.limits), found.findings.limits


@pytest.mark.rule("CRASH-COV-5")
def test_a_fault_runs_story_says_what_each_step_got_what_the_fault_hit_and_what_was_left() -> None:
    """What a fault replay shows besides the verdict: each step that ran and its answer, the
    call the fault hit (the root by name), and the files the run left."""
    wl = workload(0, 2)
    ran = ("ok", "outcome_unknown", "unusable")[: len(wl.steps)]
    rec = Recording(wl, (), (), ran, (), (), (0,), model_states(wl))
    hit = Fired("fsync", "/", 2, "EIO", 7, 0.0)
    story = run_story(rec, Image({"s.json": b"{}"}), hit)
    assert story[0] == f"workload {wl.name}, {len(ran)} steps ran:"
    assert story[1] == f"  step 1 ({wl.steps[0].op}): ok"
    assert f"  step 2 ({wl.steps[1].op}): outcome_unknown" in story
    assert "the fault hit: fsync #2 of <root>, which failed with EIO" in story
    assert story[-2:] == ("files the run left:", "  s.json: 2 bytes")


@pytest.mark.rule("CRASH-SYS-9")
def test_a_power_loss_story_names_each_file_it_took_something_from() -> None:
    """Against the page cache at the same point: a file cut short, one gone, one in another
    version, one back from an undone unlink; a file kept whole is not named."""
    cache = Image({"log": b"abcdef", "new": b"x", "CURRENT": b"MANIFEST-2\n", "same": b"s"})
    image = Image({"log": b"abc", "CURRENT": b"MANIFEST-1\n", "old": b"o", "same": b"s"})
    assert lost_lines(cache, image) == [
        "what the power loss lost against the page cache:",
        "  CURRENT: another version, 11 bytes against 11, differing from byte 9",
        "  log: 3 of its 6 bytes kept, the rest lost",
        "  new: gone (1 bytes in the page cache)",
        "  old: back (1 bytes), gone from the page cache",
    ]
    assert lost_lines(cache, cache) == ["what the power loss lost against the page cache: nothing"]
