"""The filesystem layer behaves the same over the real OS and over pyfakefs (JSONL-10)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_os import FakeOsModule

from scopecheck.crashsim.fake_disk import (
    FakeDiskFileSystem,
    pyfakefs_appender,
    pyfakefs_writer,
)
from scopecheck.impl.fs import OsFileSystem, fs_code, split_lines
from scopecheck.models.errors import StorageIOError


@pytest.fixture(params=["real", "fake", "fake-fast-reader"])
def fs_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[OsFileSystem, str]]:
    if request.param == "real":
        yield OsFileSystem(), str(tmp_path)
    else:
        fake = FakeFilesystem()
        fake.create_dir("/root")
        fast = request.param == "fake-fast-reader"
        yield FakeDiskFileSystem(fake, fast={"read_bytes", "list_dir"} if fast else ()), "/root"


def test_line_reader_reports_unterminated_tail(fs_root: tuple[OsFileSystem, str]) -> None:
    """Complete lines end with a newline; a final fragment without one is the tail."""
    fs, root = fs_root
    path = root + "/f"
    fs.write_file(path, b"a\nbb\nccc")
    lines = fs.read_lines(path)
    assert lines.complete == [b"a", b"bb"] and lines.tail == b"ccc"
    assert lines.complete_size == 5
    assert split_lines(b"a\n").tail is None
    assert split_lines(b"").complete == []


def test_append_truncate_fsync_rename_unlink(fs_root: tuple[OsFileSystem, str]) -> None:
    """Each operation has exactly its one effect."""
    fs, root = fs_root
    path = root + "/f"
    fs.write_file(path, b"x\n")
    handle = fs.open_append(path)
    fs.append(handle, b"yy\n")
    fs.fsync(handle)
    assert fs.file_size(path) == 5
    fs.truncate(handle, 2)
    fs.close(handle)
    fs.close(handle)  # idempotent
    assert fs.read_bytes(path) == b"x\n"
    fs.write_file(root + "/g", b"new")
    fs.fsync_file(root + "/g")
    fs.rename(root + "/g", path)
    fs.fsync_dir(root)
    assert fs.read_bytes(path) == b"new" and not fs.exists(root + "/g")
    fs.unlink(path)
    assert not fs.exists(path)


def test_directories_and_recursive_remove(fs_root: tuple[OsFileSystem, str]) -> None:
    """create_dir is recursive; remove needs recursive for trees and force for missing paths."""
    fs, root = fs_root
    fs.create_dir(root + "/a/b/c")
    fs.create_dir(root + "/a/b/c")  # exists: fine
    fs.write_file(root + "/a/b/f", b"1")
    names = {(e.name, e.is_dir, e.is_file) for e in fs.list_dir(root + "/a/b")}
    assert names == {("c", True, False), ("f", False, True)}
    with pytest.raises(StorageIOError) as info:
        fs.remove(root + "/a")
    assert fs_code(info.value) == "exists"
    fs.remove(root + "/a", recursive=True)
    assert not fs.exists(root + "/a")
    fs.remove(root + "/a", recursive=True, force=True)
    with pytest.raises(StorageIOError) as info:
        fs.remove(root + "/a")
    assert fs_code(info.value) == "not_found"


def test_errors_carry_codes(fs_root: tuple[OsFileSystem, str]) -> None:
    """Failures are StorageIOError(io_error) with a FileSystem code, op and path."""
    fs, root = fs_root
    with pytest.raises(StorageIOError) as info:
        fs.read_bytes(root + "/missing")
    assert info.value.code == "io_error"
    assert info.value.details["fs_code"] == "not_found"
    assert info.value.details["op"] == "read"
    fs.create_dir(root + "/d")
    with pytest.raises(StorageIOError) as info:
        fs.open_append(root + "/d")
    assert fs_code(info.value) == "is_directory"
    with pytest.raises(StorageIOError) as info:
        fs.read_bytes(root + "/d")
    assert fs_code(info.value) == "is_directory"
    fs.write_file(root + "/empty", b"")
    assert fs.read_bytes(root + "/empty") == b""


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_prefix_lines_stream_any_chunk_size(fs_root: tuple[OsFileSystem, str], chunk: int) -> None:
    """The bounded prefix reader (forks read their source through it) yields the same lines
    whatever the chunk size, down to the prefix's last byte."""
    fs, root = fs_root
    path = root + "/f"
    data = b"a\nbb\n\nccc\nd"
    fs.write_file(path, data)
    for size in range(len(data) + 1):
        expected = [(line, True) for line in data[:size].split(b"\n")[:-1]]
        tail = data[:size].rsplit(b"\n", 1)[-1] if size else b""
        if tail:
            expected.append((tail, False))
        assert list(fs.iter_prefix_lines(path, size, chunk)) == expected, size


