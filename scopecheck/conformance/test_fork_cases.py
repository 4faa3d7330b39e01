"""The fork conformance cases, one per bullet of 001 §5, checked against the model.

They run on every backend whose repository has ``fork()`` (every bundled one, and a user's
through ``--scopecheck-backend`` and ``scopecheck validate``); on a backend without it each case
is skipped, never passed.  Every successful fork is compared with the model by ``Env.fork``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scopecheck.backends.registry import Backend
from scopecheck.conformance.forks import IDLE, Env, rich_source
from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import BranchFork, TreeFork
from scopecheck.models.records import Stats
from scopecheck.models.writes import (
    append_list,
    delete_list,
    delete_value,
    insert_entry,
    set_value,
)


@pytest.fixture(autouse=True)
def _scratch_on_ram_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """File worlds on /dev/shm when available: these cases check fork logic, not power-loss
    durability (the crash sweeps do), and fsync-bound forks are slow on a loaded machine."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        monkeypatch.setenv("SCOPECHECK_SCRATCH", "/dev/shm")


@pytest.fixture
def env(backend: Backend) -> Iterator[Env]:
    made = Env(backend)
    try:
        repository = getattr(made.repo, "inner", made.repo)
        if not callable(getattr(repository, "fork", None)):
            pytest.skip("forks: skipped (the repository has no fork())")
        yield made
    finally:
        made.close()


def _lanes(handle: object) -> dict[str, list[str]]:
    out = {}
    for ns in ("pi.branch.tip", "pi.lane.config", "pi.lane.state"):
        out[ns] = [k for k, _ in handle.scan_values(ns)]  # type: ignore[attr-defined]
    return out


# -- contract and validation ------------------------------------------------------------------


@pytest.mark.rule("FORK-1")
def test_options_have_no_default_scope_and_are_validated(env: Env) -> None:
    """A dict, ``None`` or a bad field is ``invalid_fork_options`` before anything happens."""
    for bad in (None, {"scope": "tree"}, "tree"):
        with pytest.raises(ScopecheckError) as info:
            env.repo.fork("src", bad)
        assert info.value.code == "invalid_fork_options"
    for build in (
        lambda: BranchFork(""),
        lambda: BranchFork(None),  # type: ignore[arg-type]
        lambda: BranchFork("main", position="middle"),  # type: ignore[arg-type]
        lambda: BranchFork("main", entry_id=""),
        lambda: TreeFork(id="a\x00b"),
    ):
        with pytest.raises(ScopecheckError) as info:
            build()
        assert info.value.code == "invalid_fork_options"
    assert env.repo.list() == ["src"]


@pytest.mark.rule("FORK-2")
def test_branch_rejects_unknown_branch(env: Env) -> None:
    rich_source(env)
    assert env.codes(BranchFork("nope", id="d")) == "unknown_branch"


@pytest.mark.rule("FORK-2")
def test_branch_rejects_data_only_branch(env: Env) -> None:
    rich_source(env)
    assert env.codes(BranchFork("side", id="d")) == "data_only_branch"


@pytest.mark.rule("FORK-2", "FORK-5")
def test_branch_rejects_partial_config_state_pair(env: Env) -> None:
    """A partial pair, or config/state without a tip, is corruption (both scopes)."""
    rich_source(env)
    env.commit(delete_value(value("pi.lane.state", "main")))
    assert env.codes(BranchFork("main", id="d")) == "corrupt"
    assert env.codes(TreeFork(id="d")) == "corrupt"
    env.commit(set_value(value("pi.lane.state", "main"), IDLE))
    env.commit(delete_value(value("pi.branch.tip", "main")))
    assert env.codes(BranchFork("main", id="d")) == "corrupt"
    assert env.codes(TreeFork(id="d")) == "corrupt"


@pytest.mark.rule("FORK-3")
def test_branch_rejects_entry_off_the_tip_ancestry(env: Env) -> None:
    """e4 and e5 exist in the tree but not on main's ancestry (e3 → e2 → e1)."""
    rich_source(env)
    assert env.codes(BranchFork("main", entry_id="e4", id="d")) == "entry_not_on_branch"
    assert env.codes(BranchFork("main", entry_id="e5", id="d")) == "entry_not_on_branch"


@pytest.mark.rule("FORK-3")
def test_branch_rejects_unknown_entry(env: Env) -> None:
    rich_source(env)
    assert env.codes(BranchFork("main", entry_id="zz", id="d")) == "unknown_entry"


@pytest.mark.rule("FORK-3")
def test_branch_rejects_entry_with_null_tip(env: Env) -> None:
    rich_source(env)
    env.commit(set_value(value("pi.branch.tip", "main"), None))
    assert env.codes(BranchFork("main", entry_id="e1", id="d")) == "entry_not_on_branch"


