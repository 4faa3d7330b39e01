"""Test-wide setup: the Hypothesis profile comes from $SCOPECHECK_PROFILE (default ``dev``)."""

from scopecheck.profiles import load_profile

load_profile()
