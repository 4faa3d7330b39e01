"""The Go stores of the pinned suite (examples/go/stores/, docs/findings.md): bbolt, Badger v2
and goleveldb, each a backend process speaking the protocol (docs/protocol.md), built here with
`go build` against Debian's packaged sources and validated with fixed work (``examples=5``,
seed 1) as a user runs `scopecheck validate --exec`; its verdict -- passed, or failed with
exactly these rules in these phases -- is pinned as for the Python stores
(test_store_adapters.py), so a new version of a store, or of scopecheck's checks, that changes
one shows here.  The stores' versions are the Debian packages examples/go/stores/packages.txt
pins (.ci/run installs them).

The build is GOPATH mode (``GO111MODULE=off``): module mode cannot take /usr/share/gocode/src
as its replacements, because some of Badger's dependencies there have no go.mod.  So
examples/go is copied into a GOPATH of its own, as ``src/scopecheck-example``, next to
/usr/share/gocode; from there the import of ``github.com/dgraph-io/badger/v2`` resolves to the
packaged ``github.com/dgraph-io/badger`` (minimal module compatibility: the importer sits under
a go.mod).  Without go or without the packaged sources these tests are skipped, saying which,
unless ``SCOPECHECK_REQUIRE_GO=1`` (set by .ci/run), where that is a failure.

Every finding is the store's in that setting, never the adapter's: the stores share one Session
layer (``sessions/sessions.go``, the Go counterpart of examples/stores/sessions.py) that passes
the machine and the conformance cases on every store, and each finding is confirmed from the
store's source in docs/findings.md.  The default run validates one setting that passes and one
that fails; the rest is ``long`` (SCOPECHECK_LONG=1)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from scopecheck import validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "go"
STORES = EXAMPLE / "stores"
#: Where Debian's golang-*-dev packages put their sources (a GOPATH).
GOCODE = Path("/usr/share/gocode")
GO = shutil.which("go")
CRASH = "crash exploration"
#: The import path the example's GOPATH copy is built under (examples/go/go.mod's module).
MODULE = "scopecheck-example"


@attrs.frozen
class Package:
    """One line of examples/go/stores/packages.txt: a Debian package of Go sources."""

    name: str
    version: str
    import_path: str

    @property
    def source(self) -> Path:
        """The packaged sources: a ``/vN`` import path is found without its last element
        (minimal module compatibility, as the GOPATH build resolves it)."""
        path = GOCODE / "src" / self.import_path
        if not path.is_dir() and re.fullmatch(r"v\d+", path.name):
            return path.parent
        return path


def packages() -> list[Package]:
    rows = (STORES / "packages.txt").read_text(encoding="utf-8").splitlines()
    return [Package(*line.split()) for line in rows if line.strip() and not line.startswith("#")]


@attrs.frozen
class Pinned:
    """One store in one setting (its command-line flags) and the verdict it gets."""

    store: str
    flags: tuple[str, ...]
    outcome: str
    #: ``(phase, rule)`` of every failure, as a set: a rule may fail in several crash kinds.
    failures: frozenset[tuple[str, str]] = frozenset()
    long: bool = True

    @property
    def name(self) -> str:
        return shlex.join([self.store, *self.flags])


def crash(*rules: str) -> frozenset[tuple[str, str]]:
    return frozenset((CRASH, f"CRASH-FS-{n}") for n in rules)


PINNED = [
    # A commit whose meta page's fdatasync failed is in the page cache and comes back.
    Pinned("bbolt", (), "failed", crash("14"), long=False),
    Pinned("bbolt", ("--nosync",), "failed", crash("6", "9", "14")),
    # A value log with a torn or partial entry at its end refuses to open without Truncate.
    Pinned("badger", (), "failed", crash("1", "14")),
    Pinned("badger", ("--no-sync-writes",), "failed", crash("1", "9", "14")),
    Pinned("badger", ("--truncate",), "passed", long=False),
    # A new MANIFEST is named by a synced CURRENT before its own bytes are synced.
    Pinned("leveldb", (), "failed", crash("1", "5", "6", "9", "14")),
    Pinned("leveldb", ("--sync",), "failed", crash("1", "5", "9", "14")),
]


def _unavailable() -> str | None:
    """Why the Go stores cannot be built here, or ``None``."""
    if GO is None:
        return "go is not on PATH (.ci/run installs golang-go)"
    query = shutil.which("dpkg-query")
    for package in packages():
        if not package.source.is_dir():
            return f"{package.name} is not installed: no {package.source} (.ci/run installs it)"
        if query is None:
            return f"no dpkg-query to tell which {package.name} is installed"
        installed = subprocess.run(
            [query, "-W", "-f=${Version}", package.name],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        if installed != package.version:
            pinned = f"the verdicts are pinned for {package.version} (stores/packages.txt)"
            pytest.fail(f"{package.name} {installed or '(none)'} is installed; {pinned}")
    return None


@pytest.fixture(scope="module")
def go_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """A store's backend binary, built the first time a test asks for it: examples/go copied
    into a GOPATH of its own, next to Debian's, and built by import path (no network)."""
    reason = _unavailable()
    if reason is not None:
        message = f"NO GO STORES: {reason}"
        if os.environ.get("SCOPECHECK_REQUIRE_GO") == "1":
            pytest.fail(message)
        pytest.skip(message)
    assert GO is not None
    out = tmp_path_factory.mktemp("go-stores")
    shutil.copytree(EXAMPLE, out / "gopath" / "src" / MODULE)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{out / 'gopath'}:{GOCODE}",
           "GOCACHE": str(out / "cache"), "GOFLAGS": "", "GOPROXY": "off",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}  # fmt: skip
    built: dict[str, Path] = {}

    def build(store: str) -> Path:
        if store not in built:
            binary = out / "bin" / store
            done = subprocess.run(
                [GO, "build", "-o", str(binary), f"{MODULE}/stores/{store}"],
                cwd=out, env=env, capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            built[store] = binary
        return built[store]

    yield build


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-6", "CRASH-FS-9", "PROC-1")
@pytest.mark.parametrize(
    "pinned",
    [pytest.param(p, id=p.name, marks=(pytest.mark.long,) * p.long) for p in PINNED],
)  # fmt: skip
def test_each_go_store_gets_its_pinned_verdict(
    pinned: Pinned, go_store: Callable[[str], Path], tmp_path: Path
) -> None:
    """The store in that setting passes, or fails with exactly the pinned rules."""
    command = shlex.join([str(go_store(pinned.store)), *pinned.flags])
    verdict = validate(f"exec:{command}", budget=5, failures_dir=tmp_path, seed=1, examples=5,
                       require=("crash", "restarts"))  # fmt: skip
    found = {(f.phase, f.rule) for f in verdict.failures if f.rule is not None}
    assert (verdict.outcome, found) == (pinned.outcome, pinned.failures), [
        f"{f.rule} ({f.phase}): {f.error}" for f in verdict.failures
    ]
    assert verdict.phases["machine"].status == "ran"
    assert verdict.phases["conformance"].status == "ran"


def _settings(main: Path) -> set[tuple[str, ...]]:
    """A store's settings: its defaults, and each boolean flag its main.go declares."""
    flags = re.findall(r'flag\.Bool\("([a-z-]+)"', main.read_text(encoding="utf-8"))
    return {(), *((f"--{name}",) for name in flags)}


def test_every_setting_of_every_go_store_is_pinned() -> None:
    """Each store under examples/go/stores/ (a folder with a main.go) has a pinned verdict in
    its defaults and with each of its flags, and nothing else does."""
    settings = {(main.parent.name, flags) for main in STORES.glob("*/main.go")
                for flags in _settings(main)}  # fmt: skip
    assert settings == {(p.store, p.flags) for p in PINNED}


IMPORT = re.compile(r'^\s*(?:\w+\s+)?"([^"]+)"\s*$', re.MULTILINE)


@pytest.mark.rule("INSTALL-1")
@pytest.mark.parametrize("store", sorted(p.parent.name for p in STORES.glob("*/main.go")))
def test_each_go_store_is_short_and_imports_its_store_and_the_shared_layers_alone(
    store: str,
) -> None:
    """A store's file reads in one sitting (under 300 lines) and builds on the standard
    library, its store's packages and the example's shared layers only, as a user's would."""
    source = (STORES / store / "main.go").read_text(encoding="utf-8")
    assert len(source.splitlines()) < 300
    block = re.search(r"^import \((.*?)^\)", source, re.MULTILINE | re.DOTALL)
    assert block is not None
    imports = set(IMPORT.findall(block.group(1)))
    stores = [p.import_path for p in packages()]
    assert {i for i in imports if i.split("/")[0] == MODULE} == {f"{MODULE}/stores/sessions"}
    outside = [i for i in imports if "." in i.split("/")[0]]  # not the standard library
    assert [i for i in outside if not any(i == s or i.startswith(s + "/") for s in stores)] == []
