"""The spec rules and the coverage tooling behind ``scopecheck rules`` (SPEC-1..SPEC-4).

These tests check the tooling, not storage behaviour.  ``test_every_rule_marker_names_a_known_rule``
looks at every test collected in the current run, so a typo in any ``rule`` marker fails CI.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import orjson
import pytest

from scopecheck.tools.rules import (
    RULE_ID,
    CollectedTest,
    Collection,
    SpecError,
    collect_tests,
    coverage,
    find_root,
    load_rules,
    rules_command,
)
from scopecheck.tools.rules_plugin import marker_rule_ids

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A tiny checkout: two rules (one with a gap) and tests citing a known and an unknown id."""
    _write(
        tmp_path / "spec/rules/demo.toml",
        """
        [[rule]]
        id = "DEMO-1"
        source = "000 §2.1"
        statement = "A covered rule."

        [[rule]]
        id = "DEMO-2"
        source = "000 §2.2"
        statement = "A rule nothing checks yet."
        gap = "needs the JSONL backend"
        """,
    )
    _write(tmp_path / "pytest.ini", "[pytest]\n")
    _write(
        tmp_path / "tests/test_planted.py",
        """
        import pytest

        @pytest.mark.rule("DEMO-1")
        def test_known():
            pass

        @pytest.mark.rule("DEMO-1", "DEMO-99")
        def test_typo():
            pass

        @pytest.mark.rule("DEMO-1")
        class TestGrouped:
            @pytest.mark.parametrize("n", [1, 2])
            def test_param(self, n):
                pass
        """,
    )
    return tmp_path


@pytest.mark.rule("SPEC-1")
def test_rule_files_load_with_unique_well_formed_ids() -> None:
    """The repository's rule files load, and every id is unique and of the form PREFIX-n."""
    rules = load_rules(ROOT)
    ids = [rule.id for rule in rules]
    assert len(ids) == len(set(ids))
    assert all(RULE_ID.fullmatch(rule_id) for rule_id in ids)
    assert all(rule.source.strip() and rule.statement.strip() for rule in rules)
    assert {"SCOPE-1", "TX-3", "SEQ-2", "RETIRE-2", "LIST-5", "SPEC-1"} <= set(ids)


@pytest.mark.rule("SPEC-1")
def test_malformed_rule_files_report_every_problem(tmp_path: Path) -> None:
    """A duplicate id, a malformed id, a missing statement and an unknown key are all named."""
    _write(
        tmp_path / "spec/rules/a.toml",
        """
        [[rule]]
        id = "SEQ-1"
        source = "000 §2.5"
        statement = "One."
        """,
    )
    _write(
        tmp_path / "spec/rules/b.toml",
        """
        [[rule]]
        id = "SEQ-1"
        source = "000 §2.5"
        statement = "Again."

        [[rule]]
        id = "seq-2"
        source = "000 §2.5"
        statement = "Lower case."

        [[rule]]
        id = "SEQ-3"
        source = "000 §2.5"

        [[rule]]
        id = "SEQ-4"
        source = "000 §2.5"
        statement = "Extra key."
        covered = true
        """,
    )
    with pytest.raises(SpecError) as caught:
        load_rules(tmp_path)
    text = "\n".join(caught.value.problems)
    assert "duplicate id SEQ-1 (first in spec/rules/a.toml)" in text
    assert "'seq-2' is not of the form PREFIX-n" in text
    assert "(SEQ-3): missing 'statement'" in text
    assert "(SEQ-4): unknown key 'covered'" in text
    assert len(caught.value.problems) == 4


@pytest.mark.rule("SPEC-1")
def test_invalid_toml_is_reported_with_its_file(tmp_path: Path) -> None:
    """A rule file that is not TOML is named in the error."""
    _write(tmp_path / "spec/rules/bad.toml", "[[rule]\nid = 1\n")
    with pytest.raises(SpecError, match=r"spec/rules/bad\.toml: not valid TOML"):
        load_rules(tmp_path)


@pytest.mark.rule("SPEC-2")
def test_every_rule_marker_names_a_known_rule(request: pytest.FixtureRequest) -> None:
    """Every test collected in this run cites only rules that exist in spec/rules."""
    known = {rule.id for rule in load_rules(ROOT)}
    offenders = {
        item.nodeid: sorted(set(marker_rule_ids(item)) - known)
        for item in request.session.items
        if set(marker_rule_ids(item)) - known
    }
    assert offenders == {}, f"tests cite unknown rules: {offenders}"


