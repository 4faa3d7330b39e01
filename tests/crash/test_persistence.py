"""The persistence model every crash source shares (CRASH-SYS-1): what survives a process
crash and what a power loss may leave, operation by operation."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from scopecheck.crashsim.persistence import (
    BTRFS,
    EXT4_ORDERED,
    POSIX,
    Device,
    FileOp,
    Image,
    Profile,
    Volume,
    call_cuts,
    coarser_tears,
    power_image,
)
from scopecheck.crashsim.points import Names, ProcessCrash, Strict, Torn, TornCall, Variant

pytestmark = pytest.mark.rule("CRASH-SYS-1")


def run(*ops: FileOp) -> Volume:
    volume = Volume()
    for op in ops:
        volume.apply(op)
    return volume


def named(images: Iterable[tuple[Variant, Image]]) -> dict[str, Image]:
    """Images by their variants' names."""
    return {variant.name: image for variant, image in images}


def power(volume: Volume) -> dict[str, Image]:
    return named(volume.power_images(random.Random(0)))


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
    torn = {name: image.files["a"] for name, image in images.items() if name.startswith("torn@1:")}
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


def syncfail(handle: int = 1) -> FileOp:
    return FileOp("syncfail", handle=handle)


def durable_root(*ops: FileOp) -> Volume:
    """``ops`` after a synced root directory holding ``a`` and ``b``: only data is in play."""
    volume = Volume(Image({"a": b"", "b": b""}))
    for op in (open_("a", 1), open_("b", 2), *ops):
        volume.apply(op)
    return volume


@pytest.mark.rule("CRASH-SYS-11")
def test_a_failed_fsync_loses_its_writes_even_after_a_later_successful_fsync() -> None:
    volume = durable_root(write(b"AAAA"), syncfail(), sync())
    assert volume.process_image().files["a"] == b"AAAA"  # the page cache still shows them
    assert {image.files["a"] for image in power(volume).values()} == {b""}


@pytest.mark.rule("CRASH-SYS-11")
def test_writing_the_lost_bytes_again_makes_them_durable_at_the_next_fsync() -> None:
    volume = durable_root(write(b"AAAA"), syncfail(), write(b"AAAA", offset=0), sync())
    assert power(volume)["strict"].files["a"] == b"AAAA"


@pytest.mark.rule("CRASH-SYS-11")
def test_a_partial_rewrite_brings_back_only_the_range_written() -> None:
    start = Volume(Image({"a": b"xxxx"}))
    for op in (open_("a", 1), write(b"AAAA", offset=0), syncfail(), write(b"B", offset=1), sync()):
        start.apply(op)
    assert start.process_image().files["a"] == b"ABAA"
    assert power(start)["strict"].files["a"] == b"xBxx"


@pytest.mark.rule("CRASH-SYS-11")
def test_before_the_retry_no_power_image_has_the_lost_write_and_later_writes_stay_pending() -> None:
    volume = durable_root(write(b"AAAA"), syncfail(), write(b"CC", offset=4))
    images = power(volume)
    assert images["data-kept"].files["a"] == b"\0\0\0\0CC"  # the size reached it, A did not
    assert all(b"A" not in image.files["a"] for image in images.values())


@pytest.mark.rule("CRASH-SYS-12")
def test_a_write_tears_only_at_sector_or_block_boundaries_of_its_absolute_offset() -> None:
    volume = durable_root(write(b"x" * 2000, offset=100))
    sectors = {
        variant.name: image.files["a"]
        for variant, image in volume.power_images(random.Random(0), device=Device(tear=512))
        if isinstance(variant, Torn)
    }
    assert sorted(sectors) == [f"torn@512:a:0:{cut}" for cut in ("1436", "1948", "412", "924")]
    assert sorted(len(data) for data in sectors.values()) == [512, 1024, 1536, 2048]
    blocks = named(volume.power_images(random.Random(0), device=Device(tear=4096)))
    assert not [name for name in blocks if name.startswith("torn@")]  # no block boundary inside