def test_failed_truncate_and_injected_append_name_the_operation(
    fs_root: tuple[OsFileSystem, str],
) -> None:
    """``details['op']`` says which operation failed; a partial append says how much got out."""
    from scopecheck.crashsim.tracing_fs import TracingFileSystem

    fs, root = fs_root
    path = root + "/f"
    fs.write_file(path, b"x\n")
    handle = fs.open_append(path)
    with pytest.raises(StorageIOError) as info:
        fs.truncate(handle, -1)
    assert info.value.details["op"] == "truncate" and info.value.details["path"] == path
    fs.close(handle)

    def fault(op: str, _path: str) -> object:
        return (OSError(28, "No space left on device"), 1) if op == "append" else None

    tracing = TracingFileSystem(fs, fault)
    handle = tracing.open_append(path)
    with pytest.raises(StorageIOError) as info:
        tracing.append(handle, b"yy\n")
    tracing.close(handle)
    assert info.value.details["op"] == "append"
    assert info.value.details["written"] == 1
    assert fs.read_bytes(path) == b"x\ny"
    assert ("!append", path) in tracing.trace


def test_tracing_remove_of_a_missing_path_needs_force(fs_root: tuple[OsFileSystem, str]) -> None:
    """The tracing wrapper keeps the FileSystem defaults: removing a missing path is
    ``not_found`` unless ``force``."""
    from scopecheck.crashsim.tracing_fs import TracingFileSystem

    fs, root = fs_root
    tracing = TracingFileSystem(fs)
    with pytest.raises(StorageIOError) as info:
        tracing.remove(root + "/missing")
    assert fs_code(info.value) == "not_found"
    tracing.remove(root + "/missing", force=True)


def test_failed_rename_names_source_and_target(fs_root: tuple[OsFileSystem, str]) -> None:
    fs, root = fs_root
    with pytest.raises(StorageIOError) as info:
        fs.rename(root + "/missing", root + "/t")
    assert fs_code(info.value) == "not_found"
    details = info.value.details
    assert (details["op"], details["path"], details["target"]) == (
        "rename",
        root + "/missing",
        root + "/t",
    )


def test_pyfakefs_lister_agrees_with_scandir() -> None:
    """The fast pyfakefs lister sees the same names and kinds as the fake ``scandir``, and
    fails the same way on a missing path or a file."""
    fake = FakeFilesystem()
    fake.create_dir("/r/d")
    fake.create_file("/r/f", contents="x")
    fake.create_symlink("/r/l", "/r/f")
    plain = OsFileSystem(FakeOsModule(fake))
    fast = FakeDiskFileSystem(fake, fast={"list_dir"})
    assert sorted(fast.list_dir("/r"), key=lambda e: e.name) == sorted(
        plain.list_dir("/r"), key=lambda e: e.name
    )
    for path, code in (("/r/missing", "not_found"), ("/r/f", "not_directory")):
        for fs in (plain, fast):
            with pytest.raises(StorageIOError) as caught:
                fs.list_dir(path)
            assert fs_code(caught.value) == code


