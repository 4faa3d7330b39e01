"""The repository's root conftest: the suite-wide leak check (``tests/leak_guard.py``) guards
every test the README's command collects, ``tests/`` and ``scopecheck/conformance/`` alike."""

pytest_plugins = ["tests.leak_guard"]