@pytest.mark.rule("CRASH-SYS-12")
def test_a_long_write_is_cut_at_no_more_than_eight_sampled_boundaries() -> None:
    volume = durable_root(write(b"x" * 100_000))
    torn = [
        variant
        for variant, _ in volume.power_images(random.Random(3), device=Device(tear=4096))
        if isinstance(variant, Torn)
    ]
    assert {(t.granularity, t.path, t.change) for t in torn} == {(4096, "a", 0)}
    assert len(torn) == 8 and all(t.cut % 4096 == 0 for t in torn)


def test_a_device_tears_at_a_positive_number_of_bytes() -> None:
    with pytest.raises(ValueError, match="'tear' must be a positive number of bytes"):
        Device(tear=0)


@pytest.mark.rule("CRASH-SYS-12")
def test_a_reordering_device_can_keep_a_later_write_to_one_file_and_lose_an_earlier_one() -> None:
    volume = durable_root(write(b"A", handle=1), write(b"B", handle=2))
    images = power(volume)
    assert images["only:b"].files == {"a": b"", "b": b"B"}
    assert images["only:a"].files == {"a": b"A", "b": b""}
    ordered = named(volume.power_images(random.Random(0), device=Device(reorder=False)))
    assert {name for name in ordered if not name.startswith("torn@")} == {
        "strict",
        "data-kept",
        "prefix:1",
    }  # entries-kept equals strict here
    assert ordered["prefix:1"].files == {"a": b"A", "b": b""}
    assert all(image.files != {"a": b"", "b": b"B"} for image in ordered.values())


@pytest.mark.rule("CRASH-SYS-12")
def test_without_reordering_a_torn_write_keeps_every_earlier_write_of_every_file() -> None:
    volume = durable_root(write(b"AAAA", handle=1), write(b"BBBB", handle=2))
    ordered = named(volume.power_images(random.Random(0), device=Device(reorder=False)))
    assert ordered["torn@1:b:0:2"].files == {"a": b"AAAA", "b": b"BB"}
    assert power(volume)["torn@1:b:0:2"].files == {
        "a": b"",
        "b": b"BB",
    }


OPS = (
    FileOp("open", "", handle=9, flags=frozenset({"directory"})),
    open_("a", 1, "create"),
    write(b"a" * 5000),
    FileOp("sync", handle=9),
    open_("b", 2, "create"),
    FileOp("sync", handle=9),
    write(b"b" * 700, handle=2),
    FileOp("truncate", handle=1, size=4500),
    write(b"c" * 9000, handle=1, offset=300),
    syncfail(1),
    write(b"d" * 1500, handle=2, offset=100),
    FileOp("rename", "b", "c"),
    sync(2),
    write(b"e" * 3, handle=1),
)


@pytest.mark.rule("CRASH-SYS-9", "CRASH-SYS-12")
@pytest.mark.parametrize(
    "device", [Device(), Device(tear=512), Device(tear=4096), Device(tear=512, reorder=False)]
)
def test_every_power_image_is_rebuilt_exactly_from_its_variant_name(device: Device) -> None:
    rng = random.Random(7)  # shared across crash points, as an exploration does
    volume = Volume()
    seen: set[str] = set()
    for k, op in enumerate([*OPS, None]):
        images = list(volume.power_images(rng, device=device))
        assert len(images) <= 3 + 16 + 64
        for variant, image in images:
            assert power_image(OPS, k, variant, seed=123, device=device) == image, variant
            assert power_image(OPS, k, variant.name, device=device) == image, variant
            seen.add(variant.name.split(":")[0])
        assert power_image(OPS, k, ProcessCrash()) == volume.process_image()
        assert power_image(OPS, k, "process") == volume.process_image()
        if op is not None:
            volume.apply(op)
    side = "only" if device.reorder else "prefix"
    assert seen == {"strict", "data-kept", "entries-kept", side, f"torn@{device.tear}"}
    with pytest.raises(ValueError, match="no power-loss image"):
        power_image(OPS, 4, "torn@1:a:0:0", device=device)


