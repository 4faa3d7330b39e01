"""The persistence model every crash source shares (CRASH-SYS-1): what survives a process
crash and what a power loss may leave, operation by operation."""

from __future__ import annotations

import random

import pytest

from scopecheck.crashsim.persistence import FileOp, Image, Volume

pytestmark = pytest.mark.rule("CRASH-SYS-1")


def run(*ops: FileOp) -> Volume:
    volume = Volume()
    for op in ops:
        volume.apply(op)
    return volume


def power(volume: Volume) -> dict[str, Image]:
    return dict(volume.power_images(random.Random(0)))


def open_(path: str, handle: int = 1, *flags: str) -> FileOp:
    return FileOp("open", path, handle=handle, flags=frozenset(flags))


def write(data: bytes, handle: int = 1, offset: int | None = None) -> FileOp:
    return FileOp("write", handle=handle, offset=offset, data=data)


def sync(handle: int = 1) -> FileOp:
    return FileOp("sync", handle=handle)


def test_a_process_crash_keeps_every_completed_call() -> None:
    volume = run(open_("a", 1, "create"), write(b"hello"))
    assert volume.process_image().files == {"a": b"hello"}


def test_power_loss_keeps_only_what_was_synced_unless_it_happened_to_reach_the_disk() -> None:
    volume = run(
        FileOp("open", "", handle=9, flags=frozenset({"directory"})),
        open_("a", 1, "create"),
        write(b"one"),
        sync(),
        FileOp("sync", handle=9),
        write(b"two"),
    )
    images = power(volume)
    assert images["strict"].files == {"a": b"one"}
    assert images["data-kept"].files == {"a": b"onetwo"}
    torn = {name: image.files["a"] for name, image in images.items() if name.startswith("torn:")}
    assert torn and set(torn.values()) <= {b"onet", b"onetw"}


def test_a_new_name_is_durable_only_once_its_directory_is_synced() -> None:
    """The file's data was fsynced, its directory was not: after power loss it may be gone."""
    volume = run(open_("a", 1, "create"), write(b"x"), sync())
    images = power(volume)
    assert images["strict"].files == {}
    assert images["entries-kept"].files == {"a": b"x"}
    volume.apply(FileOp("open", "", handle=2, flags=frozenset({"directory"})))
    volume.apply(sync(2))
    assert power(volume)["strict"].files == {"a": b"x"}


def test_rename_without_a_directory_sync_leaves_the_old_file_after_power_loss() -> None:
    """Write a temp file, fsync it, rename it over the old one -- and skip the directory fsync."""
    start = Volume(Image({"data": b"old"}))
    for op in (
        open_("data.tmp", 1, "create"),
        write(b"new"),
        sync(),
        FileOp("rename", "data.tmp", "data"),
    ):
        start.apply(op)
    assert start.process_image().files == {"data": b"new"}
    images = power(start)
    assert images["strict"].files == {"data": b"old"}
    assert images["entries-kept"].files == {"data": b"new"}


def test_rename_before_the_data_is_synced_can_leave_an_empty_file() -> None:
    """The zero-length-file-after-rename failure: the entry reached the disk, the data did not."""
    start = Volume(Image({"data": b"old"}))
    for op in (
        open_("data.tmp", 1, "create"),
        write(b"new"),
        FileOp("rename", "data.tmp", "data"),
        FileOp("open", "", handle=2, flags=frozenset({"directory"})),
        sync(2),
    ):
        start.apply(op)
    assert power(start)["strict"].files == {"data": b""}


def test_unlink_link_mkdir_and_truncate_follow_the_inode() -> None:
    volume = run(
        FileOp("mkdir", "d"),
        open_("d/f", 1, "create"),
        write(b"abcdef"),
        FileOp("link", "d/f", "g"),
        FileOp("unlink", "d/f"),
        FileOp("truncate", handle=1, size=3),
        write(b"Z", offset=1),
        write(b"!"),  # no offset: at the end (O_APPEND)
    )
    image = volume.process_image()
    assert image.files == {"g": b"aZc!"}
    assert image.dirs == frozenset({"", "d"})


def test_open_with_truncate_empties_the_file_and_extend_only_grows_it() -> None:
    start = Volume(Image({"f": b"content"}))
    start.apply(open_("f", 1, "trunc"))
    assert start.process_image().files == {"f": b""}
    start.apply(FileOp("truncate", handle=1, size=4, flags=frozenset({"extend"})))
    start.apply(FileOp("truncate", handle=1, size=2, flags=frozenset({"extend"})))
    assert start.process_image().files == {"f": b"\0\0\0\0"}


def test_sync_of_everything_makes_every_file_and_directory_durable() -> None:
    volume = run(open_("a", 1, "create"), write(b"x"), FileOp("syncall"))
    assert power(volume)["strict"].files == {"a": b"x"}


def test_an_image_loaded_as_the_start_is_durable_and_reads_back() -> None:
    image = Image({"a": b"1", "d/b": b"2"}, frozenset({"", "d"}))
    volume = Volume(image)
    assert volume.process_image() == image
    assert power(volume)["strict"] == image
