"""Files no reopen reads are torn once per crash point (CRASH-SYS-19): what a reopen reads is
learned from traced reopens, by file shape; a file of a shape no reopen read -- an info log for
people, as RocksDB's ``LOG`` -- has one tear a point, every other file its full sample.  The
store of ``info_log_store.py`` shows both ways: its info log is named as tried once when it is
never read, and torn in full -- its tears then failing the reopen -- when it is."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from scopecheck import validate
from scopecheck.crashsim.explore import Images, point_images
from scopecheck.crashsim.persistence import FileOp, Volume
from scopecheck.crashsim.points import Torn, TornCall
from scopecheck.crashsim.strace import parse
from scopecheck.crashsim.syscall_ops import extract
from scopecheck.crashsim.unread import Unread, shape

pytestmark = pytest.mark.rule("CRASH-SYS-19")

STORE = Path(__file__).with_name("info_log_store.py")


def hexed(text: str) -> str:
    return "".join(f"\\x{b:02x}" for b in text.encode())


def opened(number: int, path: str, flags: str) -> str:
    return (f'7 openat(AT_FDCWD</w>, "{hexed(path)}", {flags}, 0644) = '
            f"{number}<{hexed(path)}>")  # fmt: skip


def test_a_file_counts_as_read_when_opened_in_a_mode_that_reads() -> None:
    lines = [
        opened(3, "/r/data.log", "O_RDONLY|O_CLOEXEC"),
        opened(4, "/r/MANIFEST-000005", "O_RDWR|O_CREAT"),
        opened(5, "/r/LOG", "O_WRONLY|O_CREAT|O_APPEND"),
        opened(6, "/r/OPTIONS-000007", "O_RDWR|O_CREAT|O_TRUNC"),
        opened(7, "/r/sub", "O_RDONLY|O_DIRECTORY"),
        opened(8, "/r/odd", "O_CLOEXEC"),  # no access mode the trace names: taken as reading
        opened(9, "/tmp/elsewhere", "O_RDONLY"),
    ]
    timeline = extract(parse(line + "\n" for line in lines), "/r", "/w")
    assert timeline.read == {"data.log", "MANIFEST-000005", "odd"}


def test_files_are_matched_by_shape_so_numbered_files_of_a_read_kind_are_read() -> None:
    unread = Unread.of(["s.db/MANIFEST-000005", "s.db/000008.log", "CURRENT"])
    assert shape("s.db/LOG.old.1796490840960113") == "LOG.old.#"
    assert not unread("s.db.new/MANIFEST-000001")
    assert not unread("s.db/000012.log")
    assert not unread("elsewhere/CURRENT")
    assert unread("s.db/LOG") and unread("s.db/LOG.old.17964")


def _volume() -> Volume:
    volume = Volume()
    for op in [
        FileOp("open", "LOG", handle=1, flags=frozenset({"create"})),
        FileOp("open", "data", handle=2, flags=frozenset({"create"})),
        FileOp("open", "", handle=3, flags=frozenset({"directory"})),
        FileOp("sync", handle=3),  # both names durable, their data not
        FileOp("write", handle=1, data=b"info one\n"),
        FileOp("write", handle=2, data=b"record one\n"),
        FileOp("write", handle=1, data=b"info two\n"),
        FileOp("write", handle=2, data=b"record two\n"),
    ]:
        volume.apply(op)
    return volume


def _tears(unread: Unread | None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for variant, _ in _volume().power_images(random.Random(0), unread=unread):
        if isinstance(variant, Torn):
            found.setdefault(variant.path, []).append(variant.name)
    return found


def test_a_file_no_reopen_reads_is_torn_once_and_every_other_file_in_full() -> None:
    full = _tears(None)
    once = _tears(Unread.of(["data"]))
    assert len(full["LOG"]) > 1
    assert once["LOG"] == ["torn@1:LOG:1:4"]  # the middle cut of its last unsynced write
    assert once["data"] == full["data"]


def test_a_write_in_flight_to_an_unread_file_is_torn_once() -> None:
    volume = _volume()
    ops = [FileOp("write", handle=1, data=b"a long line of the info log\n")]
    every = [v for v, _ in point_images(volume, ops, 0, 1) if isinstance(v, TornCall)]
    once = [v for v, _ in point_images(volume, ops, 0, 1, Images(unread=Unread.of(["data"])))
            if isinstance(v, TornCall)]  # fmt: skip
    assert len(every) > 1 and once == [every[len(every) // 2]]


def test_a_store_that_never_reads_its_info_log_is_told_so_and_passes(tmp_path: Path) -> None:
    verdict = validate(f"{STORE}:make_backend", budget=5, failures_dir=tmp_path, seed=1,
                       examples=1, require=("crash",))  # fmt: skip
    assert verdict.outcome == "passed", [f.error for f in verdict.failures]
    assert any(limit.startswith("sampling: no reopen reads LOG ") for limit in verdict.limits)


def test_a_store_that_reads_its_info_log_has_it_torn_in_full_and_fails(tmp_path: Path) -> None:
    """The planted bug: parsing every line of the info log on open.  Its tears are tried, as
    the traced reopens show the log read, and a torn line fails the reopen (CRASH-FS-1)."""
    verdict = validate(f"{STORE}:make_log_reading_backend", budget=5, failures_dir=tmp_path,
                       seed=1, examples=1)  # fmt: skip
    assert not any(limit.startswith("sampling:") for limit in verdict.limits)
    counts = verdict.phases["crash exploration"].counts  # what scopecheck bench stores reads
    assert 0 < counts["first_failure_ms"] <= verdict.seconds * 1000
    assert 0 < counts["fault_run_ms"] <= verdict.phases["crash exploration"].seconds * 1000
    variants = {_variant(f.reproducer) for f in verdict.failures if f.rule == "CRASH-FS-1"}
    assert any(v.startswith(("torn@1:s.info/LOG:", "torn-call:s.info/LOG:")) for v in variants), (
        variants
    )


def _variant(reproducer: str) -> str:
    """The crash variant a reproducer file (the last word of ``scopecheck replay FILE``)
    rebuilds."""
    variant = orjson.loads(Path(reproducer.split()[-1]).read_bytes())["variant"]
    assert isinstance(variant, str)
    return variant


@pytest.mark.long
def test_a_store_that_trips_on_its_own_torn_data_fails_though_its_info_log_is_unread(
    tmp_path: Path,
) -> None:
    """Tearing the unread log once leaves the data file's tears whole: a reader that parses a
    torn last data line fails (CRASH-FS-1)."""
    verdict = validate(f"{STORE}:make_strict_reader_backend", budget=5, failures_dir=tmp_path,
                       seed=1, examples=1)  # fmt: skip
    assert any(limit.startswith("sampling: no reopen reads LOG ") for limit in verdict.limits)
    assert "CRASH-FS-1" in {f.rule for f in verdict.failures}


@pytest.mark.rule("CRASH-FS-6", "INSTALL-24")
def test_a_power_loss_is_told_by_the_files_it_lost_not_the_file_its_image_is_named_after(
    tmp_path: Path,
) -> None:
    """A store that never fsyncs its data: the image ``only:s.info/LOG`` keeps the info log's
    unsynced lines and loses the data's, so its failure says the data file lost its data (and
    not the log), as LevelDB's did with ``LOG.old``; the replay says it file by file."""
    verdict = validate(f"{STORE}:make_unsynced_data_backend", budget=5, failures_dir=tmp_path,
                       seed=1, examples=1, require=("crash",))  # fmt: skip
    lost = [f for f in verdict.failures if f.rule == "CRASH-FS-6"]
    assert lost, [f.error for f in verdict.failures]
    for failure in lost:
        record = orjson.loads(Path(failure.reproducer.split()[-1]).read_bytes())
        named = record["variant"]
        assert f"after power loss ({named}; data lost: " in failure.error, failure.error
        said = failure.error.split("; data lost: ", 1)[1].split(")", 1)[0].split(", ")
        assert "s.info/data.jsonl" in said, failure.error
        if named.startswith("only:"):  # the file the image keeps is not one it lost
            assert named.removeprefix("only:") not in said, failure.error
    only = [f for f in lost if _variant(f.reproducer) == "only:s.info/LOG"]
    assert only, [f.error for f in lost]
    replayed = subprocess.run(
        [sys.executable, "-m", "scopecheck", "replay", only[0].reproducer.split()[-1]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    told = replayed.stdout.split("what the power loss lost against the page cache:", 1)[1]
    assert "s.info/data.jsonl: " in told and "s.info/LOG:" not in told, replayed.stdout
