"""Open's fast path folds exactly what the documented path replays (JSONL-6, JSONL-7).

``fold_main_log`` checks and folds a main log in one pass.  These tests pin, over main logs
built from records mutated in every way the checker looks at (with and without a sidecar whose
seqs may collide with the main log's), that

* it accepts a main log exactly when the documented checks (``scan_lines``) find nothing wrong;
* whenever it accepts, open's plan and resident state (every record built, stats, next seq,
  live sidecars, retirement boundaries) equal the documented path's;
* whenever anything is wrong, open reports the same problems as the documented path.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from scopecheck.impl.fs import Lines, OsFileSystem
from scopecheck.impl.jsonl import load as load_module
from scopecheck.impl.jsonl import replay as replay_module
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.codec import encode_header, encode_scope_header
from scopecheck.impl.jsonl.load import SessionLoad, load_session, scan_lines
from scopecheck.impl.jsonl.replay import MainFold, fold_main_log, replay
from scopecheck.impl.resident import ResidentState
from scopecheck.impl.resident_session import ResidentSession
from scopecheck.models.records import Snapshot
from scopecheck.models.writes import usage_value
from tests.jsonl.test_index_transaction import BASES, ODD_VALUES, SCOPE, edits, mutated

SID = "s"
Fold = Callable[[list[bytes]], MainFold | None]


def snapshot(state: ResidentState) -> Snapshot:
    return ResidentSession(SID, state, lambda: 0).snapshot()


def plan_facts(load: SessionLoad) -> tuple[Any, ...]:
    return (
        load.next_seq,
        load.high_water,
        load.boundaries,
        load.live,
        [(scope, tx.first, tx.last) for scope, tx in load.retained if scope is not None],
        [(p.path, p.line, p.message) for p in load.errors],
    )


line_records = st.lists(st.sampled_from(BASES), min_size=1, max_size=3)
DEFECTS = ("edit", "unknown key", "gap inside a line", "seq repeats", "seq goes back")


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[bytes], list[bytes] | None]:
    """Main-log lines (header first) and, sometimes, a sidecar's lines for ``SCOPE``.

    Half the main logs are as a writer makes them; the other half carry one defect at one
    drawn record, so each way a log can be wrong is tried on its own."""
    main = [encode_header(SID, 1, "/")]
    lines = draw(st.lists(line_records, max_size=5))
    total = sum(map(len, lines))
    at = draw(st.integers(0, total - 1)) if total and draw(st.booleans()) else -1
    defect = draw(st.sampled_from(DEFECTS)) if at >= 0 else None
    event(f"defect: {defect}")
    seq, n = 0, 0
    for picks in lines:
        seq += draw(st.sampled_from([1, 2]))  # seqs of other files fall in the gaps
        records = []
        for index, base in enumerate(picks):
            rec = dict(base, seq=seq)
            if n == at:
                if defect == "edit":
                    rec = mutated(rec, draw(edits))
                elif defect == "unknown key":
                    rec["unknown"] = 1  # entries allow any payload key, nothing else does
                elif defect == "gap inside a line" and index:
                    rec["seq"] = seq = seq + 1
                elif defect == "seq repeats" and not index:
                    rec["seq"] = seq = seq - 1
                elif defect == "seq goes back" and not index:
                    rec["seq"] = seq = seq - 2
            records.append(rec)
            seq += 1
            n += 1
        seq -= 1
        main.append(orjson.dumps(records[0] if len(records) == 1 else records))
    if not draw(st.booleans()):
        return main, None
    side = [encode_scope_header(SID, SCOPE)]
    used = 0
    for side_seq in sorted(draw(st.sets(st.integers(1, seq + 3), max_size=3))):
        if side_seq <= used:
            continue
        size = draw(st.integers(1, 3))  # a transaction of up to three appends
        appends = [
            {"kind": "list", "op": "append", "seq": n, "namespace": "n", "key": "k",
             "value": n, "scopeId": SCOPE}
            for n in range(side_seq, side_seq + size)
        ]  # fmt: skip
        side.append(orjson.dumps(appends[0] if size == 1 else appends))
        used = side_seq + size - 1
    return main, side


def write_session(root: str, main: list[bytes], side: list[bytes] | None) -> str:
    path = session_paths.main_path(root, SID)
    with open(path, "wb") as handle:
        handle.write(b"\n".join(main) + b"\n")
    if side is not None:
        os.makedirs(session_paths.scopes_dir(path), exist_ok=True)
        with open(session_paths.sidecar_path(path, SCOPE), "wb") as handle:
            handle.write(b"\n".join(side) + b"\n")
    return path


def canonical(scan: Any) -> bool:
    """The fast path's domain: a main log the record checks accept with nothing to note.  A
    non-canonical form upstream's reader takes (JSONL-23) goes the documented way, which both
    reads it and says so."""
    return not scan.corrupt and not scan.notes


def check_session(fold: Fold, session: tuple[list[bytes], list[bytes] | None]) -> None:
    """``fold`` (open's fast path, or a planted copy of it) against the documented path."""
    main_lines, side_lines = session
    documented_scan = scan_lines("main", Lines(main_lines, None), SID, None)
    assert (fold(main_lines) is not None) == canonical(documented_scan), (
        "the fast path must accept a main log exactly when the record checks accept it and "
        f"note nothing non-canonical: {main_lines!r}"
    )
    fs = OsFileSystem()
    with tempfile.TemporaryDirectory() as root:
        path = write_session(root, main_lines, side_lines)
        fast = load_session(fs, path, SID, fold=True)
        documented = load_session(fs, path, SID)
    assert plan_facts(fast) == plan_facts(documented)
    noted = bool(documented.main.notes)
    event("documented path: " + ("corrupt" if documented.errors else "noted" if noted else "clean"))
    event(f"main transactions: {min(len(main_lines) - 1, 2)}+, sidecar: {side_lines is not None}")
    if documented.errors or noted:
        assert fast.folded is None  # problems and notes are always the documented path's
        return
    assert fast.folded is not None
    assert snapshot(replay(fast)) == snapshot(replay(documented))


def check_single_edits(fold: Fold) -> None:
    """Exhaustive over one edit (drop a field, or set it to each odd value, or add an unknown
    key) of each base record, alone on its line and in the middle of a three-write line."""
    header = encode_header(SID, 1, "/")
    tried = rejected = 0
    for base in BASES:
        for field in [*sorted(base), "unknown"]:
            for change in [("drop", None), *(("set", value) for value in ODD_VALUES)]:
                rec = dict(base, seq=2)
                if change[0] == "drop":
                    rec.pop(field, None)
                else:
                    rec[field] = change[1]
                single = dict(rec, seq=1) if field != "seq" else rec
                middle = [dict(BASES[4], seq=1), rec, dict(BASES[6], seq=3)]
                for line in (orjson.dumps(single), orjson.dumps(middle)):
                    lines = [header, line]
                    scan = scan_lines("main", Lines(lines, None), SID, None)
                    assert (fold(lines) is not None) == canonical(scan), line
                    tried += 1
                    rejected += not canonical(scan)
    assert tried > 1500 and 0 < rejected < tried  # both verdicts were exercised


@pytest.mark.rule("JSONL-6")
@pytest.mark.rule("JSONL-7")
@settings(max_examples=600, deadline=None)
@given(session=sessions())
def test_fast_path_folds_exactly_what_the_documented_path_replays(
    session: tuple[list[bytes], list[bytes] | None],
) -> None:
    check_session(fold_main_log, session)


@pytest.mark.rule("JSONL-6")
def test_fast_path_agrees_with_the_checks_on_every_single_edit_of_every_record() -> None:
    check_single_edits(fold_main_log)


#: Planted bugs in the fast path, as (name, text in impl/jsonl/replay.py, replacement); ``None``
#: is the stage-7 check against the folded main log switched off.
PLANTED: list[tuple[str, str, str] | tuple[str, None, None]] = [
    (
        "entry timestamp type unchecked",
        'or type(type_) is not str\n                    or type(rec["timestamp"]) is not int',
        "or type(type_) is not str",
    ),
    ("retirement key count unchecked", "len(rec) != 4\n                    or ", ""),
    ("gap inside a transaction accepted", "if seq != previous + 1:", "if seq <= previous:"),
    ("messages not counted", "messages += 1", "pass"),
    ("value delete not folded", "drop_value((None, namespace, key))", "pass"),
    ("usage totals skip the main log", "yield usage_value", "yield {}"),
    ("collision with a main transaction not noted", "fold.collisions.add(spans[at])", "pass"),
    ("spans dropped by their start", "spans[span_at][1] < first", "spans[span_at][0] < first"),
    ("stage-7 check skipped", None, None),
]


def planted_fold(old: str, new: str) -> Fold:
    source = inspect.getsource(replay_module)
    assert source.count(old) == 1, f"the planted text no longer matches once: {old!r}"
    namespace: dict[str, Any] = {"__name__": "planted_replay"}
    exec(compile(source.replace(old, new), "planted_replay", "exec"), namespace)
    fold: Fold = namespace["fold_main_log"]
    return fold


@pytest.mark.parametrize("name, old, new", PLANTED, ids=[p[0] for p in PLANTED])
def test_each_planted_fast_path_bug_is_caught(
    name: str, old: str | None, new: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BRIEF "Prove the checks can fail": the two checks above catch each planted bug."""
    fold: Fold
    if old is None or new is None:
        fold = fold_main_log
        monkeypatch.setattr(load_module, "_check_against_folded", lambda load, folded: None)
    else:
        fold = planted_fold(old, new)
        monkeypatch.setattr(load_module, "fold_main_log", fold)

    @settings(max_examples=600, deadline=None, derandomize=True, database=None)
    @given(session=sessions())
    def sessions_agree(session: tuple[list[bytes], list[bytes] | None]) -> None:
        check_session(fold, session)

    with pytest.raises(AssertionError):
        check_single_edits(fold)
        sessions_agree()


@pytest.mark.rule("JSONL-7")
def test_a_sidecar_seq_inside_a_folded_main_transaction_is_reported_as_documented() -> None:
    """The fast path's stage-7 check finds a collision with a main transaction's *middle* seq
    (neither its first nor its last), and the documented path names it."""
    records = [dict(BASES[4], seq=1), dict(BASES[4], seq=2), dict(BASES[4], seq=3)]
    main = [encode_header(SID, 1, "/"), orjson.dumps(records)]
    side = [
        encode_scope_header(SID, SCOPE),
        orjson.dumps(
            {"kind": "value", "op": "set", "seq": 2, "namespace": "n", "key": "k",
             "value": 1, "scopeId": SCOPE}
        ),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as root:
        load = load_session(OsFileSystem(), write_session(root, main, side), SID, fold=True)
    assert load.folded is None
    [problem] = load.errors
    assert problem.line == 2
    assert problem.message.startswith(
        f"seq 2 is held by both {problem.path}:2 and {load.main.path}:2: "
    )
    assert "(JSONL-27)" in problem.message  # a main/sidecar collision names the hazard


@pytest.mark.rule("JSONL-7")
def test_a_clean_session_takes_the_fast_path_and_reads_back_every_record() -> None:
    """Entries, usage rows and values stored as their lines build the same records as the
    documented path, including a later record of the same key inside one transaction."""
    header = encode_header(SID, 1, "/")
    line = orjson.dumps(
        [
            dict(BASES[0], seq=1),
            dict(BASES[4], seq=2, value="first"),
            dict(BASES[0], seq=3, role="assistant"),  # the same entry id again: this one wins
            dict(BASES[4], seq=4, value="second"),
            dict(BASES[2], seq=5),
        ]
    )
    with tempfile.TemporaryDirectory() as root:
        path = write_session(root, [header, line], None)
        fast = load_session(OsFileSystem(), path, SID, fold=True)
        documented = load_session(OsFileSystem(), path, SID)
    assert fast.folded is not None
    fast_state, documented_state = replay(fast), replay(documented)
    assert fast_state.entries["e1"] == documented_state.entries["e1"]
    assert orjson.loads(fast_state.entries["e1"].payload_json) == {"role": "assistant"}
    assert fast_state.values[(None, "n", "k")].value_json == b'"second"'
    assert snapshot(fast_state) == snapshot(documented_state)


def complete(cost: dict[str, Any] | None = None, **tokens: Any) -> dict[str, Any]:
    """A usage value with every field STATS-4 requires, then ``tokens`` and ``cost`` over it."""
    value = usage_value()
    value.update(tokens)
    if cost is not None:
        value["cost"] = {**value["cost"], **cost}
    return value


def missing(field: str) -> dict[str, Any]:
    value = usage_value()
    del value[field]
    return value


BAD_USAGE = [
    (complete(input="x"), "usage.input must be an int (got 'x')"),
    (complete(output=True), "usage.output must be an int (got True)"),
    (complete(totalTokens=1.5), "usage.totalTokens must be an int (got 1.5)"),
    (complete(cacheRead=None), "usage.cacheRead must be an int (got None)"),
    (complete(cost=None) | {"cost": None}, "usage.cost must be a dict (got None)"),
    (complete() | {"cost": [1]}, "usage.cost must be a dict (got [1])"),
    (complete(cost={"total": "1"}), "usage.cost.total must be a number (got '1')"),
    (complete(cost={"input": False}), "usage.cost.input must be a number (got False)"),
    ({}, "usage.cacheRead is missing (STATS-4)"),
    (missing("totalTokens"), "usage.totalTokens is missing (STATS-4)"),
    (missing("cost"), "usage.cost is missing (STATS-4)"),
    (complete() | {"cost": {"total": 0.5}}, "usage.cost.cacheRead is missing (STATS-4)"),
]
GOOD_USAGE = [
    (complete(), (0, 0.0)),
    (complete(input=3, cost={"total": 0.5}), (3, 0.5)),
    (complete(input=3, cost={"total": 2}) | {"note": "unknown keys are ignored"}, (3, 2.0)),
    (complete(input=3, cost={"total": 2, "extra": "x"}), (3, 2.0)),
]


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize("value, reason", BAD_USAGE, ids=[r for _, r in BAD_USAGE])
def test_a_usage_value_no_writer_could_make_fails_open_as_corrupt(
    value: dict[str, Any], reason: str, tmp_path: Any
) -> None:
    """``insert_usage`` admits int token counts and a cost dict of numbers only, so a file
    holding anything else is corrupt: open names the line (it used to fail with a bare
    ``TypeError``, or sum a bool), changes no byte, and the inspector agrees."""
    from scopecheck.impl.jsonl import JsonlRepository
    from scopecheck.models.errors import CorruptError
    from scopecheck.tools.inspect_jsonl import inspect_session

    rec = {"kind": "usage", "id": "u1", "usage": value, "adjustment": False, "seq": 1,
           "timestamp": 5}  # fmt: skip
    path = write_session(str(tmp_path), [encode_header(SID, 1, "/"), orjson.dumps(rec)], None)
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(CorruptError) as caught:
        JsonlRepository(str(tmp_path), cwd="/").open(SID)
    assert caught.value.code == "corrupt"
    assert caught.value.details["line"] == 2
    assert f"usage record: {reason}" in str(caught.value)
    assert pathlib.Path(path).read_bytes() == before
    assert inspect_session(path)["open"].startswith("fails: ")


@pytest.mark.rule("JSONL-6")
@pytest.mark.parametrize("value, totals", GOOD_USAGE, ids=[str(v) for v, _ in GOOD_USAGE])
def test_a_usage_value_a_writer_can_make_opens_with_its_totals(
    value: dict[str, Any], totals: tuple[int, float], tmp_path: Any
) -> None:
    from scopecheck.impl.jsonl import JsonlRepository

    rec = {"kind": "usage", "id": "u1", "usage": value, "adjustment": False, "seq": 1,
           "timestamp": 5}  # fmt: skip
    write_session(str(tmp_path), [encode_header(SID, 1, "/"), orjson.dumps(rec)], None)
    storage = JsonlRepository(str(tmp_path), cwd="/").open(SID)
    usage = storage.stats().usage
    assert (usage.input, usage.cost_total) == totals
    assert type(usage.cost_total) is type(totals[1])
    storage.close()


def sidecar_lines(scope: str, spans: list[tuple[int, int]]) -> list[bytes]:
    """A sidecar of ``scope`` holding one transaction of appends per ``(first, last)`` span."""
    lines = [encode_scope_header(SID, scope)]
    for first, last in spans:
        appends = [
            {"kind": "list", "op": "append", "seq": n, "namespace": "n", "key": "k",
             "value": n, "scopeId": scope}
            for n in range(first, last + 1)
        ]  # fmt: skip
        lines.append(orjson.dumps(appends[0] if len(appends) == 1 else appends))
    return lines


@pytest.mark.rule("JSONL-7")
@pytest.mark.parametrize(
    "other",
    [(3, 3), (3, 4), (2, 2), (4, 4), (5, 6)],
    ids=["the last seq", "the last seq, then more", "the first seq", "just after", "later"],
)
def test_two_sidecars_sharing_a_seq_are_corrupt_as_documented(other: tuple[int, int]) -> None:
    """Stage 7 between two sidecars when the main log was folded: a transaction of one that
    starts at the *last* seq of a transaction of the other repeats that seq.  The fast path
    decides whether (the generated Sessions above have a single sidecar), the documented path
    says where; both plans agree."""
    main = [encode_header(SID, 1, "/"), orjson.dumps(dict(BASES[4], seq=1))]
    with tempfile.TemporaryDirectory() as root:
        path = write_session(root, main, sidecar_lines(SCOPE, [(2, 3)]))
        with open(session_paths.sidecar_path(path, "op-2"), "wb") as handle:
            handle.write(b"\n".join(sidecar_lines("op-2", [other])) + b"\n")
        fast = load_session(OsFileSystem(), path, SID, fold=True)
        documented = load_session(OsFileSystem(), path, SID)
    assert plan_facts(fast) == plan_facts(documented)
    assert bool(documented.errors) == (other[0] <= 3)
    assert (fast.folded is None) == bool(documented.errors)


@pytest.mark.rule("JSONL-7")
@pytest.mark.parametrize("fast_path", [True, False], ids=["fast path", "documented path"])
def test_building_every_record_decodes_each_line_once(
    fast_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``values()`` / ``items()`` of a resident map build every record still held as its line
    (the fast path) or as its replay operation (the documented path) decoding each line once
    for all the records it holds, not once per record (the point of holding lines, JSONL-7)."""
    from scopecheck.impl.jsonl import codec
    from scopecheck.impl.jsonl import lazy as lazy_module

    line = orjson.dumps(
        [dict(BASES[4], seq=n, key=f"k{n}", value=n) for n in range(1, 4)]
        + [dict(BASES[1], seq=4, id="e1"), dict(BASES[1], seq=5, id="e2")]
    )
    with tempfile.TemporaryDirectory() as root:
        path = write_session(root, [encode_header(SID, 1, "/"), line], None)
        load = load_session(OsFileSystem(), path, SID, fold=fast_path)
    assert (load.folded is not None) == fast_path
    state = replay(load)
    decoded: list[bytes] = []

    class CountingOrjson:
        dumps = staticmethod(orjson.dumps)
        Fragment = orjson.Fragment

        @staticmethod
        def loads(data: bytes) -> Any:
            decoded.append(data)
            return orjson.loads(data)

    monkeypatch.setattr(lazy_module, "orjson", CountingOrjson)
    monkeypatch.setattr(codec, "orjson", CountingOrjson)
    assert sorted(v.value_json for v in state.values.values()) == [b"1", b"2", b"3"]
    assert decoded == [line]
    assert sorted(key for key, _ in state.entries.items()) == ["e1", "e2"]
    assert decoded == [line, line]
