"""What a HypoFuzz worker saves, the pytest plugin replays first (FLEET-3).

``scopecheck.fuzz_targets_for(SPEC)`` and ``pytest --scopecheck-backend=SPEC`` run the same
storage machine class for the same spec, so a failure saved in the example database
(``$SCOPECHECK_DB``) by one is found under the other's database key.  The test saves a failure
of the README's broken backend the way a worker does: the targets file ``scopecheck hypofuzz
--write`` writes, run under plain pytest with ``$SCOPECHECK_DB`` set -- the Hypothesis test
HypoFuzz drives, saving under the same key.  Then the plugin with ``--scopecheck-replay``,
which generates nothing, fails with that very example (the same ``@reproduce_failure`` choice
sequence); over an empty database the same run has nothing to run and passes, so the failure
came from the database.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scopecheck.cli.hypofuzz import TARGETS

#: A user's backend with a bug the storage machine finds (the README's broken example).
SPEC = "scopecheck.examples.broken_backend:make_backend"
#: How a user runs the machine through the plugin (README), replaying only.
#: Appended to the targets file: the run stops at the first failure and saves it as found, as a
#: HypoFuzz worker saves a failure when it finds it (shrinking it would only make the test
#: slower; the database key is the machine's, whatever the settings).
AS_FOUND = """
from hypothesis import Phase, settings

for _name, _test in list(globals().items()):
    if _name.startswith("Test"):
        _test.settings = settings(settings.default, phases=[Phase.explicit, Phase.generate])
"""
PLUGIN = [
    "-p", "scopecheck.pytest_plugin", f"--scopecheck-backend={SPEC}", "--scopecheck-replay",
    "--pyargs", "scopecheck.conformance.test_machine",
]  # fmt: skip


def _pytest(args: list[str], cwd: Path, database: Path) -> tuple[int, str]:
    """``python -m pytest ARGS`` in ``cwd`` with ``$SCOPECHECK_DB=database`` and scopecheck's
    ``ci`` profile (120 examples to find the bug in; the run stops at the first failure)."""
    env = {**os.environ, "SCOPECHECK_DB": str(database), "SCOPECHECK_PROFILE": "ci"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _blobs(output: str) -> list[str]:
    """The distinct ``@reproduce_failure`` choice sequences Hypothesis printed (``print_blob``),
    in order: pytest prints a failure's message twice when ``$CI`` is set (in the traceback
    and, untruncated, in the short summary)."""
    found = re.findall(r"@reproduce_failure\('[^']+', (b'[^']*')\)", output)
    return list(dict.fromkeys(found))


@pytest.mark.slow
@pytest.mark.rule("FLEET-3")
def test_the_plugin_replays_first_the_failure_the_fuzz_targets_saved(tmp_path: Path) -> None:
    targets = TARGETS.format(spec=SPEC, name="targets.py", workers=1)
    (tmp_path / "targets.py").write_text(targets + AS_FOUND)
    database = tmp_path / "db"
    status, found = _pytest(["targets.py"], tmp_path, database)
    assert status == 1 and "MismatchError" in found, found[-3000:]
    saved = _blobs(found)
    assert len(saved) == 1, found[-3000:]
    assert any(path.is_file() for path in database.rglob("*")), "nothing saved in the database"

    status, replayed = _pytest(PLUGIN, tmp_path, database)
    assert status == 1 and "MismatchError" in replayed, replayed[-3000:]
    assert _blobs(replayed) == saved, replayed[-3000:]
    assert re.search(r"^  machine: +FAILED ", replayed, re.M), replayed[-3000:]

    status, empty = _pytest(PLUGIN, tmp_path, tmp_path / "empty")
    assert status == 0 and "MismatchError" not in empty, empty[-3000:]
    assert re.search(r"^  machine: +skipped ", empty, re.M), empty[-3000:]
