"""A storage team's own project, for checking that installing scopecheck changes nothing in it.

It has what such projects have and what once broke: a top-level ``models`` package of its own
(``models/records.py`` beside scopecheck's names), its own Hypothesis profile loaded in its
conftest (``max_examples=1000``), ``--strict-markers`` in its pytest options, and its own
property test.  Its tests assert that all of that is still theirs while scopecheck is installed
-- and, in the plugin form, while scopecheck's conformance suite runs in the same session.

``python tests/packaging/user_project.py DEST`` writes it to ``DEST`` (``.ci/run`` does this
outside the checkout, next to a wheel installed in a fresh venv).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

FILES = {
    "pyproject.toml": """
        [project]
        name = "user-storage"
        version = "1.0"

        [tool.pytest.ini_options]
        addopts = "--strict-markers -p no:cacheprovider"
        testpaths = ["tests"]
        pythonpath = ["."]
        markers = ["storage: the project's own marker"]
    """,
    "models/__init__.py": '"""The user\'s own models package."""\n',
    "models/records.py": """
        OWNER = "user-storage"


        class Committed:
            \"\"\"The user's record type, same name as one of scopecheck's.\"\"\"
    """,
    "models/errors.py": 'OWNER = "user-storage"\n',
    "tests/conftest.py": """
        from hypothesis import settings

        settings.register_profile("mine", max_examples=1000, deadline=None)
        settings.load_profile("mine")
    """,
    "tests/test_own.py": """
        import pytest
        from hypothesis import given, settings
        from hypothesis import strategies as st
        from hypothesis.errors import InvalidArgument

        import models.errors
        import models.records

        RUNS = []


        def test_own_models_package_is_imported():
            assert models.records.OWNER == "user-storage"
            assert models.errors.OWNER == "user-storage"
            assert "user" in models.records.Committed.__doc__


        def test_own_profile_is_in_force():
            assert settings().max_examples == 1000
            assert settings.get_profile("mine").max_examples == 1000


        @pytest.mark.parametrize("name", ["dev", "nightly", "mutants", "mutation", "crosshair"])
        def test_no_generic_profile_name_was_registered(name):
            with pytest.raises(InvalidArgument):
                settings.get_profile(name)


        def test_hypothesis_own_ci_profile_is_not_replaced():
            assert settings.get_profile("ci").derandomize  # Hypothesis's, not a fuzzing budget


        @pytest.mark.storage
        @given(st.integers())
        def test_own_property_runs_its_own_budget(n):
            RUNS.append(n)


        def test_the_property_ran_its_own_budget():
            # 1000 asked; scopecheck's profiles would give 40 or 120
            assert len(RUNS) > 500, len(RUNS)
    """,
}


def write_user_project(dest: Path) -> Path:
    """Write the project under ``dest`` and return ``dest``."""
    for name, text in FILES.items():
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return dest


if __name__ == "__main__":
    write_user_project(Path(sys.argv[1]))
