"""Docs that name files name files that exist: every backticked path into the project's
folders in the README, docs/ and spec/README.md (SPEC-1 keeps the rule files' own table)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("spec", "models", "impl", "crashsim", "scopecheck", "examples", "tests", "docs")
PATH = re.compile(r"`((?:" + "|".join(FOLDERS) + r")/[A-Za-z0-9_./-]+)`")
DOCS = [ROOT / "README.md", ROOT / "spec" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.rule("SPEC-1")
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    named = PATH.findall(doc.read_text(encoding="utf-8"))
    missing = sorted({p for p in named if not (ROOT / p.rstrip("/")).exists()})
    assert missing == [], f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"
