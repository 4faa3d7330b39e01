"""What a HypoFuzz worker saves, the pytest plugin and ``validate`` replay first (FLEET-3).

``scopecheck.fuzz_targets_for(SPEC)`` and ``pytest --scopecheck-backend=SPEC`` run the same
storage machine, fork machine and crash target for the same spec, so a failure saved in the
example database (``$SCOPECHECK_DB``) by one is found under the other's database key.  Each
test saves a failure the way a worker does: the targets file ``scopecheck hypofuzz --write``
writes, run under plain pytest with ``$SCOPECHECK_DB`` set -- the Hypothesis tests HypoFuzz
drives, saving under the same keys.  Then the plugin with ``--scopecheck-replay``, which
generates nothing and runs no seeded workload, fails with that very example (the same
``@reproduce_failure`` choice sequence, or the same workload seed); over an empty database the
same run has nothing to run, reports the phase skipped and passes, so the failure came from the
database.

* the storage machine: the README's broken example;
* the fork machine: a user's JSONL repository whose ``fork()`` writes one value more (the
  storage machine, which never forks, passes it);
* the crash target: the broken file example, whose saved workload seed ``validate`` replays
  too (``replayed_seeds``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from scopecheck.cli.hypofuzz import TARGETS

#: A user's backend with a bug the storage machine finds (the README's broken example).
SPEC = "scopecheck.examples.broken_backend:make_backend"
#: A user's backend with a bug crash exploration finds.
CRASHING = "scopecheck.examples.broken_file_backend:make_backend"
#: A user's backend with a bug only the fork machine finds.
FORKY = '''"""A JSONL repository whose fork() leaves a mark the source never had."""

import scopecheck


class MarkingFork(scopecheck.JsonlRepository):
    def fork(self, source_id, options):
        dest = super().fork(source_id, options)
        storage = self.open(dest)
        storage.commit([scopecheck.set_value(scopecheck.value("app", "forked"), True)])
        storage.close()
        return dest


def make_backend(clock, *, root):
    return MarkingFork(root, clock=clock)
'''
#: Appended to the targets file: the run stops at the first failure and saves it as found, as a
#: HypoFuzz worker saves a failure when it finds it (shrinking it would only make the test
#: slower; the database key is the test's, whatever the settings).
AS_FOUND = """
from hypothesis import Phase, settings

_AS_FOUND = settings(
    settings.default, phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False
)
for _name, _test in list(globals().items()):
    if _name.startswith("Test"):
        _test.settings = _AS_FOUND
    elif _name.startswith("test_"):
        globals()[_name] = _AS_FOUND(_test)
"""


def _plugin(spec: str, module: str) -> list[str]:
    """How a user replays a fleet's findings for ``spec`` through the plugin (docs/ci.md)."""
    return [
        "-p", "scopecheck.pytest_plugin", f"--scopecheck-backend={spec}", "--scopecheck-replay",
        "--pyargs", f"scopecheck.conformance.{module}",
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


def _save(tmp_path: Path, spec: str, select: str) -> tuple[int, str]:
    """Run the targets file of ``spec`` as a worker would, its tests matching ``select``
    alone, saving what fails in ``tmp_path/db``."""
    targets = TARGETS.format(spec=spec, name="targets.py", workers=1)
    (tmp_path / "targets.py").write_text(targets + AS_FOUND)
    found = _pytest(["targets.py", "-k", select], tmp_path, tmp_path / "db")
    assert any(path.is_file() for path in (tmp_path / "db").rglob("*")), "nothing saved"
    return found


def _blobs(output: str) -> list[str]:
    """The distinct ``@reproduce_failure`` choice sequences Hypothesis printed (``print_blob``),
    in order: pytest prints a failure's message twice when ``$CI`` is set (in the traceback
    and, untruncated, in the short summary)."""
    found = re.findall(r"@reproduce_failure\('[^']+', (b'[^']*')\)", output)
    return list(dict.fromkeys(found))


@pytest.mark.slow
@pytest.mark.rule("FLEET-3", "FORK-2")
@pytest.mark.parametrize(
    ("target", "module", "phase"),
    [("Machine", "test_machine", "machine"), ("ForkMachine", "test_fork_machine", "forks")],
    ids=["storage machine", "fork machine"],
)
def test_the_plugin_replays_first_the_failure_a_machine_target_saved(
    tmp_path: Path, target: str, module: str, phase: str
) -> None:
    (tmp_path / "forky.py").write_text(FORKY)
    spec = SPEC if phase == "machine" else str(tmp_path / "forky.py") + ":make_backend"
    status, found = _save(tmp_path, spec, target)
    assert status == 1 and "MismatchError" in found, found[-3000:]
    saved = _blobs(found)
    assert len(saved) == 1, found[-3000:]

    replay = _plugin(spec, module)
    status, replayed = _pytest(replay, tmp_path, tmp_path / "db")
    assert status == 1 and "MismatchError" in replayed, replayed[-3000:]
    assert _blobs(replayed) == saved, replayed[-3000:]
    assert re.search(rf"^  {phase}: +FAILED ", replayed, re.M), replayed[-3000:]

    status, empty = _pytest(replay, tmp_path, tmp_path / "empty")
    assert status == 0 and "MismatchError" not in empty, empty[-3000:]
    assert re.search(rf"^  {phase}: +skipped ", empty, re.M), empty[-3000:]


@pytest.mark.slow
@pytest.mark.rule("FLEET-3", "CRASH-FS-8")
def test_the_plugin_and_validate_replay_the_crash_seed_the_target_saved(tmp_path: Path) -> None:
    status, found = _save(tmp_path, CRASHING, "crash_exploration")
    assert status == 1 and "crash failure(s); the first" in found, found[-3000:]
    seeds = set(re.findall(r"seed=(\d+)", found))
    assert len(seeds) == 1, found[-3000:]
    (seed,) = seeds

    replay = _plugin(CRASHING, "test_crash")
    status, replayed = _pytest(replay, tmp_path, tmp_path / "db")
    assert status == 1 and f"workload seed {seed}: " in replayed, replayed[-3000:]
    assert re.search(r"^  crash exploration: +FAILED ", replayed, re.M), replayed[-3000:]
    assert "4 skipped" in replayed, replayed[-3000:]  # the seeded workloads

    status, empty = _pytest(replay, tmp_path, tmp_path / "empty")
    assert status == 0, empty[-3000:]
    assert re.search(r"^  crash exploration: +skipped ", empty, re.M), empty[-3000:]

    verdicts = {}
    for name in ("db", "empty"):
        done = subprocess.run(
            [sys.executable, "-m", "scopecheck", "validate", CRASHING, "--examples", "1",
             "--json", "--failures-dir", str(tmp_path / f"failures-{name}")],
            cwd=tmp_path, env={**os.environ, "SCOPECHECK_DB": str(tmp_path / name)},
            capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr.decode()[-3000:]
        verdicts[name] = orjson.loads(done.stdout)["phases"]["crash exploration"]
    assert verdicts["db"]["replayed_seeds"] == 1, verdicts["db"]
    assert "1 saved workload seed(s) replayed first (1 still failing)" in verdicts["db"]["detail"]
    assert "replayed_seeds" not in verdicts["empty"], verdicts["empty"]