def test_a_variant_the_device_cannot_produce_is_refused() -> None:
    with pytest.raises(ValueError, match="no power-loss image 'only:a'"):
        power_image(OPS, 3, "only:a", device=Device(reorder=False))
    with pytest.raises(ValueError, match="cannot be cut at 100"):
        power_image(OPS, 4, "torn@512:a:0:100")


@pytest.mark.rule("CRASH-SYS-12")
def test_a_write_torn_at_one_byte_is_offered_again_at_block_then_sector_boundaries() -> None:
    ops = (open_("a", 1, "create"), FileOp("syncall"), write(b"x" * 10_000))
    found = coarser_tears(ops, 3, Torn(1, "a", 0, 5000))
    assert [(g, torn.name) for g, torn, _ in found] == [
        (4096, "torn@4096:a:0:4096"),
        (4096, "torn@4096:a:0:8192"),
        (512, "torn@512:a:0:4608"),
        (512, "torn@512:a:0:5120"),
    ]
    assert [len(image.files["a"]) for _, _, image in found] == [4096, 8192, 4608, 5120]
    volume = Volume()
    for op in ops:
        volume.apply(op)
    assert coarser_tears(volume, 3, Torn(1, "a", 0, 5000)) == found
    small = (open_("a", 1, "create"), FileOp("syncall"), write(b"x" * 100, offset=10))
    assert coarser_tears(small, 3, Torn(1, "a", 0, 50)) == []  # it cannot tear at a sector


# -- a write in flight at a process crash -------------------------------------------------------


def test_a_short_write_in_flight_at_a_process_crash_tears_at_every_byte() -> None:
    ops = [open_("a", 1, "create"), write(b"old"), write(b"hello")]
    volume = run(*ops[:2])
    cuts = call_cuts(b"hello", random.Random(0))
    assert cuts == [1, 2, 3, 4]
    torn = dict(volume.torn_calls(ops[2], cuts))
    assert torn == {
        TornCall("a", cut): Image({"a": b"old" + b"hello"[:cut]}) for cut in range(1, 5)
    }
    # A process crash keeps everything else: unsynced data, unsynced names.
    assert not any(variant.power_loss for variant in torn)
    assert Strict().power_loss and not ProcessCrash().power_loss


def test_a_write_in_flight_over_existing_bytes_keeps_the_rest_of_the_file() -> None:
    volume = run(open_("a", 1, "create"), write(b"0123456789"))
    op = write(b"ab", offset=3)
    assert named(volume.torn_calls(op, [1])) == {"torn-call:a:1": Image({"a": b"012a456789"})}
    # A cut that leaves the file as it was is the process image, not offered again.
    same = write(b"34x", offset=3)
    assert list(volume.torn_calls(same, [1, 2])) == []