@pytest.mark.rule("FORK-1")
def test_rejected_fork_of_missing_source_or_taken_id(env: Env) -> None:
    rich_source(env)
    with pytest.raises(ScopecheckError) as info:
        env.repo.fork("missing", TreeFork())
    assert info.value.code == "not_found"
    assert env.codes(TreeFork(id="src")) == "already_exists"


@pytest.mark.rule("FORK-4")
@pytest.mark.parametrize(
    ("entry_id", "position", "tip", "entries"),
    [
        (None, "at", "e3", {"e1", "e2", "e3"}),
        ("e3", "at", "e3", {"e1", "e2", "e3"}),
        ("e2", "at", "e2", {"e1", "e2"}),
        ("e2", "before", "e1", {"e1"}),
        ("e1", "before", None, set()),
        (None, "before", "e2", {"e1", "e2"}),
    ],
)
def test_branch_accepts(
    env: Env, entry_id: str | None, position: str, tip: str | None, entries: set[str]
) -> None:
    """Omitted entry (tip), explicit tip, mid-ancestry, before at mid and at root (null tip)."""
    rich_source(env)
    dest = env.fork(BranchFork("main", entry_id=entry_id, position=position, id="d"))  # type: ignore[arg-type]
    assert dest.get_value(value("pi.branch.tip", "main")).value == tip
    assert {e.id for e in dest.snapshot().entries} == entries


@pytest.mark.rule("FORK-4")
def test_branch_accepts_null_source_tip(env: Env) -> None:
    rich_source(env)
    env.commit(set_value(value("pi.branch.tip", "main"), None))
    dest = env.fork(BranchFork("main", id="d"))
    assert dest.get_value(value("pi.branch.tip", "main")).value is None
    assert dest.snapshot().entries == ()


@pytest.mark.rule("FORK-4", "FORK-5", "FORK-11")
def test_branch_destination_shape(env: Env) -> None:
    """Exactly one branch, same name, copied config, fresh idle state, parent recorded."""
    rich_source(env)
    dest = env.fork(BranchFork("main", id="d"))
    assert _lanes(dest) == {
        "pi.branch.tip": ["main"],
        "pi.lane.config": ["main"],
        "pi.lane.state": ["main"],
    }
    assert dest.get_value(value("pi.lane.config", "main")).value == {"model": "m"}
    assert dest.get_value(value("pi.lane.state", "main")).value == IDLE
    assert dest.parent_session_id == "src"


@pytest.mark.rule("FORK-5")
def test_tree_copies_everything_immutable(env: Env) -> None:
    """Unreachable entries, every tip, configured lanes with idle state, data-only branches."""
    rich_source(env)
    dest = env.fork(TreeFork(id="d"))
    assert {e.id for e in dest.snapshot().entries} == {"e1", "e2", "e3", "e4", "e5"}
    assert _lanes(dest) == {
        "pi.branch.tip": ["main", "side"],
        "pi.lane.config": ["main"],
        "pi.lane.state": ["main"],
    }
    assert dest.get_value(value("pi.branch.tip", "side")).value == "e4"
    assert dest.get_value(value("pi.lane.state", "main")).value == IDLE


@pytest.mark.rule("FORK-7", "FORK-10")
@pytest.mark.parametrize("tree", [False, True])
def test_both_scopes_copy_name_and_labels_and_exclude_op_state(env: Env, tree: bool) -> None:
    """Session name copied; labels only for copied entries; result/op/pending/frames, usage and
    ephemeral state absent; stats = messages copied and zero usage (ledger starts at zero)."""
    rich_source(env)
    dest = env.fork(TreeFork(id="d") if tree else BranchFork("main", id="d"))
    assert dest.get_value(value("pi.session.name")).value == "named"
    labels = [k for k, _ in dest.scan_values("pi.entry.label")]
    assert labels == (["e2", "e4", "e5"] if tree else ["e2"])
    for ns in (
        "pi.result",
        "pi.op.meta",
        "pi.op.state",
        "pi.pending.entry",
        "pi.pending.tool_output",
    ):
        assert dest.scan_values(ns) == ()
    assert dest.read_list(value_list("pi.pending.assistant_frame", "op1:r1")) == ()
    snap = dest.snapshot()
    assert snap.usage == ()
    assert all(key[0] is None for key, _ in (*snap.values, *snap.lists))
    messages = sum(e.type == "message" for e in snap.entries)
    assert dest.stats() == Stats(message_count=messages)
    assert messages == (4 if tree else 2)


# -- application values and lists ---------------------------------------------------------


