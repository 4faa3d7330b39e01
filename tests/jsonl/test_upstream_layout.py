"""Both repository layouts (JSONL-26): upstream's ``<root>/--<cwd>--/<createdAt>_<id>.jsonl``,
found by the id in each header and re-checked against the header's ``cwd``, a session file
opened by its path whatever its name, and ``scopecheck inspect`` on an upstream folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from scopecheck.impl.jsonl import JsonlRepository
from scopecheck.impl.jsonl.root_layouts import cwd_directory_name, iso_file_time
from scopecheck.models.addresses import value
from scopecheck.models.errors import CorruptError, ScopecheckError
from scopecheck.models.fork import TreeFork
from scopecheck.models.records import ValueRecord
from scopecheck.models.writes import set_value
from scopecheck.tools.inspect_jsonl import inspect_session

pytestmark = pytest.mark.rule("JSONL-26")

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "upstream-format4"
UPSTREAM_ROOT = FIXTURES / "_upstream_layout"
FOLDER = "--home-user-project--"
FILE = "2023-11-14T22-13-23-000Z_up-values.jsonl"
CWD = "/home/user/project"


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def upstream_root(tmp_path: Path) -> Path:
    root = tmp_path / "sessions"
    shutil.copytree(UPSTREAM_ROOT, root)
    return root


def test_names_follow_upstream() -> None:
    assert cwd_directory_name("/home/user/project") == FOLDER
    assert cwd_directory_name("C:\\work\\x") == "--C--work-x--"
    assert cwd_directory_name("/a/b") == cwd_directory_name("/a-b") == "--a-b--"
    assert iso_file_time(1700000003000) == "2023-11-14T22-13-23-000Z"
    assert iso_file_time(1700000003042) == "2023-11-14T22-13-23-042Z"


def test_an_upstream_repository_lists_and_opens_its_session(upstream_root: Path) -> None:
    repo = JsonlRepository(str(upstream_root), cwd=CWD, layout="upstream")
    assert repo.list() == ["up-values"]
    assert repo.path_of("up-values") == str(upstream_root / FOLDER / FILE)
    before = tree(upstream_root)
    storage = repo.open("up-values")
    assert storage.get_value(value("app.settings", "size")) == ValueRecord(11, b"14")
    storage.close()
    assert tree(upstream_root) == before


def test_create_fork_and_delete_in_upstream_layout(upstream_root: Path) -> None:
    repo = JsonlRepository(
        str(upstream_root), cwd=CWD, layout="upstream", clock=lambda: 1700000009123
    )
    storage = repo.create("new/one")
    storage.commit([set_value(value("n", "k"), 1)])
    storage.close()
    main = upstream_root / FOLDER / "2023-11-14T22-13-29-123Z_new%2Fone.jsonl"
    header = orjson.loads(main.read_bytes().split(b"\n")[0])
    assert header["id"] == "new/one" and header["cwd"] == CWD
    assert repo.list() == ["new/one", "up-values"]
    fork_id = repo.fork("up-values", TreeFork(id="child"))
    assert (upstream_root / FOLDER / "2023-11-14T22-13-29-123Z_child.jsonl").is_file()
    child = repo.open(fork_id)
    assert child.parent_session_id == "up-values"
    assert child.get_value(value("app.settings", "size")) == ValueRecord(11, b"14")
    child.close()
    repo.delete("new/one")
    assert not main.exists()
    assert repo.list() == ["child", "up-values"]
    reopened = JsonlRepository(str(upstream_root), cwd=CWD, layout="upstream")
    assert reopened.list() == ["child", "up-values"]


def test_another_cwd_sharing_the_lossy_folder_name_is_not_ours(upstream_root: Path) -> None:
    """``/home/user-project`` and ``/home/user/project`` share ``--home-user-project--``; each
    repository sees only the Sessions whose header names its own cwd, as upstream re-checks."""
    other = JsonlRepository(str(upstream_root), cwd="/home/user-project", layout="upstream")
    assert other.list() == []
    with pytest.raises(ScopecheckError) as info:
        other.open("up-values")
    assert info.value.code == "not_found"
    other.create("theirs").close()
    ours = JsonlRepository(str(upstream_root), cwd=CWD, layout="upstream")
    assert ours.list() == ["up-values"]
    assert other.list() == ["theirs"]


def test_a_file_whose_name_disagrees_with_its_header_is_not_that_session(
    upstream_root: Path,
) -> None:
    folder = upstream_root / FOLDER
    shutil.copyfile(folder / FILE, folder / "2023-11-14T22-13-23-000Z_someone-else.jsonl")
    (folder / "notes.txt").write_text("not a session")
    (folder / "broken.jsonl").write_bytes(b'{"v":4,"kind":"hea')
    repo = JsonlRepository(str(upstream_root), cwd=CWD, layout="upstream")
    assert repo.list() == ["up-values"]


def test_two_files_holding_one_session_are_reported_not_guessed(upstream_root: Path) -> None:
    folder = upstream_root / FOLDER
    shutil.copyfile(folder / FILE, folder / "2024-01-01T00-00-00-000Z_up-values.jsonl")
    repo = JsonlRepository(str(upstream_root), cwd=CWD, layout="upstream")
    before = tree(upstream_root)
    with pytest.raises(CorruptError) as info:
        repo.open("up-values")
    assert info.value.code == "corrupt"
    assert "2 session files" in str(info.value) and FILE in str(info.value)
    assert tree(upstream_root) == before


def test_an_unknown_layout_is_refused_with_a_code(tmp_path: Path) -> None:
    for bad in ("Upstream", "", object()):
        with pytest.raises(ScopecheckError) as info:
            JsonlRepository(str(tmp_path), layout=bad)  # type: ignore[arg-type]
        assert info.value.code == "invalid_layout"
    assert list(tmp_path.iterdir()) == []


def test_a_session_file_opens_by_its_path_whatever_its_name(tmp_path: Path) -> None:
    renamed = tmp_path / "copy of my session.jsonl"
    shutil.copyfile(UPSTREAM_ROOT / FOLDER / FILE, renamed)
    repo = JsonlRepository.at_file(str(renamed))
    assert repo.list() == ["up-values"]
    storage = repo.open("up-values")
    storage.commit([set_value(value("n", "k"), "v")])
    storage.close()
    again = JsonlRepository.at_file(str(renamed)).open("up-values")
    assert again.get_value(value("n", "k")) == ValueRecord(12, b'"v"')
    again.close()
    with pytest.raises(ScopecheckError) as info:
        repo.create("another")
    assert info.value.code == "invalid_session_id"
    with pytest.raises(ScopecheckError) as info:
        JsonlRepository.at_file(str(tmp_path / "missing.jsonl"))
    assert info.value.code == "not_found"
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(ScopecheckError) as info:
        JsonlRepository.at_file(str(tmp_path / "empty.jsonl"))
    assert info.value.code == "not_found"


@pytest.mark.parametrize("target", ["root", "folder", "file"])
def test_inspect_reads_an_upstream_folder(upstream_root: Path, target: str) -> None:
    path = {
        "root": upstream_root,
        "folder": upstream_root / FOLDER,
        "file": upstream_root / FOLDER / FILE,
    }[target]
    before = tree(upstream_root)
    report = inspect_session(str(path))
    assert report["session_id"] == "up-values"
    assert report["main"] == str(upstream_root / FOLDER / FILE)
    assert report["problems"] == [] and report["notes"] == []
    assert report["open"] == "succeeds"
    assert tree(upstream_root) == before


def test_inspect_names_the_files_when_a_folder_holds_several(upstream_root: Path) -> None:
    folder = upstream_root / FOLDER
    shutil.copyfile(folder / FILE, folder / "2024-01-01T00-00-00-000Z_other.jsonl")
    with pytest.raises(ScopecheckError) as info:
        inspect_session(str(folder))
    assert info.value.code == "not_found"
    assert "2 session files" in str(info.value) and FILE in str(info.value)


def test_inspect_of_a_flat_file_naming_another_id_reports_the_mismatch(tmp_path: Path) -> None:
    shutil.copyfile(UPSTREAM_ROOT / FOLDER / FILE, tmp_path / "other.jsonl")
    report = inspect_session(str(tmp_path / "other.jsonl"))
    assert report["session_id"] == "other"
    assert report["open"].startswith("fails")