def test_a_long_write_in_flight_is_cut_at_its_boundaries_and_a_seeded_sample() -> None:
    data = b"x" * 99 + b"\n" + b"y" * 9000
    cuts = call_cuts(data, random.Random(3))
    assert {1, 100, len(data) // 2, 4096, 8192, len(data) - 1} <= set(cuts)
    assert len(cuts) <= 6 + 6 and all(0 < cut < len(data) for cut in cuts)
    assert cuts == call_cuts(data, random.Random(3))
    assert call_cuts(b"z" * 300, random.Random(0), short=300) == list(range(1, 300))


def test_only_a_write_through_a_named_file_tears_in_flight() -> None:
    volume = run(open_("a", 1, "create"), write(b"a"))
    assert list(volume.torn_calls(sync(), [1])) == []
    assert list(volume.torn_calls(write(b"xy", handle=7), [1])) == []
    gone = run(open_("a", 1, "create"), FileOp("unlink", "a"))
    assert list(gone.torn_calls(write(b"xy"), [1])) == []


def test_every_torn_call_is_rebuilt_exactly_from_its_name() -> None:
    ops = [
        FileOp("mkdir", "d"),
        open_("d/log", 1, "create"),
        write(b"first\n"),
        sync(),
        FileOp("rename", "d/log", "d/log2"),
        write(b"second line\n"),
    ]
    volume = run(*ops[:5])
    torn = list(volume.torn_calls(ops[5], call_cuts(ops[5].data, random.Random(0))))
    assert len(torn) == len(b"second line\n") - 1
    for variant, image in torn:
        assert variant.path == "d/log2"
        assert power_image(ops, 5, variant) == image
        assert power_image(ops, 5, variant.name) == image
        assert power_image(ops, 5, variant, seed=99) == image
    for wrong in ("torn-call:d/log:3", "torn-call:d/log2:0", "torn-call:d/log2:12", "torn-call:x"):
        with pytest.raises(ValueError):
            power_image(ops, 5, wrong)
    with pytest.raises(ValueError):
        power_image(ops, 4, "torn-call:d/log2:3")  # a rename is not a write
    with pytest.raises(ValueError):
        power_image(ops, len(ops), "torn-call:d/log2:3")


def test_the_jsonl_sweep_tears_the_append_in_flight_in_both_modes() -> None:
    from scopecheck.crashsim.jsonl_sweep import MODES, crash_state, jsonl_states, trace
    from scopecheck.crashsim.jsonl_workloads import BUNDLED

    tr = trace(next(iter(BUNDLED.values()))())
    for mode in MODES:
        states = [s for s in jsonl_states(tr, mode) if s.variant.startswith("torn-call:")]
        assert states and all(not s.power_loss and s.family == "torn-call" for s in states)
        for state in states[:: max(1, len(states) // 20)]:
            again = crash_state(tr.file_ops, tr.initial, state.op_index, state.variant, ())
            assert again is not None and again.state == state.state
            assert state.offset == int(state.variant.rsplit(":", 1)[1])


# -- some of a directory's unsynced changes (CRASH-SYS-20) -------------------------------------

#: A synced file renamed into place, then the old generation unlinked, with no directory fsync
#: after either (LevelDB's ``CURRENT`` swap): ops 3 (the rename) and 4 (the unlink).
SWAP = (
    open_("new", 1, "create"),
    write(b"2"),
    sync(),
    FileOp("rename", "new", "current"),
    FileOp("unlink", "old"),
)
SWAP_START = Image({"current": b"1", "old": b"gen1"})


def swapped(profile: Profile) -> Volume:
    volume = Volume(SWAP_START, profile)
    for op in SWAP:
        volume.apply(op)
    return volume


@pytest.mark.rule("CRASH-SYS-20")
@pytest.mark.parametrize("profile", [POSIX, BTRFS], ids=lambda p: p.name)
def test_without_ordered_names_a_later_unlink_is_kept_and_an_earlier_rename_lost(
    profile: Profile,
) -> None:
    volume = swapped(profile)
    given = [image.files for _, image in volume.power_images(random.Random(0))]
    for variant, files in [
        (Names("but", 3), {"current": b"1", "new": b"2"}),  # the rename lost, the unlink kept
        # the unlink alone (under btrfs the fsync of "new" made its name durable)
        (Names("only", 4), {"current": b"1", **({"new": b"2"} if profile.fsync_names else {})}),
        (Names("only", 3), {"current": b"2", "old": b"gen1"}),
        (Names("before", 3), {"current": b"1", "old": b"gen1", "new": b"2"}),
    ]:
        assert volume.power_image(variant).files == files
        assert files in given, variant


@pytest.mark.rule("CRASH-SYS-20", "CRASH-SYS-14")
def test_an_ordered_journal_keeps_a_prefix_of_the_directory_changes_only() -> None:
    found = list(swapped(EXT4_ORDERED).power_images(random.Random(0)))
    kinds = {v.name.partition(":")[0] for v, _ in found if v.family == "names"}
    assert kinds == {"names-before"}
    for _, image in found:
        assert "old" in image.files or image.files.get("current") == b"2"
    with pytest.raises(ValueError, match="no power-loss image 'names-but:3'"):
        power_image(SWAP, len(SWAP), "names-but:3", start=SWAP_START, profile=EXT4_ORDERED)


@pytest.mark.rule("CRASH-SYS-20")
def test_a_rename_is_kept_or_lost_whole() -> None:
    """One operation's changes of its two names reach the disk together: no image holds the
    file under both names, none under neither."""
    for _, image in swapped(POSIX).power_images(random.Random(0)):
        assert ("new" in image.files) != (image.files.get("current") == b"2") or (
            "new" not in image.files and image.files.get("current") == b"1"
        )


@pytest.mark.rule("CRASH-SYS-20")
def test_a_directory_fsync_makes_only_its_own_changes_durable() -> None:
    volume = run(
        FileOp("mkdir", "d"),
        FileOp("open", "", handle=9, flags=frozenset({"directory"})),
        sync(9),
        open_("d/a", 1, "create"),
        open_("b", 2, "create"),
        open_("d/c", 3, "create"),
        sync(9),  # the root: b durable; d's two creates not
    )
    images = named(volume.power_images(random.Random(0)))
    assert images["strict"].files == {"b": b""}
    names = {name: image.files for name, image in images.items() if name.startswith("names")}
    assert {"names-before:5", "names-but:3"} <= names.keys()
    assert sorted(map(sorted, names.values())) == [["b", "d/a"], ["b", "d/c"]]
    assert not [name for name in names if name.endswith(":4")]  # b's create is durable


@pytest.mark.rule("CRASH-SYS-20", "CRASH-SYS-14")
def test_under_btrfs_a_synced_files_new_name_is_no_longer_an_unsynced_change() -> None:
    volume = Volume(SWAP_START, BTRFS)
    for op in (*SWAP[:2], FileOp("rename", "new", "current"), FileOp("unlink", "old"), sync()):
        volume.apply(op)
    for variant, image in volume.power_images(random.Random(0)):
        assert image.files.get("current") == b"2", variant  # the log tree persisted the rename


@pytest.mark.rule("CRASH-SYS-20", "CRASH-SYS-9")
@pytest.mark.parametrize("profile", [POSIX, EXT4_ORDERED, BTRFS], ids=lambda p: p.name)
def test_every_names_image_is_rebuilt_from_its_name(profile: Profile) -> None:
    found = [(v, i) for v, i in swapped(profile).power_images(random.Random(0))]
    assert [v for v, _ in found if v.family == "names"]
    for variant, image in found:
        rebuilt = power_image(SWAP, len(SWAP), variant.name, start=SWAP_START, profile=profile)
        assert rebuilt == image, variant


@pytest.mark.rule("CRASH-SYS-20")
def test_many_unsynced_changes_give_the_names_images_of_the_last_four_only() -> None:
    """A store that never fsyncs its directory: 40 creates give the images of the last four
    (before, only, but), at most 12 a point, and every other image is as without them."""
    ops = [open_(f"f{n}", n, "create") for n in range(40)] + [write(b"xy", 3)]
    volume = run(*ops)
    found = list(volume.power_images(random.Random(1)))
    names = [v for v, _ in found if isinstance(v, Names)]
    assert {v.op for v in names} == {36, 37, 38, 39}
    assert len(names) == 11  # names-before:39 is names-but:39, given once
    others = [v.name for v, _ in found if not isinstance(v, Names)]
    assert others == [v.name for v, _ in run(*ops).power_images(random.Random(1))][: len(others)]


def test_an_operation_on_the_root_shows_the_root_by_name() -> None:
    """A report never shows an empty name: the root directory is ``<root>``."""
    assert FileOp("sync", "", handle=2).describe() == "sync <root>"
    assert open_("", 2, "directory").describe() == "open <root> (directory)"
    assert FileOp("rename", "a", "b").describe() == "rename a -> b"
