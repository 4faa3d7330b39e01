"""The pinned suite's JavaScript stores (examples/node/stores/, docs/findings.md): real embedded
stores from the npm registry, each as a backend process (``validate --exec``) in its default
setting and a durable one, validated with fixed work (``examples=``, one seed) and its verdict
-- passed, or failed with exactly these rules in these phases -- pinned, so a new version of a
store, or of scopecheck's checks, that changes a verdict shows here.  The versions are each
folder's ``package-lock.json``, which ``npm ci`` installs (.ci/run does).

As in tests/stores/test_store_adapters.py, a finding is the store's behaviour in that setting,
never the adapter's: the adapters share one Session layer (``examples/node/stores/sessions.js``)
that passes the machine and the conformance cases on every store.  The default run validates
one setting that passes and one that fails; the rest is ``long`` (SCOPECHECK_LONG=1).

Without node, npm or a store's installed packages the tests skip, saying which -- except under
``SCOPECHECK_REQUIRE_NODE_STORES=1`` (set by .ci/run, which installs them), where that is a
failure.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import attrs
import orjson
import pytest

from scopecheck import validate

ROOT = Path(__file__).resolve().parents[2]
STORES = ROOT / "examples" / "node" / "stores"
CRASH = "crash exploration"


@attrs.frozen
class Pinned:
    """One store in one setting and the verdict it gets (seed 1, 5 examples)."""

    store: str
    script: str
    flags: tuple[str, ...]
    outcome: str
    #: ``(phase, rule)`` of every failure, as a set: a rule may fail in several crash kinds.
    failures: frozenset[tuple[str, str]] = frozenset()
    long: bool = True

    @property
    def spec(self) -> str:
        command = ["node", str(STORES / self.store / self.script), *self.flags]
        return "exec:" + shlex.join(command)

    @property
    def name(self) -> str:
        return " ".join([f"{self.store}/{self.script}", *self.flags])


def crash(*rules: str) -> frozenset[tuple[str, str]]:
    return frozenset((CRASH, f"CRASH-FS-{n}") for n in rules)


PINNED = [
    # Appends without fsync; a torn line in a datafile of few lines is "corrupt" past NeDB's
    # default corruptAlertThreshold (10%), and the datastore refuses to load.
    Pinned("nedb", "backend.js", (), "failed", crash("1", "6", "9", "14")),
    # compactDatafileAsync after each insert: durable once acknowledged, but the torn line stays
    # fatal, and a compaction that fails leaves the insert it follows in the datafile.
    Pinned("nedb", "backend.js", ("--durable",), "failed", crash("1", "14")),
    # steno's rename without an fsync of the file or its folder.
    Pinned("lowdb", "backend.mjs", (), "failed", crash("1", "6", "9", "14"), long=False),
    # A user's fsyncing adapter: a failed fsync of the folder after the rename leaves the new
    # file, holding the commit reported failed.
    Pinned("lowdb", "backend.mjs", ("--durable",), "failed", crash("14")),
    # The same adapter putting the last acknowledged text back when the write fails.
    Pinned("lowdb", "backend.mjs", ("--careful",), "passed", long=False),
]


def missing(store: str) -> str | None:
    """Why the store's backend cannot run here, or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    lock = orjson.loads((STORES / store / "package-lock.json").read_bytes())
    for where, package in lock["packages"].items():
        if not where:
            continue
        installed = STORES / store / where / "package.json"
        if not installed.exists():
            return f"{store}: {where} is not installed (npm ci in examples/node/stores/{store})"
        if orjson.loads(installed.read_bytes())["version"] != package["version"]:
            return f"{store}: {where} is not the locked {package['version']} (npm ci)"
    return None


def require_store(store: str) -> None:
    """Skip (fail under ``SCOPECHECK_REQUIRE_NODE_STORES=1``) unless ``store`` can run."""
    reason = missing(store)
    if reason is not None:
        message = f"NODE STORE NOT INSTALLED: {reason} (.ci/run installs it)"
        if os.environ.get("SCOPECHECK_REQUIRE_NODE_STORES") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def store_ready(request: pytest.FixtureRequest) -> None:
    pinned: Pinned = request.getfixturevalue("pinned")
    require_store(pinned.store)


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-6", "PROC-1")
@pytest.mark.parametrize(
    "pinned",
    [pytest.param(p, id=p.name, marks=(pytest.mark.long,) * p.long) for p in PINNED],
)  # fmt: skip
@pytest.mark.usefixtures("store_ready")
def test_each_node_store_gets_its_pinned_verdict(pinned: Pinned, tmp_path: Path) -> None:
    """The store in that setting passes, or fails with exactly the pinned rules; the machine
    and the conformance cases ran and passed whatever crash exploration found."""
    verdict = validate(pinned.spec, budget=5, failures_dir=tmp_path, seed=1, examples=5,
                       require=("crash", "restarts"))  # fmt: skip
    found = {(f.phase, f.rule) for f in verdict.failures if f.rule is not None}
    assert (verdict.outcome, found) == (pinned.outcome, pinned.failures), [
        f"{f.rule} ({f.phase}): {f.error}" for f in verdict.failures
    ]
    assert verdict.phases["machine"].status == "ran"
    assert verdict.phases["conformance"].status == "ran"


def test_every_store_folder_is_pinned_and_locked() -> None:
    """Each folder of examples/node/stores/ has pinned verdicts and a lock file that pins its
    store to one exact version, the one its package.json asks for."""
    folders = {p.name for p in STORES.iterdir() if p.is_dir() and p.name != "node_modules"}
    assert folders == {p.store for p in PINNED}
    for folder in sorted(folders):
        wanted = orjson.loads((STORES / folder / "package.json").read_bytes())["dependencies"]
        lock = orjson.loads((STORES / folder / "package-lock.json").read_bytes())["packages"]
        for name, version in wanted.items():
            assert lock[f"node_modules/{name}"]["version"] == version, (folder, name)


#: NeDB itself, as its README uses it: 20 documents, then one holding U+2028 in a string, the
#: datastore loaded again; prints how many documents it holds.
NEDB_LINE_SEPARATOR = r"""
const Datastore = require("@seald-io/nedb");
(async () => {
  const filename = process.argv[1];
  let db = new Datastore({ filename });
  await db.loadDatabaseAsync();
  for (let n = 0; n < 20; n++) await db.insertAsync({ n, v: "plain" });
  await db.insertAsync({ n: 20, v: "line\u2028separator" });
  db = new Datastore({ filename });
  await db.loadDatabaseAsync();
  console.log(await db.countAsync({}));
})();
"""


def test_nedb_drops_a_document_holding_a_line_separator(tmp_path: Path) -> None:
    """The store's bug the NeDB adapter works around (docs/findings.md): NeDB writes a document
    as a JSON line with U+2028 raw in it and splits the file back on every Unicode line
    terminator, so the document reads back as corrupt lines and is dropped.  When a version of
    NeDB reads all 21 back, the adapter's escape (its serialization hooks) can go."""
    require_store("nedb")
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, "-e", NEDB_LINE_SEPARATOR, str(tmp_path / "data.db")], cwd=STORES / "nedb",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["20"]