@pytest.mark.rule("SPEC-2", "SPEC-3")
def test_planted_unknown_rule_id_is_reported(planted: Path) -> None:
    """A test citing a rule that does not exist is reported by id and node, and exits 1."""
    report = coverage(load_rules(planted), collect_tests(planted))
    assert report.unknown == (("DEMO-99", ("tests/test_planted.py::test_typo",)),)
    assert not report.ok
    out, err = io.StringIO(), io.StringIO()
    assert rules_command(as_json=False, root=planted, out=out, err=err) == 1
    assert "DEMO-99: tests/test_planted.py::test_typo" in out.getvalue()
    assert err.getvalue() == ""


@pytest.mark.rule("SPEC-3")
def test_coverage_comes_from_collected_markers(planted: Path) -> None:
    """Function, class and parametrised markers all count; each node is listed once per rule."""
    collection = collect_tests(planted)
    assert collection.errors == ()
    report = coverage(load_rules(planted), collection)
    covered = {item.rule.id: item.tests for item in report.rules}
    assert covered["DEMO-1"] == (
        "tests/test_planted.py::test_known",
        "tests/test_planted.py::test_typo",
        "tests/test_planted.py::TestGrouped::test_param[1]",
        "tests/test_planted.py::TestGrouped::test_param[2]",
    )
    assert covered["DEMO-2"] == ()
    assert report.uncovered == ("DEMO-2",)


@pytest.mark.rule("SPEC-3", "SPEC-4")
def test_json_shape(planted: Path) -> None:
    """``--json`` prints the documented keys, with gaps and unknown ids as extra keys."""
    out = io.StringIO()
    assert rules_command(as_json=True, root=planted, out=out, err=io.StringIO()) == 1
    document = orjson.loads(out.getvalue())
    assert set(document) == {
        "rules",
        "uncovered",
        "gaps",
        "unknown",
        "collection_errors",
        "coverage",
    }
    assert document["coverage"] == "computed"
    assert [set(rule) for rule in document["rules"]] == [{"id", "source", "statement", "tests"}] * 2
    assert document["rules"][1] == {
        "id": "DEMO-2",
        "source": "000 §2.2",
        "statement": "A rule nothing checks yet.",
        "tests": [],
    }
    assert document["uncovered"] == ["DEMO-2"]
    assert document["gaps"] == [{"id": "DEMO-2", "reason": "needs the JSONL backend", "tests": 0}]
    assert document["unknown"] == [{"id": "DEMO-99", "tests": ["tests/test_planted.py::test_typo"]}]
    assert document["collection_errors"] == []


@pytest.mark.rule("SPEC-3")
def test_repository_report_lists_every_rule_and_this_test() -> None:
    """On this checkout, every rule appears once and this very test is found by collection."""
    out = io.StringIO()
    assert rules_command(as_json=True, root=ROOT, out=out, err=io.StringIO()) == 0
    document = orjson.loads(out.getvalue())
    assert [rule["id"] for rule in document["rules"]] == [r.id for r in load_rules(ROOT)]
    by_id = {rule["id"]: rule["tests"] for rule in document["rules"]}
    this = "tests/test_rules.py::test_repository_report_lists_every_rule_and_this_test"
    assert this in by_id["SPEC-3"]
    assert document["unknown"] == []
    assert document["collection_errors"] == []
    assert set(document["uncovered"]) == {rid for rid, tests in by_id.items() if not tests}


@pytest.mark.rule("SPEC-4")
def test_gap_is_reported_in_human_output(planted: Path) -> None:
    """The human report prints each rule with its tests, then the uncovered ids and the gaps."""
    out = io.StringIO()
    rules_command(as_json=False, root=planted, out=out, err=io.StringIO())
    text = out.getvalue()
    assert "DEMO-1  [000 §2.1]" in text
    assert "    4 tests:" in text
    assert "gap: needs the JSONL backend" in text
    assert "2 rules: 1 covered, 1 uncovered, 1 with a gap" in text
    assert "uncovered: DEMO-2" in text


