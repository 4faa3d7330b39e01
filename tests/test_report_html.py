"""``scopecheck report`` and ``validate --html``: one self-contained HTML page of a verdict
(REPORT-1..6).

The page of a real verdict -- one ``validate`` run of a backend with both classic mistakes
(``tests/data/report_backend.py``: machine, conformance and crash failures) -- is opened in a
real Chromium through Playwright from ``file://``: no console error, no page error, no request
but ``file:``/``data:``, every failure of the JSON on the page.  ``SCOPECHECK_SCREENSHOT=1``
also saves ``docs/report.png``.  Where Chromium (Debian package chromium) or Playwright is
missing the browser tests skip with the reason in capitals -- except under
``SCOPECHECK_REQUIRE_CHROMIUM=1`` (set by .ci/run), where that is a failure.  The renderer's
escaping, its bounds and the command's mistakes are tested without a browser.
"""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from scopecheck.cli.main import main
from scopecheck.crashsim.failure import CrashFailure, Evidence
from scopecheck.crashsim.persistence import FileOp, Image
from scopecheck.run.report_html import (
    DETAILED,
    LISTED,
    WINDOW,
    load_reproducer,
    render,
    replay_file,
    report_html,
)
from scopecheck.run.validate import Failure, PhaseReport, Verdict

ROOT = Path(__file__).resolve().parents[1]
BACKEND = f"{ROOT}/tests/data/report_backend.py:make_backend"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&<!--"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scopecheck", *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path]:
    """One real ``validate --json --html`` run of the two-mistake backend (fixed work, about
    8 s): the verdict's file, its JSON and the page ``--html`` wrote."""
    where = tmp_path_factory.mktemp("report")
    page = where / "validate.html"
    done = _cli("validate", BACKEND, "--json", "--examples", "3", "--html", str(page), cwd=where)
    assert done.returncode == 1, done.stderr[-3000:]
    (where / "verdict.json").write_text(done.stdout)
    return where / "verdict.json", orjson.loads(done.stdout), page