@pytest.mark.rule("FORK-9", "FORK-6")
def test_tree_copies_application_state_with_original_seqs(env: Env) -> None:
    """Every app scalar and surviving element, original seqs; deleted-then-reappended lists
    reproduce only survivors; cursors page identically."""
    seqs = rich_source(env)
    env.commit(set_value(value("my-app.state"), "v2"))
    for item in range(5):
        env.commit(append_list(value_list("my-app.log"), item))
    dest = env.fork(TreeFork(id="d"))
    assert dest.get_value(value("my-app.state")) == env.source.get_value(value("my-app.state"))
    log = value_list("my-app.log")
    assert dest.read_list(log)[0].seq == seqs["log"]
    assert [e.value for e in dest.read_list(log)] == ["c", 0, 1, 2, 3, 4]
    cursor = None
    for _ in range(4):
        page_src = env.source.read_list(log, cursor=cursor, limit=2)
        assert dest.read_list(log, cursor=cursor, limit=2) == page_src
        cursor = page_src[-1].seq if page_src else None


@pytest.mark.rule("FORK-9", "FORK-6")
def test_tree_copies_tagged_elements_that_share_a_transaction_with_superseded_writes(
    env: Env,
) -> None:
    """A transaction whose set is later superseded cannot be copied whole (the JSONL fork
    rewrites such a line record by record): its surviving list elements keep seq, value and
    tag, and its entries are copied."""
    log = value_list("my-app.log")
    env.commit(
        insert_entry("e1", None, "message", {"role": "user"}),
        set_value(value("my-app.state"), "v1"),
        append_list(log, {"n": 1}, tag="mark"),
        append_list(log, 2),
    )
    env.commit(set_value(value("my-app.state"), "v2"))
    dest = env.fork(TreeFork(id="d"))
    assert [(e.value, e.tag) for e in dest.read_list(log)] == [({"n": 1}, "mark"), (2, None)]
    assert dest.read_list(log) == env.source.read_list(log)
    assert [e.id for e in dest.snapshot().entries] == ["e1"]


@pytest.mark.rule("FORK-9")
def test_branch_copies_no_application_state_scalar_trace(env: Env) -> None:
    """001 §1.1 scalar trace: v1 at seq ~10, e1 at ~12, v2 at ~50; a branch fork at e1 must not
    show v2 (post-fork-point overwrite) nor pretend to recover v1: it copies nothing."""
    env.commit(set_value(value("my-app.state"), "v1"))
    env.commit(insert_entry("e1", None, "message"))
    env.commit(
        set_value(value("pi.branch.tip", "main"), "e1"),
        set_value(value("pi.lane.config", "main"), {}),
        set_value(value("pi.lane.state", "main"), IDLE),
    )
    env.commit(set_value(value("my-app.state"), "v2"))
    dest = env.fork(BranchFork("main", entry_id="e1", id="d"))
    assert dest.get_value(value("my-app.state")) is None


@pytest.mark.rule("FORK-9")
def test_branch_copies_no_application_state_list_trace(env: Env) -> None:
    """001 §1.1 list trace: append 5 · append 20 · deleteList 40 · append 60 — destroyed
    elements must not resurface and the survivor must not leak into a branch fork."""
    log = value_list("my-app.log")
    env.commit(insert_entry("e1", None, "message"))
    env.commit(
        set_value(value("pi.branch.tip", "main"), "e1"),
        set_value(value("pi.lane.config", "main"), {}),
        set_value(value("pi.lane.state", "main"), IDLE),
    )
    env.commit(append_list(log, 5))
    env.commit(append_list(log, 20))
    env.commit(delete_list(log))
    env.commit(append_list(log, 60))
    dest = env.fork(BranchFork("main", id="d"))
    assert dest.read_list(log) == ()
    tree = env.fork(TreeFork(id="t"))
    assert [e.value for e in tree.read_list(log)] == [60]


@pytest.mark.rule("FORK-8")
@pytest.mark.parametrize("namespace", ["pi", "pi.future"])
@pytest.mark.parametrize("kind", ["scalar", "list"])
def test_unknown_reserved_namespace_with_current_state_fails(
    env: Env, namespace: str, kind: str
) -> None:
    rich_source(env)
    if kind == "scalar":
        env.commit(set_value(value(namespace, "k"), 1))
    else:
        env.commit(append_list(value_list(namespace, "k"), 1))
    assert env.codes(TreeFork(id="d")) == "unknown_namespace"
    assert env.codes(BranchFork("main", id="d")) == "unknown_namespace"


