"""The shared conformance suite: one test body, every backend (000 §9.2 "run identically").

Collected from this repository's test run for the bundled backends, and from an installed
package for a third-party backend::

    pytest --scopecheck-backend=my_backend.py:make_backend --pyargs scopecheck.conformance
"""