@pytest.mark.rule("SPEC-3")
def test_collection_error_is_reported(planted: Path) -> None:
    """A test file that fails to import is reported rather than silently shrinking coverage."""
    _write(planted / "tests/test_broken.py", "import no_such_module_for_scopecheck\n")
    report = coverage(load_rules(planted), collect_tests(planted))
    assert len(report.collection_errors) == 1
    assert report.collection_errors[0].startswith("tests/test_broken.py: ")
    assert not report.ok


@pytest.mark.rule("SPEC-3")
def test_coverage_without_collection_marks_everything_uncovered() -> None:
    """With no tests every rule is uncovered; ids are compared exactly."""
    rules = load_rules(ROOT)
    report = coverage(rules, Collection((CollectedTest("t::x", ("seq-2",)),)))
    assert report.uncovered == tuple(rule.id for rule in rules)
    assert report.unknown == (("seq-2", ("t::x",)),)


@pytest.mark.rule("ERR-4")
def test_missing_spec_fails_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a checkout, ``rules`` prints one line naming the fix and exits 2."""
    monkeypatch.setenv("SCOPECHECK_ROOT", str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    assert rules_command(as_json=True, out=out, err=err) == 2
    assert out.getvalue() == ""
    message = err.getvalue()
    assert message.count("\n") == 1
    assert message.startswith("scopecheck rules: SCOPECHECK_ROOT=")


def test_root_is_found_from_a_subdirectory(planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The root is the nearest directory above the working directory that holds spec/rules."""
    monkeypatch.delenv("SCOPECHECK_ROOT", raising=False)
    (planted / "tests/deeper").mkdir()
    assert find_root(planted / "tests/deeper") == planted.resolve()
    monkeypatch.setenv("SCOPECHECK_ROOT", str(planted))
    assert find_root(Path("/")) == planted.resolve()


@pytest.mark.rule("INSTALL-3")
def test_outside_a_checkout_the_installed_rules_are_listed_without_coverage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed wheel used in a user's directory: the rules come from the package, and the
    report says plainly that coverage is unavailable -- no rule is reported as uncovered."""
    import scopecheck.tools.rules as rules_module

    monkeypatch.delenv("SCOPECHECK_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rules_module, "_is_checkout", lambda directory: False)
    out = io.StringIO()
    assert rules_command(as_json=True, out=out, err=io.StringIO()) == 0
    document = orjson.loads(out.getvalue())
    assert [rule["id"] for rule in document["rules"]] == [r.id for r in load_rules(ROOT)]
    assert {rule["tests"] for rule in document["rules"]} == {None}
    assert document["uncovered"] is None
    assert document["coverage"].startswith("unavailable: coverage needs the test suite")
    text = io.StringIO()
    assert rules_command(as_json=False, out=text, err=io.StringIO()) == 0
    assert "no tests" not in text.getvalue()
    assert text.getvalue().rstrip().endswith("or set SCOPECHECK_ROOT to one")


@pytest.mark.rule("INSTALL-3")
def test_the_package_carries_the_same_rules_as_the_checkout() -> None:
    """The rules the wheel ships are the checkout's own files (one source of truth)."""
    assert load_rules() == load_rules(ROOT)


@pytest.mark.rule("ERR-1")
def test_the_error_code_table_lists_exactly_the_codes_with_their_classes() -> None:
    """spec/README.md's table of stable codes is the code's set, each with the class that
    raises it (a code added to ``CODES`` without a row fails here)."""
    from scopecheck.models import errors

    text = (ROOT / "spec" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Stable error codes", 1)[1]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    table = {code.strip(" `"): cls.strip(" `") for code, cls in rows}
    assert set(table) == set(errors.CODES)
    for code, name in table.items():
        assert issubclass(getattr(errors, name), errors.ScopecheckError), (code, name)


@pytest.mark.rule("SPEC-1")
def test_the_readme_names_exactly_the_files_of_spec() -> None:
    """Every file the spec README's table names exists, and every rule file is in the table."""
    text = (ROOT / "spec" / "README.md").read_text(encoding="utf-8")
    table = text.split("| file | what it holds |", 1)[1].split("\n\n", 1)[0]
    named = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert {n for n in named if not (ROOT / "spec" / n).exists()} == set()
    rule_files = {f"rules/{p.name}" for p in (ROOT / "spec" / "rules").glob("*.toml")}
    assert rule_files <= named