@pytest.mark.rule("FORK-8")
@pytest.mark.parametrize("namespace", ["pi", "pi.future"])
def test_unknown_reserved_namespace_set_then_deleted_fails_nothing(
    env: Env, namespace: str
) -> None:
    """Dead history (still physical lines in JSONL) is absent from current state."""
    rich_source(env)
    env.commit(set_value(value(namespace, "k"), 1), append_list(value_list(namespace, "l"), 1))
    env.commit(delete_value(value(namespace, "k")), delete_list(value_list(namespace, "l")))
    env.fork(TreeFork(id="d"))
    env.fork(BranchFork("main", id="b"))


# -- sequence preservation ----------------------------------------------------------------


@pytest.mark.rule("FORK-6")
def test_seqs_preserved_and_high_water_kept(env: Env) -> None:
    """Copied rows keep seqs; rewritten tip and idle state sit at the source rows' seqs; the
    first post-fork commit allocates at the source high-water mark."""
    seqs = rich_source(env)
    high = env.commit(set_value(value("my-app.x"), 1))[0] + 1
    dest = env.fork(BranchFork("main", entry_id="e2", id="d"))
    assert dest.get_value(value("pi.branch.tip", "main")).seq == seqs["tip"]
    assert dest.get_value(value("pi.lane.config", "main")).seq == seqs["config"]
    assert dest.get_value(value("pi.lane.state", "main")).seq == seqs["state"]
    assert [e.seq for e in dest.snapshot().entries] == [1, 2]
    assert dest.commit([set_value(value("my-app.y"), 1)])[0].seq == high
    dest.close()
    reopened = env.repo.open("d")
    assert reopened.commit([set_value(value("my-app.y"), 2)])[0].seq == high + 1


@pytest.mark.rule("FORK-6", "FORK-10")
def test_high_water_counts_ephemeral_commits(env: Env) -> None:
    """The last commits went to an ephemeral scope: the destination still starts above them."""
    from scopecheck.models.scope import ephemeral_scope

    rich_source(env)
    last = env.commit(set_value(value("k", "", ephemeral_scope("op2")), 1))[0]
    dest = env.fork(TreeFork(id="d"))
    assert dest.commit([set_value(value("my-app.y"), 1)])[0].seq == last + 1


# -- boundaries and reservation -------------------------------------------------------------


@pytest.mark.rule("FORK-12")
def test_commit_before_fork_appears_wholly_and_after_not(env: Env) -> None:
    rich_source(env)
    env.commit(set_value(value("my-app.a"), 1), set_value(value("my-app.b"), 1))
    dest = env.fork(TreeFork(id="d"))
    env.commit(set_value(value("my-app.c"), 1), set_value(value("my-app.d"), 1))
    assert dest.get_value(value("my-app.b")) is not None
    assert dest.get_value(value("my-app.c")) is None and dest.get_value(value("my-app.d")) is None


@pytest.mark.rule("FORK-12")
def test_concurrent_commits_are_wholly_in_or_out(env: Env) -> None:
    """A writer thread commits two-write transactions while forks run: every destination holds
    each transaction wholly or not at all (every backend, both SQLite layouts)."""
    import threading

    rich_source(env)
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set() and n < 200:
            n += 1
            env.source.commit([set_value(value("a", str(n)), n), set_value(value("b", str(n)), n)])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for i in range(5):
            dest_id = env.repo.fork("src", TreeFork(id=f"d{i}"))
            dest = env.repo.open(dest_id)
            left = {k for k, _ in dest.scan_values("a")}
            right = {k for k, _ in dest.scan_values("b")}
            assert left == right
            dest.close()
    finally:
        stop.set()
        thread.join()


@pytest.mark.rule("FORK-1")
def test_destination_reservation_against_create(env: Env) -> None:
    """create then fork on one id, and fork then create: the second is ``already_exists``."""
    rich_source(env)
    env.repo.create("x").close()
    env.model.create("x")
    assert env.codes(TreeFork(id="x")) == "already_exists"
    env.repo.fork("src", TreeFork(id="y"))
    with pytest.raises(ScopecheckError) as info:
        env.repo.create("y")
    assert info.value.code == "already_exists"


@pytest.mark.rule("FORK-1")
def test_omitted_id_gets_a_fresh_listed_id(env: Env) -> None:
    rich_source(env)
    first = env.repo.fork("src", TreeFork())
    second = env.repo.fork("src", BranchFork("main"))
    assert first != second and {first, second} <= set(env.repo.list())


@pytest.mark.rule("FORK-4")
def test_fork_of_a_closed_source(env: Env) -> None:
    """The source need not be open; the destination is the same."""
    rich_source(env)
    env.source.close()
    env.model.close_session("src")
    dest = env.fork(TreeFork(id="d"))
    assert len(dest.snapshot().entries) == 5
