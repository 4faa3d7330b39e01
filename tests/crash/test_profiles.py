"""File-system profiles of the one persistence model (CRASH-SYS-14) and the profiles a failure
says it happens under (CRASH-SYS-15): the model operation by operation, the planted bugs that
separate the profiles on the ``FileSystem`` path, and a correct backend under every profile."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from scopecheck.crashsim.explore import Findings
from scopecheck.crashsim.failure import CrashFailure, profiles_text
from scopecheck.crashsim.generic_sweep import explore
from scopecheck.crashsim.persistence import (
    BTRFS,
    EXT4_ORDERED,
    POSIX,
    PROFILE_NAMES,
    FileOp,
    Image,
    Profile,
    ProfiledVolume,
    Volume,
    power_image,
    profile_named,
)
from scopecheck.crashsim.points import EntriesKept, Strict
from scopecheck.examples.good_file_backend import FileRepository, make_backend
from scopecheck.impl.fs import FileSystem, ForwardingFileSystem
from scopecheck.planted import fs_crash

ROOT = Path(__file__).resolve().parents[2]
ROOT_DIR = FileOp("open", path="", handle=9, flags=frozenset({"directory"}))


def create(path: str, handle: int) -> FileOp:
    return FileOp("open", path=path, handle=handle, flags=frozenset({"create"}))


def write(handle: int, data: bytes) -> FileOp:
    return FileOp("write", handle=handle, data=data)


def sync(handle: int) -> FileOp:
    return FileOp("sync", handle=handle)


def strict(profile: Profile, *ops: FileOp) -> Image:
    volume = Volume(None, profile)
    for op in ops:
        volume.apply(op)
    return volume.power_image(Strict())


#: A file created, written and fsynced; its directory never fsynced.
CREATED = (ROOT_DIR, create("a", 1), write(1, b"data"), sync(1))
#: A file replaced by a new one renamed over it, the directory fsynced, the new data not.
REPLACED = (
    ROOT_DIR, create("a", 1), write(1, b"old"), sync(1), sync(9),
    create("a.new", 2), write(2, b"new"), FileOp("rename", path="a.new", target="a"), sync(9),
)  # fmt: skip


@pytest.mark.rule("CRASH-SYS-14")
class TestProfiles:
    def test_posix_keeps_a_name_only_after_its_directory_is_fsynced(self) -> None:
        """Under posix a file fsynced in a directory never fsynced is not on the disk."""
        assert strict(POSIX, *CREATED).files == {}

    def test_ext4_commits_every_earlier_entry_with_any_fsync(self) -> None:
        """Under ext4-ordered the fsync of one file commits the journal: an earlier create of
        another file, never fsynced, is on the disk with its synced (empty) data."""
        ops = (ROOT_DIR, create("b", 2), *CREATED[1:])
        assert strict(EXT4_ORDERED, *ops).files == {"a": b"data", "b": b""}

    def test_btrfs_persists_the_names_of_the_fsynced_file_only(self) -> None:
        """Under btrfs a file's fsync makes its name durable, not another file's create."""
        ops = (ROOT_DIR, create("b", 2), *CREATED[1:])
        assert strict(BTRFS, *ops).files == {"a": b"data"}

    def test_btrfs_fsync_persists_a_new_ancestor_directory(self) -> None:
        """A file fsynced in a new directory is reachable after a power loss under btrfs."""
        ops = (FileOp("mkdir", path="d"), create("d/a", 1), write(1, b"x"), sync(1))
        assert strict(BTRFS, *ops) == Image({"d/a": b"x"}, frozenset({"", "d"}))
        assert strict(POSIX, *ops).files == {}

    def test_btrfs_fsync_after_a_rename_forgets_the_old_name(self) -> None:
        """A renamed file fsynced shows under its new name only."""
        ops = (*CREATED, sync(9), FileOp("rename", path="a", target="b"), sync(1))
        assert strict(BTRFS, *ops).files == {"b": b"data"}
        assert strict(POSIX, *ops).files == {"a": b"data"}

    def test_ext4_flushes_a_file_renamed_over_another(self) -> None:
        """auto_da_alloc: after a rename over an existing file reaches the disk, the renamed
        file's data is there too; posix and btrfs may keep the rename without the data."""
        assert strict(EXT4_ORDERED, *REPLACED).files == {"a": b"new"}
        assert strict(POSIX, *REPLACED).files == {"a": b""}
        assert strict(BTRFS, *REPLACED).files == {"a": b""}

    def test_ext4_flushes_a_file_truncated_to_zero_at_close(self) -> None:
        """auto_da_alloc: a file truncated to zero and written again has its data durable at
        close; posix may lose the unsynced truncate and rewrite."""
        ops = (
            create("a", 1), write(1, b"old"), sync(1), sync(9),
            FileOp("open", path="a", handle=2, flags=frozenset({"trunc"})), write(2, b"new"),
            FileOp("close", handle=2),
        )  # fmt: skip
        assert strict(EXT4_ORDERED, ROOT_DIR, *ops).files == {"a": b"new"}
        assert strict(POSIX, ROOT_DIR, *ops).files == {"a": b"old"}

    def test_ext4_keeps_no_truncate_to_zero_closed_without_a_write(self) -> None:
        """auto_da_alloc flushes delayed blocks, and a file truncated to zero and closed with
        nothing written after has none: the truncate waits for the journal's next commit, so
        a power loss may bring the old contents back under every profile -- SQLite's rollback
        journal in ``journal_mode=TRUNCATE`` without its fsync coming back to roll a committed
        transaction back."""
        ops = (
            create("a", 1), write(1, b"journal"), sync(1), sync(9),
            FileOp("truncate", handle=1, size=0), FileOp("close", handle=1),
        )  # fmt: skip
        for name in PROFILE_NAMES:
            assert strict(profile_named(name), ROOT_DIR, *ops).files == {"a": b"journal"}
        rewritten = (*ops[:-1], write(1, b"new"), FileOp("close", handle=1))
        assert strict(EXT4_ORDERED, ROOT_DIR, *rewritten).files == {"a": b"new"}

    def test_appended_data_is_lost_under_every_profile(self) -> None:
        """No profile makes an append durable before its file's fsync."""
        ops = (*CREATED, sync(9), write(1, b"more"))
        for name in PROFILE_NAMES:
            assert strict(profile_named(name), *ops).files == {"a": b"data"}

    def test_profiled_images_are_distinct_and_say_their_profiles(self) -> None:
        """Each distinct image of a crash point is given once, with the profiles that give it
        and the one whose variant rebuilds it."""
        volume = ProfiledVolume()
        for op in REPLACED:
            volume.apply(op)
        given = list(volume.power_images(random.Random(0)))
        images = [image for _, image in given]
        assert len(images) == len({tuple(sorted(i.files.items())) for i in images})
        for variant, image in given:
            found = volume.profiles_of(image)
            assert found is not None
            built, names = found
            assert power_image(REPLACED, len(REPLACED), variant, profile=built) == image
            assert set(names) <= set(PROFILE_NAMES)
        lost = next(i for _, i in given if i.files == {"a": b""})
        assert volume.profiles_of(lost) == ("posix", ("posix", "btrfs"))

    def test_an_unknown_profile_names_the_choices(self) -> None:
        with pytest.raises(ValueError, match="posix, ext4-ordered, btrfs"):
            profile_named("zfs")

    def test_power_image_takes_a_profile_by_name(self) -> None:
        """A replay rebuilds an image by its variant and the profile the reproducer names."""
        assert power_image(REPLACED, len(REPLACED), EntriesKept(), profile="ext4-ordered") == (
            Image({"a": b"new"})
        )


