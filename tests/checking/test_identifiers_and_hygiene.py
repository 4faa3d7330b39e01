"""The identifier pairs the machine draws are what they claim (CHECK-7), and the disk checks
find exactly what is left behind (HYGIENE-1..3; what a store's own files are, HYGIENE-4, is
``tests/checking/test_leftovers.py``).  That the machines catch planted bugs through
them is ``tests/test_mutants.py`` (``memory-lossy-scope-encoding``,
``jsonl-retire-prefix-siblings``, ``jsonl-delete-leaves-sidecars``, ``jsonl-publish-leaves-temp``)
and ``tests/fork/test_fork_mutants.py`` (``jsonl-fork-leaves-lock``)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

import scopecheck.machines.strategies as sx
from scopecheck.machines import hygiene
from scopecheck.models.errors import ScopecheckError
from scopecheck.models.scope import MAX_ENCODED_SCOPE_ID, encode_uri_component, ephemeral_scope
from scopecheck.planted import all_mutants


@pytest.mark.rule("CHECK-7")
def test_related_pairs_are_valid_distinct_and_related() -> None:
    kinds = set()
    for first, second in sx.RELATED_IDS:
        assert first != second
        assert encode_uri_component(first) != encode_uri_component(second)
        for ident in (first, second):
            assert len(encode_uri_component(ident)) <= MAX_ENCODED_SCOPE_ID
            ephemeral_scope(ident)  # valid
        if second.startswith(first) or first.startswith(second):
            kinds.add("prefix")
        if "%" in first + second:
            kinds.add("percent")
        if unicodedata.normalize("NFC", first) == unicodedata.normalize("NFC", second):
            kinds.add("normalisation")
        if first.lower() == second.lower():
            kinds.add("case")
        if len(encode_uri_component(first)) == MAX_ENCODED_SCOPE_ID:
            kinds.add("at-limit")
    assert kinds == {"prefix", "percent", "normalisation", "case", "at-limit"}
    assert sx.RELATED_IDS[0] == ("op", "op1")  # the simplest pair first: shrinking lands on it
    for ident in sx.PAST_LIMIT:
        assert len(encode_uri_component(ident)) > MAX_ENCODED_SCOPE_ID
        with pytest.raises(ScopecheckError) as info:
            ephemeral_scope(ident)
        assert info.value.code == "invalid_scope"


@pytest.mark.rule("CHECK-7", "HYGIENE-1", "HYGIENE-2", "HYGIENE-3", "HYGIENE-4")
def test_each_new_check_has_planted_bugs_in_the_catalogue() -> None:
    names = {m.name for m in all_mutants()}
    assert {
        "memory-lossy-scope-encoding",
        "jsonl-retire-prefix-siblings",
        "jsonl-publish-leaves-temp",
        "jsonl-delete-leaves-sidecars",
        "jsonl-fork-leaves-lock",
        "jsonl-opening-keeps-scratch",
    } <= names


@pytest.mark.rule("HYGIENE-1")
def test_temp_files_are_named_as_documented(tmp_path: Path) -> None:
    for name in ("s.jsonl.tmp", "x.tmp.1", ".tmpabc", "ok.jsonl", "tmp", "s.jsonl.scopes"):
        (tmp_path / name).write_bytes(b"")
    assert hygiene.temp_files(hygiene.tree(str(tmp_path))) == [".tmpabc", "s.jsonl.tmp", "x.tmp.1"]


@pytest.mark.rule("HYGIENE-2")
def test_leftovers_are_the_deleted_sessions_paths_and_their_extensions(tmp_path: Path) -> None:
    root = str(tmp_path)
    before = hygiene.tree(root)
    (tmp_path / "a%2Fb.jsonl").write_bytes(b"")
    (tmp_path / "index.db").write_bytes(b"")  # shared, does not name the Session
    paths = hygiene.session_paths(before, hygiene.tree(root), "a/b")
    assert paths == {"a%2Fb.jsonl"}
    (tmp_path / "a%2Fb.jsonl.scopes").mkdir()
    (tmp_path / "a%2Fb.jsonl.scopes" / "scope-op.scope").write_bytes(b"")
    (tmp_path / "a%252Fb.jsonl").write_bytes(b"")  # the look-alike Session "a%2Fb"
    (tmp_path / "a%2Fb.jsonl").unlink()
    assert hygiene.leftovers(paths, hygiene.tree(root)) == [
        "a%2Fb.jsonl.scopes",
        "a%2Fb.jsonl.scopes/scope-op.scope",
    ]


@pytest.mark.rule("HYGIENE-3")
def test_strays_are_what_a_fork_added_beside_its_destination(tmp_path: Path) -> None:
    root = str(tmp_path)
    (tmp_path / "src.jsonl").write_bytes(b"")
    before = hygiene.tree(root)
    (tmp_path / "--cwd--").mkdir()
    (tmp_path / "--cwd--" / "t_dest.jsonl").write_bytes(b"")
    (tmp_path / "dest.jsonl.scopes").mkdir()
    (tmp_path / "dest.jsonl.scopes" / "scope-op.scope").write_bytes(b"")
    assert hygiene.strays(before, hygiene.tree(root), "dest") == []
    (tmp_path / "src.jsonl.lock").write_bytes(b"")
    assert hygiene.strays(before, hygiene.tree(root), "dest") == ["src.jsonl.lock"]


def test_a_world_without_a_real_directory_has_nothing_to_check() -> None:
    from scopecheck.backends.registry import JsonlWorld, MemoryWorld

    assert hygiene.disk_root(MemoryWorld(lambda: 0)) is None
    fake = JsonlWorld(lambda: 0, fake=True)
    assert hygiene.disk_root(fake) is None
    real = JsonlWorld(lambda: 0)
    try:
        assert hygiene.disk_root(real) == real.root
    finally:
        real.cleanup()
