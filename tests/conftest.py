"""Test-wide setup: the Hypothesis profile comes from $SCOPECHECK_PROFILE (default ``dev``)."""

from scopecheck.run.profiles import load_profile

load_profile()