@pytest.mark.rule("CRASH-SYS-15")
class TestFailureProfiles:
    def test_a_reproducer_keeps_the_profiles(self) -> None:
        """``profiles`` and ``built_under`` survive the reproducer's JSON."""
        failure = CrashFailure(
            "fs", "CRASH-FS-6", "lost", "crash", "strict", 0, None, 3, "strict",
            profiles=("posix", "btrfs"), built_under="posix",
        )  # fmt: skip
        again = CrashFailure.from_json(failure.to_json())
        assert (again.profiles, again.built_under) == (("posix", "btrfs"), "posix")
        assert again.fails_under("btrfs") and not again.fails_under("ext4-ordered")

    def test_failures_of_one_point_and_rule_join_their_profiles(self) -> None:
        """A failing image of another profile at the same crash point, for the same rule,
        adds its profiles to the kept failure instead of a failure of its own."""
        findings = Findings()
        first = CrashFailure(
            "fs", "CRASH-FS-6", "lost", "crash", "strict", 0, None, 3, "strict",
            profiles=("btrfs",),
        )  # fmt: skip
        findings.add(first)
        other = attrs.evolve(first, kind="entries-kept", profiles=("posix",))
        assert findings.merge(other)
        assert findings.failures[0].profiles == ("posix", "btrfs")
        assert not findings.merge(attrs.evolve(other, point=4))

    def test_the_words_name_where_it_happens_and_where_not(self) -> None:
        assert profiles_text(("posix",)) == "under posix; not under ext4-ordered, btrfs"
        assert "every" in profiles_text(PROFILE_NAMES)
        assert "every" in profiles_text(())

    @pytest.mark.parametrize("name", sorted(fs_crash.PROFILE_BUGS))
    def test_a_planted_bug_fails_under_its_profiles_only(self, name: str) -> None:
        """Each planted bug that separates the profiles is caught, on the ``FileSystem``
        path, under exactly its profiles: every crash failure of a power-loss image names
        them, and none names another."""
        factory = getattr(fs_crash, fs_crash.PLANTED[name][0])
        found = explore(factory, budget=2.0, seed=0)
        crashes = [f for f in found.failures if f.run == "crash" and f.profiles]
        assert crashes, [str(f) for f in found.failures]
        assert {f.profiles for f in crashes} == {fs_crash.PROFILE_BUGS[name]}, [
            (str(f), f.profiles) for f in crashes
        ]
        assert crashes[0].rule in fs_crash.PLANTED[name][1].split()

    def test_the_swap_with_a_directory_fsync_before_its_unlink_passes(self) -> None:
        """The planted swap made right from outside -- its ``FileSystem`` fsyncs the directory
        before each unlink -- passes under every profile: what ``fs-swap-without-directory-fsync``
        fails on is the order of its directory operations, nothing else (CRASH-SYS-20)."""

        class SyncedBeforeUnlink(ForwardingFileSystem):
            def unlink(self, path: str) -> None:
                self.inner.fsync_dir(path.rsplit("/", 1)[0] or "/")
                self.inner.unlink(path)

        def swapping(clock: Any, *, fs: FileSystem, root: str) -> FileRepository:
            return fs_crash.SwappingRepository(clock, SyncedBeforeUnlink(fs), root)

        found = explore(swapping, budget=2.0, seed=0)
        assert found.failures == [], [str(f) for f in found.failures]
        assert found.states > 0

        """The good file example keeps everything it acknowledged under every profile."""
        found = explore(make_backend, budget=2.0, seed=0)
        assert found.failures == []
        assert found.states > 0


@pytest.mark.rule("CRASH-SYS-15")
@pytest.mark.parametrize(("profile", "status"), [("posix", 1), ("ext4-ordered", 0)])
def test_the_pytest_plugin_fails_only_under_the_chosen_profile(profile: str, status: int) -> None:
    """The pytest plugin's crash tests fail on the posix-only planted bug under posix, and
    under ext4-ordered only warn about it."""
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "scopecheck.pytest_plugin",
            "-p", "no:cacheprovider",
            "--scopecheck-backend=scopecheck.planted.fs_crash:fs_create_without_directory_fsync",
            f"--scopecheck-fs-profile={profile}", "--pyargs", "scopecheck.conformance.test_crash",
        ],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == status, result.stdout + result.stderr
    if status == 0:
        assert "only under posix" in result.stdout, result.stdout