def test_pyfakefs_renamer_moves_like_os_replace() -> None:
    """The fast pyfakefs rename replaces the target, keeps open handles on the moved file and
    leaves every unusual case (and its error) to ``os.replace``."""
    results = []
    for fast in (False, True):
        fake = FakeFilesystem()
        fake.create_dir("/r/d")
        fake.create_file("/r/old", contents="old\n")
        fs = FakeDiskFileSystem(fake, fast={"rename"} if fast else ())
        fs.write_file("/r/new.tmp", b"new\n")
        handle = fs.open_append("/r/new.tmp")
        fs.rename("/r/new.tmp", "/r/old")
        fs.append(handle, b"more\n")
        fs.close(handle)
        fs.rename("/r/old", "/r/d/moved")
        moved = fs.read_bytes("/r/d/moved")
        codes = []
        for source, target in (("/r/missing", "/r/x"), ("/r/d/moved", "/r/d"), ("/r/d", "/r/e")):
            try:
                fs.rename(source, target)
                codes.append("ok")
            except StorageIOError as exc:
                codes.append(str(fs_code(exc)))
        listing = sorted((e.name, e.is_dir) for e in fs.list_dir("/r"))
        results.append((moved, fs.exists("/r/new.tmp"), codes, listing))
    assert results[0] == results[1]
    assert results[1][0] == b"new\nmore\n" and results[1][1] is False


def test_pyfakefs_writer_creates_files_like_the_fake_os() -> None:
    """The fast pyfakefs writer gives a new file the same bytes and mode as the fake
    ``os.open`` + ``write``, and leaves existing targets and every error to the fake ``os``."""
    results = []
    for fast in (False, True):
        fake = FakeFilesystem()
        fake.create_dir("/r/d")
        fake.create_file("/r/old", contents="old\n")
        fake_os = FakeOsModule(fake)
        fs = FakeDiskFileSystem(fake, fast={"write_file"} if fast else ())
        fs.write_file("/r/new", b"new\n")
        fs.write_file("/r/old", b"over\n")
        handle = fs.open_append("/r/new")
        fs.append(handle, b"more\n")
        fs.close(handle)
        codes = []
        for path in ("/r/missing/x", "/r/d", "/r/old/x"):
            try:
                fs.write_file(path, b"x")
                codes.append("ok")
            except StorageIOError as exc:
                codes.append(str(fs_code(exc)))
        modes = [fake_os.stat(p).st_mode for p in ("/r/new", "/r/old")]
        contents = [fs.read_bytes(p) for p in ("/r/new", "/r/old")]
        results.append((contents, modes, codes, fs.file_size("/r/new")))
    assert results[0] == results[1]
    assert results[1][0] == [b"new\nmore\n", b"over\n"]


def test_fast_pyfakefs_writer_takes_the_common_case_itself() -> None:
    """The fast writer is only worth having if it handles the common case (a new file in an
    existing directory, a plain absolute path) itself: it says so by returning ``True``.  A
    path with a trailing slash, a ``.`` component or a doubled slash is left to the fake ``os``."""
    fake = FakeFilesystem()
    fake.create_dir("/r/d")
    write = pyfakefs_writer(fake)
    assert write("/r/d/new", b"x") is True
    assert fake.get_object("/r/d/new").byte_contents == b"x"
    for odd in ("/r/d/", "/r/./d/y", "/r//d/y", "/r/d/.hidden"):
        assert write(odd, b"y") is False


def test_pyfakefs_appender_opens_like_the_fake_os() -> None:
    """The fast pyfakefs append-open gives the same descriptor, bytes, mode and open-file
    table as the fake ``os.open(O_WRONLY | O_APPEND)``, and leaves every unusual case (and its
    error) to the fake ``os``: a missing file or parent, a directory, a file used as a
    directory, a symlinked file and a path through a symlinked directory."""
    results = []
    for fast in (False, True):
        fake = FakeFilesystem()
        fake.create_dir("/r/d")
        fake.create_file("/r/f", contents="x\n")
        fake.create_file("/r/d/g", contents="")
        fake.create_symlink("/r/l", "/r/f")
        fake.create_symlink("/r/ld", "/r/d")
        fake.chmod("/r/d/g", 0o600)
        fake_os = FakeOsModule(fake)
        fs = FakeDiskFileSystem(fake, fast={"open_append"} if fast else ())
        first = fs.open_append("/r/f")
        second = fs.open_append("/r/d/g")
        fs.append(first, b"yy\n")
        fs.append(second, b"z")
        fs.truncate(first, 4)
        fs.append(first, b"w\n")
        fs.close(second)
        third = fs.open_append("/r/d/g")  # takes the descriptor second gave back
        fs.append(third, b"more")
        via_links = [fs.open_append(p) for p in ("/r/l", "/r/ld/g")]
        for handle in via_links:
            fs.append(handle, b"!")
            fs.close(handle)
        codes = []
        for path in ("/r/missing", "/r/none/x", "/r/d", "/r/f/x"):
            try:
                fs.open_append(path)
                codes.append("ok")
            except StorageIOError as exc:
                codes.append(str(fs_code(exc)))
        fds = [first.fd, second.fd, third.fd, *(h.fd for h in via_links)]
        fs.close(first)
        fs.close(third)
        contents = [fs.read_bytes(p) for p in ("/r/f", "/r/d/g")]
        modes = [fake_os.stat(p).st_mode for p in ("/r/f", "/r/d/g")]
        still_open = [fd for fd, files in enumerate(fake.open_files) if fd > 2 and files]
        results.append((contents, modes, codes, fds, still_open))
    assert results[0] == results[1]
    assert results[1][0] == [b"x\nyyw\n!", b"zmore!"]
    # pyfakefs answers a path through a regular file with ENOENT; what counts is agreement.
    assert results[1][2] == ["not_found", "not_found", "is_directory", "not_found"]


