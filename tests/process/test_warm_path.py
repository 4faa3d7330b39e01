"""The warm process path (PROC-3, PROC-8) and a protocol failure reported once (PROC-2).

One backend child serves many worlds, each over a fresh, empty root it is moved to by ``hello``;
a restart is read back by a process that did not write (a new one by default); a backend that
keeps state across ``hello`` is the backend's finding; and a backend that answers one request
wrongly gives one failure, rule PROC-2, with the exchange and its stderr -- through the
machine, through ``validate --exec --json``, and on a conformance case's writer thread.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from scopecheck import set_value, value
from scopecheck.backends.adapters import RESTART_ENV, load
from scopecheck.backends.registry import Backend
from scopecheck.machines.storage import make_machine
from scopecheck.models.errors import ProtocolError
from scopecheck.process.client import ProcessPool, ProcessWorld, ProtocolFailure
from scopecheck.run.fuzz import fuzz_backend
from scopecheck.run.profiles import get_profile

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SERVE = [sys.executable, "-m", "scopecheck", "serve",
         f"{ROOT}/examples/good_file_backend.py:make_backend"]  # fmt: skip
WRONG = [sys.executable, str(DATA / "wrong_reply_backend.py")]
STICKY = [sys.executable, str(DATA / "sticky_backend.py")]


def _exec(command: list[str]) -> str:
    return "exec:" + shlex.join(command)


@pytest.mark.rule("PROC-8")
def test_one_child_serves_many_worlds_each_over_a_fresh_empty_root() -> None:
    """The probe's child serves the next world and the one after, each over its own root,
    which it lists empty; a world's files go to its own root."""
    loaded = load(_exec(SERVE))
    try:
        pids, roots = set(), []
        for n in range(3):
            world: Any = loaded.backend.new_world(lambda: 1_700_000_000_000)
            try:
                repo = world.repository()
                assert repo.list() == []
                storage = repo.create(f"s{n}")
                storage.commit([set_value(value("app", "k"), n)])
                storage.close()
                pids.add(repo.process.pid)
                roots.append(world.root)
                assert os.listdir(world.root)
            finally:
                world.cleanup()
        assert len(pids) == 1 and len(set(roots)) == 3
        assert loaded.counts.worlds == 3
    finally:
        assert loaded.backend.close is not None
        loaded.backend.close()


