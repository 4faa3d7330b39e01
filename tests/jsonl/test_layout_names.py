"""File names that are not canonical encodings never break listing (JSONL-13, CHECK-1).

Regression: ``decode_main_name`` let ``unquote(errors="strict")`` raise ``UnicodeDecodeError``
for a foreign file whose escapes are not UTF-8 (``%FF.jsonl``), so one stray file in the root
made ``list()`` fail.  Found while writing the CrossHair contract of ``decode_main_name``
(CrossHair itself does not reach it: the failing input needs ``unquote`` internals it realises).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scopecheck.impl.jsonl import session_paths
from tests.jsonl.conftest import RepoFactory


@pytest.mark.rule("JSONL-13", "CHECK-1")
@pytest.mark.parametrize("stem", ["%FF", "%ED%A0%80", "%C3", "a%80b"])
def test_names_whose_escapes_are_not_utf8_are_foreign_files(stem: str) -> None:
    """A main-log or sidecar name whose escapes decode to no well-formed text names nothing."""
    assert session_paths.decode_main_name(stem + session_paths.MAIN_SUFFIX) is None
    assert (
        session_paths.decode_sidecar_name(
            session_paths.SIDECAR_PREFIX + stem + session_paths.SIDECAR_SUFFIX
        )
        is None
    )


@pytest.mark.rule("JSONL-13", "CHECK-1")
def test_list_ignores_a_foreign_file_with_a_non_utf8_escape(
    make_repo: RepoFactory, root: str
) -> None:
    """``list()`` returns the real Session and skips ``%FF.jsonl`` instead of raising."""
    repo = make_repo()
    repo.create("s").close()
    (Path(root) / "%FF.jsonl").write_bytes(b"")
    assert repo.list() == ["s"]