def _indices(page: str) -> set[int]:
    class Found(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: set[int] = set()

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            for name, value in attrs:
                if name == "data-failure-index" and value is not None:
                    self.found.add(int(value))

    parser = Found()
    parser.feed(page)
    return parser.found


def _tags(page: str) -> dict[str, int]:
    class Tags(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: dict[str, int] = {}
            self.urls: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags[tag] = self.tags.get(tag, 0) + 1
            for name, value in attrs:
                if name in ("src", "href", "action") and value and not value.startswith("#"):
                    self.urls.append(value)
                assert not name.startswith("on"), f"an event handler attribute {name} on <{tag}>"

    parser = Tags()
    parser.feed(page)
    assert parser.urls == [], f"the page names resources: {parser.urls[:5]}"
    return parser.tags


# -- in a real browser -----------------------------------------------------------------------


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium under Playwright, closed after the test."""
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    why = ""
    if not os.access(executable, os.X_OK):
        why = "NO CHROMIUM: install the Debian package chromium (.ci/run does)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = why or "NO PLAYWRIGHT: pip install -e '.[test]'"
    if why:
        if os.environ.get("SCOPECHECK_REQUIRE_CHROMIUM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    # Chromium's singleton socket lives in $TMPDIR and must fit a Unix socket's 108-byte
    # path: the suite's nested temporary folders do not, so the browser gets a short one.
    short = tempfile.mkdtemp(prefix="chr-", dir="/tmp")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS,
                env={**os.environ, "TMPDIR": short},
            )  # fmt: skip
            try:
                yield browser
            finally:
                browser.close()
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str]]:
    """The page opened from ``file://`` with every console error, page error and request that
    is not ``file:`` or ``data:`` recorded as a problem."""
    problems: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "request",
        lambda r: None if r.url.split(":", 1)[0] in ("file", "data") else problems.append(r.url),
    )
    page.on(
        "dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss())
    )
    page.goto(page_file.as_uri(), wait_until="load")
    return page, problems


@pytest.mark.rule("REPORT-1", "REPORT-2", "REPORT-3", "REPORT-4")
def test_the_page_of_a_real_verdict_in_chromium(
    real: tuple[Path, dict[str, Any], Path], chromium: Any, tmp_path: Path
) -> None:
    verdict_file, verdict, _ = real
    phases = {f["phase"] for f in verdict["failures"]}
    assert {"machine", "crash exploration", "conformance"} <= phases, phases
    out = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exited:
        main(["report", str(verdict_file), "-o", str(out)])
    assert exited.value.code == 0
    page, problems = _open(chromium, out)
    shown = page.eval_on_selector_all(
        "[data-failure-index]", "nodes => nodes.map(n => Number(n.dataset.failureIndex))"
    )
    assert sorted(shown) == list(range(len(verdict["failures"])))
    for index, failure in enumerate(verdict["failures"]):
        text = page.inner_text(f'[data-failure-index="{index}"]')
        assert (failure["rule"] or "no rule") in text
        assert failure["error"].splitlines()[0][:60] in text
        if failure["reproducer"].startswith("scopecheck replay "):
            assert "--export" in text
    # a crash failure with evidence: its timeline, the crash line, the files before and after
    crash = next(
        i
        for i, f in enumerate(verdict["failures"])
        if "after power loss (strict; data lost: " in f["error"]
    )
    article = f'[data-failure-index="{crash}"]'
    assert page.locator(f"{article} .timeline .line.crash").count() == 1
    assert page.locator(f"{article} .timeline .line.ack").count() >= 1
    assert "page cache (before)" in page.inner_text(f"{article} table.files")
    assert "what the power loss lost" in page.inner_text(article)
    # the coverage strip: the crash points the fixed work names are marked on its workload
    assert page.locator("#coverage .strip .op.chk").count() == len(
        verdict["units"]["crash points"]["ids"]
    )
    assert page.locator("#coverage .strip .mk.crash").count() >= 1
    if os.environ.get("SCOPECHECK_SCREENSHOT") == "1":
        bottom = page.evaluate(
            "() => { const n = document.getElementById('failure-2');"
            " return n.getBoundingClientRect().top + window.scrollY; }"
        )
        page.screenshot(
            path=str(ROOT / "docs" / "report.png"), full_page=True,
            clip={"x": 0, "y": 0, "width": 1280, "height": int(bottom)},
        )  # fmt: skip
    page.click(f'{article} button[data-copy^="rerun-"]')
    page.click('button[data-toggle="close"]')
    page.click('button[data-toggle="open"]')
    page.close()
    assert problems == []


@pytest.mark.rule("REPORT-1", "REPORT-5")
def test_hostile_text_stays_text_in_chromium(chromium: Any, tmp_path: Path) -> None:
    out = tmp_path / "hostile.html"
    out.write_text(report_html(_hostile_verdict(tmp_path)), encoding="utf-8")
    page, problems = _open(chromium, out)
    assert page.locator("script").count() == 1
    assert page.locator("img").count() == 0
    assert HOSTILE.splitlines()[0] in page.inner_text('[data-failure-index="0"] .error')
    page.close()
    assert problems == []


# -- without a browser -----------------------------------------------------------------------


@pytest.mark.rule("REPORT-1", "REPORT-2")
def test_validate_html_writes_the_same_failures(real: tuple[Path, dict[str, Any], Path]) -> None:
    _, verdict, page = real
    text = page.read_text(encoding="utf-8")
    assert _indices(text) == set(range(len(verdict["failures"])))
    assert _tags(text)["script"] == 1
    mask = os.umask(0o022)
    os.umask(mask)
    assert page.stat().st_mode & 0o777 == 0o666 & ~mask  # made as any file, not private


@pytest.mark.rule("REPORT-2")
def test_failures_dir_finds_moved_reproducers(
    real: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, verdict, _ = real
    moved = tmp_path / "artifact"
    moved.mkdir()
    for failure in verdict["failures"]:
        named = replay_file(failure["reproducer"])
        if named:
            shutil.copy(named, moved / Path(named).name)
    elsewhere = []
    for failure in verdict["failures"]:
        named = replay_file(failure["reproducer"])
        gone = f"scopecheck replay /gone/{Path(named).name}" if named else failure["reproducer"]
        elsewhere.append(Failure.from_json({**failure, "reproducer": gone}))
    lost = attrs.evolve(Verdict.from_json(verdict), failures=tuple(elsewhere))
    without = report_html(lost)
    assert "no reproducer file at /gone/" in without
    assert 'class="timeline"' not in without
    found = report_html(lost, moved)
    assert 'class="timeline"' in found
    assert str(moved) in found
    assert _indices(found) == set(range(len(verdict["failures"])))


def _hostile_verdict(tmp_path: Path) -> Verdict:
    """A verdict whose every text is hostile, with a crash reproducer whose file names,
    shown values and workload name are too."""
    name = f"a{HOSTILE}.log".replace("/", "_")
    ops = (
        FileOp("open", name, handle=1, flags=frozenset({"create"}), step=0),
        FileOp("write", name, handle=1, data=HOSTILE.encode(), step=1),
        FileOp("write", name, handle=1, data=b"\xff\xfe" + HOSTILE.encode(), step=1),
        FileOp("sync", name, handle=1, step=1),
        FileOp("write", name, handle=1, data=b"more", step=2),
    )
    crash = CrashFailure.of_image(
        "fs", "CRASH-FS-6", HOSTILE, seed=0,
        workload={"name": HOSTILE, "steps": [{"op": "create"}, {"op": "commit"}]},
        point=4, variant="strict",
        evidence=Evidence(ops, Image({}), (1, 4, None)),
        shown={"expected": HOSTILE, HOSTILE: {HOSTILE: [HOSTILE]}},
    )  # fmt: skip
    reproducer = tmp_path / "hostile.json"
    reproducer.write_bytes(orjson.dumps(crash.to_json()))
    failure = Failure(
        phase="crash exploration", rule="CRASH-FS-6", error=HOSTILE + "\ud800",
        reproducer=f"scopecheck replay {reproducer}", message=HOSTILE, program=HOSTILE,
        test=HOSTILE, rules=("CRASH-FS-6", HOSTILE),
    )  # fmt: skip
    return Verdict(
        backend=HOSTILE,
        phases={"crash exploration": PhaseReport("failed", HOSTILE, {"crash_states": 3})},
        failures=(failure,),
        limits=(HOSTILE,),
        crash_coverage={"points_checked": 1, "points_total": 5, HOSTILE: HOSTILE},
    )


@pytest.mark.rule("REPORT-5")
def test_everything_from_outside_is_escaped(tmp_path: Path) -> None:
    page = report_html(_hostile_verdict(tmp_path))
    assert "<script>alert" not in page
    assert "<img" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "\\ud800" in page  # a lone surrogate spelled out, and the page encodes
    page.encode("utf-8")
    tags = _tags(page)
    assert tags["script"] == 1 and tags["style"] == 1
    assert 'class="timeline"' in page  # the hostile file name drawn, escaped


@pytest.mark.rule("REPORT-5")
def test_a_failure_with_ten_thousand_operations_stays_small(tmp_path: Path) -> None:
    count = 10_000
    ops = [FileOp("open", "big.log", handle=1, flags=frozenset({"create"}), step=0)]
    for n in range(1, count):
        kind = "sync" if n % 10 == 0 else "write"
        ops.append(FileOp(kind, f"f{n % 300}.log", handle=1, data=b"x" * 100, step=n // 10))
    acked = tuple(10 * (n + 1) for n in range(count // 10 - 1))
    crash = CrashFailure.of_image(
        "fs", "CRASH-FS-6", "lost", seed=0, workload={"name": "big"}, point=5_003,
        variant="process", evidence=Evidence(tuple(ops), Image({}), acked),
        shown={"expected": "y" * 1_000_000},
    )  # fmt: skip
    reproducer = tmp_path / "big.json"
    reproducer.write_bytes(orjson.dumps(crash.to_json()))
    failure = Failure(
        phase="crash exploration", rule="CRASH-FS-6", error="e" * 1_000_000,
        reproducer=f"scopecheck replay {reproducer}", message="m" * 1_000_000,
    )  # fmt: skip
    verdict = Verdict(backend="big", failures=(failure,))
    page = report_html(verdict)
    assert len(page.encode()) < 1_000_000, len(page.encode())
    assert f"not drawn: the {5_003 - WINDOW // 2:,} positions before" in page
    assert "more files with calls here not drawn" in page
    assert "more characters not shown" in page
    assert _indices(page) == {0}


@pytest.mark.rule("REPORT-5")
def test_many_failures_are_each_listed_then_counted() -> None:
    failures = tuple(
        Failure(phase="machine", rule="SEQ-1", error=f"failure {n}", reproducer="python -m x")
        for n in range(LISTED + 3)
    )
    page = render(Verdict(backend="many", failures=failures), [])
    assert _indices(page) == set(range(LISTED))
    assert "3 more failures not listed" in page
    assert DETAILED < LISTED


@pytest.mark.rule("REPORT-2")
def test_an_unreadable_reproducer_is_said_on_the_page(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps({"kind": "crash", "version": 1}))
    failures = tuple(
        Failure(
            phase="crash exploration",
            rule="CRASH-FS-6",
            error="x",
            reproducer=f"scopecheck replay {path}",
        )
        for path in (garbage, old, tmp_path / "missing.json", tmp_path)
    )
    assert [load_reproducer(f).problem != "" for f in failures] == [True] * 4
    page = report_html(Verdict(backend="b", failures=failures))
    assert "is not JSON" in page
    assert "crash reproducer format 1" in page
    assert page.count("no reproducer file at") == 2
    assert _indices(page) == {0, 1, 2, 3}


@pytest.mark.rule("REPORT-6")
@pytest.mark.parametrize(
    ("content", "code"),
    [
        (None, "not_found"),
        (b"<html>not json", "invalid_payload"),
        (b"[1, 2, 3]", "invalid_payload"),
        (b'{"version": 4, "backend": "old"}', "invalid_payload"),
        (b'{"version": 5}', "invalid_payload"),
        ("budget", "invalid_payload"),
        ("crash_coverage", "invalid_payload"),
        ("stopped", "invalid_payload"),
    ],
    ids=[
        "missing",
        "not-json",
        "a-list",
        "old-version",
        "no-fields",
        "budget",
        "coverage",
        "stopped",
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str | None, code: str
) -> None:
    verdict = tmp_path / "verdict.json"
    if isinstance(content, str):  # a real verdict with one field of the wrong type
        data = Verdict(backend="b", budget=1.0).as_json()
        data[content] = ["not", "this"]
        content = orjson.dumps(data)
    if content is not None:
        verdict.write_bytes(content)
    out = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exited:
        main(["report", str(verdict), "-o", str(out)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"scopecheck: error: {code}: "), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["verdict.json"] if content else [])


@pytest.mark.rule("REPORT-6")
def test_bad_destinations_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], real: tuple[Path, dict[str, Any], Path]
) -> None:
    verdict_file = real[0]
    for argv, code in (
        (["-o", str(tmp_path / "no" / "such" / "report.html")], "not_found"),
        (["-o", str(tmp_path)], "invalid_query"),
        (["-o", str(tmp_path / "r.html"), "--failures-dir", str(tmp_path / "none")],
         "not_found"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(["report", str(verdict_file), *argv])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"scopecheck: error: {code}: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    done = _cli(
        "validate", BACKEND, "--examples", "1", "--html", str(tmp_path / "no" / "r.html"),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("scopecheck: error: not_found: "), done.stderr
    assert list(tmp_path.iterdir()) == []