@pytest.mark.rule("PROC-3")
@pytest.mark.parametrize("policy", ["new", "other"])
def test_a_restart_is_read_back_by_a_process_that_did_not_write(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``new`` (the default): a process started for the restart, never one that served a root
    before; ``other``: another child.  Either reads back what the old one acknowledged."""
    monkeypatch.setenv(RESTART_ENV, policy)
    loaded = load(_exec(SERVE))
    try:
        world: Any = loaded.backend.new_world(lambda: 1_700_000_000_000)
        try:
            repo = world.repository()
            first = repo.process
            storage = repo.create("s")
            storage.commit([set_value(value("app", "k"), 1)])
            repo = world.restart()
            assert repo.process is not first and repo.process.pid != first.pid
            if policy == "new":
                assert repo.process.hellos == 1  # it served no root before this one
                first.stop()  # it was told to stop, and exits on its own
                assert first.exited
            assert repo.open("s").get_value(value("app", "k")) is not None
        finally:
            world.cleanup()
    finally:
        assert loaded.backend.close is not None
        loaded.backend.close()


@pytest.mark.rule("PROC-8")
def test_a_backend_that_keeps_state_across_hello_is_its_finding() -> None:
    """A child that stays at its first root answers the next world's ``list`` with the first
    world's Session: the world is refused with rule PROC-8, never run over that state."""
    pool = ProcessPool(STICKY)
    try:
        world = ProcessWorld(STICKY, lambda: 1, pool=pool, escalate=True)
        world.repository().create("s")
        world.cleanup()
        with pytest.raises(ProtocolFailure) as raised:
            ProcessWorld(STICKY, lambda: 1, pool=pool, escalate=True)
        assert raised.value.rule == "PROC-8"
        assert "kept state of an earlier root" in str(raised.value)
        assert "['s']" in str(raised.value)
    finally:
        pool.close()


@pytest.mark.rule("PROC-2")
def test_a_wrong_reply_shows_what_was_sent_what_came_back_and_the_stderr() -> None:
    world = ProcessWorld(WRONG, lambda: 1)
    try:
        storage = world.repository().create("s")
        storage.commit([set_value(value("app", "k"), 1)])
        storage.commit([set_value(value("app", "k"), 2)])
        with pytest.raises(ProtocolError) as raised:
            storage.commit([set_value(value("app", "k"), 3)])
        text = raised.value.message
        assert "carries id 4" in text and "answered in order" in text
        assert '  sent:   {"id":5,"op":"commit"' in text
        assert '  answer: {"id":4,"ok":' in text
        assert "wrong-reply: answering commit 3 with id 4" in text
        with pytest.raises(ProtocolError, match="broke the protocol before get_value"):
            storage.get_value(value("app", "k"))  # nothing it says is trusted any more
    finally:
        world.cleanup()


@pytest.mark.rule("PROC-2")
def test_a_wrong_reply_in_the_machine_is_one_failure_with_rule_proc_2(tmp_path: Path) -> None:
    """The machine stops at the first protocol error: one reproducer, no shrinking, the
    error with the exchange and the stderr line, rule PROC-2 and no model rule."""
    loaded = load(_exec(WRONG))
    try:
        report = fuzz_backend(
            attrs.evolve(loaded.backend, crash=None), budget=30, seed=0,
            settings=get_profile("ci"), failures_dir=tmp_path, profile="ci", spec="wrong",
        )  # fmt: skip
    finally:
        assert loaded.backend.close is not None
        loaded.backend.close()
    assert report.failures == 1 and len(report.reproducers) == 1
    record = orjson.loads(Path(report.reproducers[0]).read_bytes())
    assert record["rules"] == ["PROC-2"]
    assert record["error"].startswith("ProtocolError: response to commit")
    assert "wrong-reply: answering commit 3" in record["error"]


@pytest.mark.rule("PROC-2")
def test_validate_exec_json_reports_a_wrong_reply_once(tmp_path: Path) -> None:
    """``validate --exec … --json``: exactly one failure, rule PROC-2, with the backend's
    stderr, however many cases met it; the phases after it say why they did not run."""
    run = subprocess.run(
        [sys.executable, "-m", "scopecheck", "validate", "--exec", shlex.join(WRONG),
         "--budget", "10", "--json", "--failures-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    verdict = orjson.loads(run.stdout)
    assert run.returncode == 1 and not verdict["passed"]
    (failure,) = verdict["failures"]
    assert failure["rule"] == "PROC-2" and failure["rules"] == ["PROC-2"]
    assert "carries id" in failure["error"]
    assert "wrong-reply: answering commit 3" in failure["message"]
    assert verdict["phases"][failure["phase"]]["status"] == "failed"
    later = [p for p in ("machine", "crash exploration") if p != failure["phase"]]
    for phase in later:
        assert verdict["phases"][phase]["status"] == "skipped"
        assert "broke the protocol" in verdict["phases"][phase]["detail"]


@pytest.mark.rule("PROC-2")
def test_a_wrong_reply_on_a_conformance_writer_thread_fails_the_case_as_a_protocol_error(
    tmp_path: Path,
) -> None:
    """Four threads commit while ``close()`` runs; the third commit's answer is wrong: the
    case fails with that protocol error, not with what the case asserts afterwards."""
    import scopecheck.conformance

    suite = Path(scopecheck.conformance.__file__).resolve().parent
    case = (
        "test_scoped_storage.py::"
        "test_close_drains_admitted_scoped_commits_and_rejects_later_reads_and_writes"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "scopecheck.pytest_plugin",
         "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(suite),
         f"--scopecheck-backend={_exec([*WRONG, '1'])}", f"{suite}/{case}"],
        cwd=tmp_path, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    out = run.stdout.decode(errors="replace")
    assert run.returncode == 1, out[-3000:]
    assert "ProtocolError: protocol_error: response to commit" in out, out[-3000:]
    assert "1 failed" in out


def _raising_backend() -> Backend:
    """Memory, except that a commit on a thread other than the main one raises RuntimeError
    -- a backend bug with no code."""
    import threading

    from scopecheck.backends.registry import BUNDLED

    memory = BUNDLED["memory"]

    class Storage:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def commit(self, writes: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("the backend's own bug")
            return self.inner.commit(writes)

    class Repo:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def create(self, sid: str) -> Any:
            return Storage(self.inner.create(sid))

        def open(self, sid: str) -> Any:
            return Storage(self.inner.open(sid))

    class World:
        def __init__(self, clock: Any) -> None:
            self.inner = memory.new_world(clock)

        def repository(self) -> Any:
            return Repo(self.inner.repository())

        def restart(self) -> Any:
            return Repo(self.inner.restart())

        def cleanup(self) -> None:
            self.inner.cleanup()

    return Backend("memory-raising", World)


@pytest.mark.rule("LIFE-4")
def test_an_uncoded_exception_on_a_racing_thread_is_raised_as_itself() -> None:
    """A racing commit that raises an exception without a code: the machine raises that
    exception, never an assertion about a missing answer."""
    machine = make_machine(_raising_backend())()
    try:
        with pytest.raises(RuntimeError, match="the backend's own bug"):
            machine.race("s1", 2, False)
    finally:
        machine.teardown()


@pytest.mark.rule("CRASH-SYS-4")
def test_a_wrapper_that_writes_outside_the_root_is_explained_once(tmp_path: Path) -> None:
    """A command that is a wrapper (here a shell writing its own files, as a toolchain does
    before it runs the backend) is traced with the backend: its files outside the root give
    one limit that says so and what to run instead, not a limit per file."""
    from scopecheck.process.syscall_crash import explore

    assert shutil.which("node") is not None, "the Node.js example needs node on PATH"
    script = (
        f"for n in 1 2 3 4 5 6; do echo built > {tmp_path}/cache-$n; done; "
        f"exec node {ROOT}/examples/node/backend.js"
    )
    found = explore("wrapper", ["sh", "-c", script], str(ROOT), budget=4, seed=0, faults=False)
    limits = found.findings.limits
    wrapper = [f for f in limits if "looks like a wrapper or a toolchain" in f]
    assert len(wrapper) == 1 and f"{tmp_path}/cache-" in wrapper[0], limits
    assert not [f for f in limits if f.startswith("outside:") and f not in wrapper], limits


@pytest.mark.rule("PROC-9")
def test_a_process_world_takes_a_restart_step_once_per_spacing() -> None:
    """A process world's machine may take its restart step only after
    ``ProcessWorld.restart_spacing`` steps since the world started or last restarted; an
    in-process world's at any step.  Restarts still run, as real processes (PROC-3)."""
    from hypothesis.stateful import RULE_MARKER

    from scopecheck.machines.storage import restart_spacing
    from scopecheck.process.client import RESTART_SPACING

    loaded = load(_exec(SERVE))
    try:
        machine_class = make_machine(loaded.backend)
        rule = getattr(machine_class.restart, RULE_MARKER)  # the rule Hypothesis draws
        machine = machine_class()
        try:
            assert restart_spacing(machine.world) == RESTART_SPACING > 0
            for _ in range(RESTART_SPACING - 1):
                machine.count_step()
            assert not machine.may_restart() and not all(p(machine) for p in rule.preconditions)
            machine.count_step()
            assert machine.may_restart() and all(p(machine) for p in rule.preconditions)
            pid = machine.repo.process.pid  # type: ignore[attr-defined]
            machine.restart()
            assert machine.repo.process.pid != pid  # type: ignore[attr-defined]
            assert not machine.may_restart()
        finally:
            machine.teardown()
    finally:
        assert loaded.backend.close is not None
        loaded.backend.close()
    inside = load(f"{ROOT}/examples/good_file_backend.py:make_backend")
    world: Any = inside.backend.new_world(lambda: 1_700_000_000_000)
    try:
        assert restart_spacing(world) == 0
    finally:
        world.cleanup()
