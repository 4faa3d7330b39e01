"""scopecheck's Hypothesis profiles: namespaced, and independent of the profile in force."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
from scopecheck.run.profiles import get_profile
dev, ci, mutants = get_profile("dev"), get_profile("ci"), get_profile("mutants")
print(dev.derandomize, ci.derandomize, dev.database is not None, mutants.derandomize)
"""


@pytest.mark.rule("INSTALL-2")
def test_profiles_are_the_same_whatever_hypothesis_loaded_first() -> None:
    """With ``CI`` set Hypothesis loads its own derandomised ``ci`` profile at import; fuzzing
    profiles built on top of it would replay the same examples every round."""
    env = {**os.environ, "CI": "true"}
    env.pop("SCOPECHECK_PROFILE", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stdout + out.stderr


@pytest.mark.rule("INSTALL-2")
def test_short_and_namespaced_names_name_the_same_profile() -> None:
    from scopecheck.run.profiles import get_profile, short_name

    assert get_profile("ci").max_examples == get_profile("scopecheck-ci").max_examples == 120
    assert short_name("scopecheck-nightly") == "nightly"
    with pytest.raises(ValueError, match="choose one of"):
        short_name("weekly")
