"""The shared conformance suite: one test body, every backend (000 §9.2 "run identically").

Collected from this repository's test run for the bundled backends, and from an installed
package for a third-party backend::

    pytest --scopecheck-backend=my_backend.py:make_backend --pyargs scopecheck.conformance
"""

import pytest

# The helper modules assert on behalf of the cases: rewrite them like test modules, so a failure
# shows the compared values and their diff, not a bare AssertionError (INSTALL-7).
pytest.register_assert_rewrite("scopecheck.conformance.forks", "scopecheck.conformance.helpers")
