"""``scopecheck inspect`` reports what open would see and never modifies a byte (JSONL-21)."""

from __future__ import annotations

import os

import orjson
import pytest

from scopecheck.models.addresses import value, value_list
from scopecheck.models.scope import ephemeral_scope
from scopecheck.models.writes import append_list, insert_entry, retire_scope, set_value
from scopecheck.tools.inspect_jsonl import inspect_command, inspect_session, render
from tests.jsonl.conftest import RepoFactory, tree, unlink_fails

A = ephemeral_scope("op-A")
B = ephemeral_scope("op/B")


def build(make_repo: RepoFactory) -> None:
    """Main log, a live sidecar (B) and a retired one that survived its unlink (A)."""
    storage = make_repo(fault=unlink_fails).create("s")
    storage.commit([insert_entry("e", None, "message")])
    storage.commit([append_list(value_list("f", "x", A), 1), set_value(value("v", "k", A), 2)])
    storage.commit([set_value(value("v", "k", B), 3)])
    storage.commit([retire_scope(A), set_value(value("pi.op.state", "A"), None)])
    storage.close()


def damage(root: str, how: str) -> None:
    main = os.path.join(root, "s.jsonl")
    side = os.path.join(root, "s.jsonl.scopes", "scope-op%2FB.scope")
    if how == "torn-main":
        with open(main, "ab") as handle:
            handle.write(b'{"kind":"val')
    elif how == "torn-sidecar":
        with open(side, "ab") as handle:
            handle.write(b'{"kind":"value","op":"se')
    elif how == "corrupt-main":
        with open(main, "ab") as handle:
            handle.write(b'{"kind":"value"}\n')
    elif how == "corrupt-sidecar":
        with open(side, "ab") as handle:
            handle.write(b"not json\n")
    elif how == "temp-file":
        with open(side + ".tmp", "wb") as handle:
            handle.write(b"{")


@pytest.mark.rule("JSONL-21")
@pytest.mark.parametrize(
    "how", ["clean", "torn-main", "torn-sidecar", "corrupt-main", "corrupt-sidecar", "temp-file"]
)
def test_inspect_never_modifies_anything(
    make_repo: RepoFactory, root: str, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes of every file are identical before and after inspect, report, render and CLI."""
    build(make_repo)
    damage(root, how)
    before = tree(root)
    report = inspect_session(os.path.join(root, "s.jsonl"))
    render(report)
    code = inspect_command(root, as_json=True)
    assert orjson.loads(capsys.readouterr().out)["session_id"] == "s"
    assert code == (1 if how.startswith("corrupt") else 0)
    assert tree(root) == before


@pytest.mark.rule("JSONL-21")
def test_inspect_reports_boundaries_live_and_retired_records_and_high_water(
    make_repo: RepoFactory, root: str
) -> None:
    """The report names each file's transactions, the boundary and live/retired status."""
    build(make_repo)
    report = inspect_session(os.path.join(root, "s.jsonl.scopes"))
    assert report["header"]["id"] == "s"
    assert report["retirements"] == {"op-A": [5]} and report["boundaries"] == {"op-A": 5}
    assert report["high_water"] == 6 and report["next_seq"] == 7
    files = {f.get("scope_id"): f for f in report["files"]}
    assert [tx["seqs"] for tx in files[None]["transactions"]] == [[1], [5, 6]]
    assert files["op-A"]["transactions"] == [
        {"line": 2, "seqs": [2, 3], "writes": ["list.append", "value.set"], "status": "retired"}
    ]
    assert files["op-A"]["live"] is False and files["op/B"]["live"] is True
    assert files["op/B"]["transactions"][0]["status"] == "live"
    assert report["live_scopes"] == ["op/B"]
    assert report["state"] == {
        "entries": 1,
        "usage_rows": 0,
        "values": 2,
        "lists": 0,
        "list_elements": 0,
        "message_count": 1,
        "scopes_with_state": ["op/B"],
    }
    assert report["open"] == "succeeds"
    assert any("remove" in r and "scope-op-A.scope" in r for r in report["repairs_on_open"])
    text = render(report)
    assert "boundary 5" in text and "retired" in text and "nothing live" in text


@pytest.mark.rule("JSONL-21", "JSONL-6", "JSONL-18")
def test_inspect_reports_torn_tails_and_corruption_with_file_and_line(
    make_repo: RepoFactory, root: str
) -> None:
    """Torn tails and corrupt lines appear with their file and 1-based line."""
    build(make_repo)
    damage(root, "torn-sidecar")
    damage(root, "torn-main")
    report = inspect_session(os.path.join(root, "s.jsonl"))
    torn = {(p["file"].rsplit("/", 1)[-1], p["line"]) for p in report["problems"]}
    assert torn == {("s.jsonl", 4), ("scope-op%2FB.scope", 3)}
    assert report["open"] == "succeeds"
    assert any("republish" in r for r in report["repairs_on_open"])
    with open(os.path.join(root, "s.jsonl"), "rb+") as handle:
        content = handle.read()
        handle.seek(0)
        handle.write(content.replace(b'"kind":"entry"', b'"kind":"entrx"'))
    report = inspect_session(os.path.join(root, "s.jsonl"))
    assert report["open"].startswith("fails: corrupt")
    assert {"kind": "corrupt", "file": os.path.join(root, "s.jsonl"), "line": 2} == {
        k: v for k, v in report["problems"][-1].items() if k != "message"
    }
    assert "CORRUPT" in render(report)


def test_inspect_command_rejects_paths_that_are_not_sessions(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory without a session, or a foreign file, exits 2 with a message."""
    assert inspect_command(str(tmp_path), as_json=False) == 2
    assert "0 session files" in capsys.readouterr().err
