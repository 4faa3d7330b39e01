"""What installing scopecheck asks of a user's environment (INSTALL-4)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.rule("INSTALL-4")
def test_runtime_dependencies_are_ranges_and_cover_validate() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    runtime = project["dependencies"]
    pinned = [spec for spec in runtime if "==" in spec or "===" in spec]
    assert pinned == [], f"exact pins force a user's whole project onto them: {pinned}"
    names = {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].lower() for spec in runtime}
    assert {"hypothesis", "pytest", "attrs", "orjson", "pyfakefs", "apsw"} <= names
    assert any("==" in spec for spec in project["optional-dependencies"]["hypofuzz"])
