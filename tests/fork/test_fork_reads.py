"""What a SQLite fork reads from its source (001 §1.3 SQLite "SQL-level namespace prefilters",
§5 "instrumented source readers"): the namespace spans agree with the one classifier, and an
APSW VFS read spy shows no fork reads source-sized state it drops, in both layouts and scopes;
the planted unfiltered stage is caught by the same spy."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from scopecheck.impl.sqlite import SqliteContainerRepository, SqliteRepository
from scopecheck.impl.sqlite.fork import span_sql
from scopecheck.machines import fork_reads
from scopecheck.models.fork_policy import (
    BRANCH_LIST_SPANS,
    BRANCH_VALUE_SPANS,
    ENTRY_LABEL,
    LANE_NAMESPACES,
    TREE_SPANS,
    Disposition,
    NamespaceSpan,
    classify,
    classify_list,
    scan_spans,
)
from scopecheck.planted.fork import probe_unfiltered_reads

_EDGES = (
    "",
    "p",
    "pi",
    "pi-app",
    "pi.",
    "pi/",
    "pi0",
    "pj",
    "PI.op.x",
    "pi.op",
    "pi.op.",
    "pi.op.meta",
    "pi.op/",
    "pi.opx",
    "pi.pending",
    "pi.pending.",
    "pi.pending.assistant_frame",
    "pi.pending/",
    "pi.result",
    "pi.result.",
    "pi.resultx",
    "pi.session.name",
    "pi.session.namex",
    "pi.entry.label",
    "pi.entry.labels",
    "pi.branch.tip",
    "pi.branch.tip.x",
    "pi.lane.config",
    "pi.lane.state",
    "pi.lane.statf",
    "pi.future",
    "my-app.state",
    "zzz",
    "\U0001f600",
    "pi.\u00e9",
)

namespaces = st.one_of(
    st.sampled_from(_EDGES),
    st.builds(lambda a, b: a + b, st.sampled_from(_EDGES), st.text(max_size=3)),
    st.builds(lambda a, n: a[:n], st.sampled_from(_EDGES), st.integers(0, 30)),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
)


def _hits(spans: tuple[NamespaceSpan, ...], namespace: str) -> int:
    return sum(span.contains(namespace) for span in spans)


@pytest.mark.rule("SQLITE-16", "FORK-8")
def test_scan_spans_pick_the_table_for_the_scope_and_row_kind() -> None:
    """``scan_spans(branch, lists)``: tree scope scans the same spans for values and lists;
    branch scope scans values and lists differently (lists only where they fail the fork)."""
    assert scan_spans(False, False) == scan_spans(False, True) == TREE_SPANS
    assert scan_spans(True, False) == BRANCH_VALUE_SPANS
    assert scan_spans(True, True) == BRANCH_LIST_SPANS
    assert BRANCH_VALUE_SPANS != BRANCH_LIST_SPANS


@given(namespace=namespaces)
@example(namespace="pi")
@example(namespace="pi.session.name")
def test_scan_spans_agree_with_the_classifier(namespace: str) -> None:
    """Every namespace whose current rows a fork copies or must fail on is scanned exactly
    once; nothing else is scanned (branch scope reads its lane and labels by point/member)."""
    disposition, as_list = classify(namespace), classify_list(namespace)
    for spans in (TREE_SPANS, BRANCH_VALUE_SPANS, BRANCH_LIST_SPANS):
        assert _hits(spans, namespace) <= 1, (namespace, spans)
    assert _hits(TREE_SPANS, namespace) == (disposition is not Disposition.EXCLUDE)
    assert _hits(TREE_SPANS, namespace) == (as_list is not Disposition.EXCLUDE)
    scanned = disposition in (Disposition.COPY, Disposition.UNKNOWN_RESERVED)
    assert _hits(BRANCH_VALUE_SPANS, namespace) == scanned, namespace
    if disposition in (
        Disposition.BRANCH_TIP,
        Disposition.LANE_CONFIG,
        Disposition.LANE_STATE,
        Disposition.LABEL,
    ):
        assert namespace in (*LANE_NAMESPACES, ENTRY_LABEL)
    assert _hits(BRANCH_LIST_SPANS, namespace) == (as_list is Disposition.UNKNOWN_RESERVED)


@pytest.mark.rule("SQLITE-16")
@given(names=st.lists(namespaces, max_size=12, unique=True))
@example(names=list(_EDGES))
def test_span_sql_selects_what_the_span_contains(names: list[str]) -> None:
    """SQLite's BINARY collation orders the namespaces as Python does, so each span's SQL
    range selects exactly the namespaces the span contains."""
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t(namespace TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.executemany("INSERT INTO t VALUES (?)", [(n,) for n in names])
    for span in {*TREE_SPANS, *BRANCH_VALUE_SPANS, *BRANCH_LIST_SPANS}:
        where, params = span_sql(span)
        got = {row[0] for row in conn.execute(f"SELECT namespace FROM t WHERE {where}", params)}
        assert got == {n for n in names if span.contains(n)}, span


@pytest.mark.rule("SQLITE-16", "FORK-13")
@pytest.mark.parametrize("open_source", [False, True], ids=["closed", "open"])
@pytest.mark.parametrize("scope", ["tree", "branch"])
@pytest.mark.parametrize("shared", [False, True], ids=["sqlite", "sqlite-shared"])
def test_sqlite_fork_reads_only_what_it_needs(shared: bool, scope: str, open_source: bool) -> None:
    """Forking a source with megabytes of state the fork drops (off-branch entries, labels and
    lanes, application state for branch scope; op/pending/result rows, frames, ephemeral
    scopes and usage for both) reads barely more from the source than forking the same source
    without it.  A stage that scans and drops reads most of the bulk (see the next test)."""
    cls = SqliteContainerRepository if shared else SqliteRepository
    reads = fork_reads.measure(cls, shared, fork_reads.SCOPES[scope], open_source)
    assert reads.lean > 0  # the spy sees the fork's reads at all
    assert reads.share <= fork_reads.MAX_SHARE, (
        f"the fork read {reads.extra:,} more bytes from the heavy source "
        f"({reads.share:.1%} of the {reads.bulk:,} bytes it drops)"
    )


@pytest.mark.rule("SQLITE-16", "ARCH-2")
def test_the_read_spy_catches_an_unfiltered_stage() -> None:
    """The planted bug ``fork-sqlite-reads-unfiltered`` forks correctly but scans every row:
    the spy must report it (the check can fail)."""
    caught, detail = probe_unfiltered_reads()
    assert caught, detail
    assert detail.count("TOO MUCH") == 4, detail  # both layouts, both scopes