def test_fast_pyfakefs_appender_takes_the_common_case_itself() -> None:
    """The fast append-open is only worth having if it opens an existing regular file at a
    plain absolute path itself (a descriptor); a missing file, a directory, a symlink on the
    way or an unusual path give ``None`` (the fake ``os`` then opens it, or fails)."""
    fake = FakeFilesystem()
    fake.create_dir("/r/d")
    fake.create_file("/r/d/f", contents="x")
    fake.create_symlink("/r/l", "/r/d")
    open_append = pyfakefs_appender(fake)
    fd = open_append("/r/d/f")
    assert isinstance(fd, int) and fake.get_open_file(fd).get_object() is fake.get_object("/r/d/f")
    for odd in ("/r/d/missing", "/r/d", "/r/l/f", "/r/./d/f", "/r//d/f", "/r/d/f/", "/r/x/f"):
        assert open_append(odd) is None


def test_a_failing_fast_writer_is_reported_as_a_write_error() -> None:
    """An ``OSError`` from the fast write path is wrapped like one from ``os.open``: the error
    names the operation, the path and the filesystem code."""

    def full(path: str, data: bytes) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    fake = FakeFilesystem()
    fake.create_dir("/r")
    fs = FakeDiskFileSystem(fake, fast={"write_file"})
    fs.fast_write = full
    with pytest.raises(StorageIOError) as info:
        fs.write_file("/r/f", b"x")
    assert info.value.details["op"] == "write" and info.value.details["path"] == "/r/f"
    assert fs_code(info.value) == "no_space"


def test_exists_and_is_dir_report_errors_other_than_absence(tmp_path: Path) -> None:
    """Only a missing path is ``False``; any other failure to look (here a name too long for
    the filesystem) is an error naming the operation and the path, not a silent answer."""
    fs = OsFileSystem()
    long = str(tmp_path / ("x" * 300))
    for op, call in (("exists", fs.exists), ("is_dir", fs.is_dir)):
        with pytest.raises(StorageIOError) as info:
            call(long)
        assert info.value.details["op"] == op and info.value.details["path"] == long
        assert fs_code(info.value) == "invalid"  # ENAMETOOLONG
    assert fs.exists(str(tmp_path / "missing")) is False
    assert fs.is_dir(str(tmp_path / "missing")) is False


class _GrowingOs:
    """An ``os`` whose ``fstat`` reports the size the file had before a concurrent writer
    appended to it (the race read_bytes must survive)."""

    def __init__(self, stale_size: int) -> None:
        self.stale_size = stale_size

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fstat(self, fd: int) -> Any:
        info = os.fstat(fd)
        return SimpleNamespace(st_mode=info.st_mode, st_size=self.stale_size)


@pytest.mark.parametrize("stale_size", [0, 10])
def test_read_bytes_returns_everything_when_the_file_grew_after_fstat(
    tmp_path: Path, stale_size: int
) -> None:
    """A file that grew between ``fstat`` and ``read`` (or a file whose size ``fstat`` does not
    know, 0) is read to its end, not cut at the size first seen."""
    path = tmp_path / "f"
    data = bytes(range(256)) * 400  # 100 KiB: more than the first read of an unknown size
    path.write_bytes(data)
    assert OsFileSystem(_GrowingOs(stale_size)).read_bytes(str(path)) == data
