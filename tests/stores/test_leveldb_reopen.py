"""LevelDB's reopen against the persistence model (CRASH-SYS-1, CRASH-SYS-14), on the trace of a
real plyvel run.

Every open of a LevelDB 1.22 database (the one plyvel 1.5.1's wheels bundle) that recovers a
log writes the recovered records to a table, writes a new ``MANIFEST-*`` (fsyncing the
directory first: ``SyncDirIfManifest``, util/env_posix.cc), renames a synced temp file to
``CURRENT`` (``SetCurrentFile``, db/filename.cc) and unlinks the old MANIFEST and the old log
(``DeleteObsoleteFiles``, called by ``DB::Open``, db/db_impl.cc) -- with no directory fsync
after the rename.  A file system that reorders directory operations may then lose the rename
and keep an unlink: ``CURRENT`` names a MANIFEST that is gone (LevelDB cannot open the
database), or the old MANIFEST names a log that is gone (every put it held is lost, fdatasynced
or not).  POSIX orders none of these until the directory is fsynced (CRASH-SYS-1: a directory's
entries are durable as of its last fsync), and the btrfs profile adds nothing here (no file is
fsynced between them); ext4's ordered journal commits directory operations in order.

The persistence model keeps each directory's changes since its last fsync in order
(CRASH-SYS-20), and a power loss keeps some of them: a prefix under every profile
(``names-before``), one operation's alone or all but one operation's (``names-only``,
``names-but``) under posix and btrfs.  The tests below build the reordered images from the trace
and open each with LevelDB.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import plyvel
import pytest

from scopecheck.crashsim.persistence import (
    BTRFS,
    EXT4_ORDERED,
    POSIX,
    FileOp,
    Image,
    Profile,
    Volume,
)
from scopecheck.crashsim.points import Strict
from scopecheck.crashsim.strace import read_trace, strace_command, unavailable
from scopecheck.crashsim.syscall_ops import extract

#: Create the database (its folder made and the root fsynced first, as the Session layer
#: does), three fdatasynced puts, close; open it again (recovering the log), close.
PROGRAM = """
    import os, sys, plyvel
    root = sys.argv[1]
    os.mkdir(root + "/db")
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    db = plyvel.DB(root + "/db", create_if_missing=True)
    for i in range(3):
        db.put(b"k%d" % i, b"v" * 100, sync=True)
    db.close()
    plyvel.DB(root + "/db").close()
"""


@attrs.frozen
class Reopen:
    """The second open's swap of MANIFEST in the trace: the rename to ``CURRENT`` at
    ``rename``, the unlinks after it (``old_manifest``, ``old_log``), and ``after``, the crash
    point right after the last of them."""

    ops: tuple[FileOp, ...]
    rename: int
    old_manifest: str
    old_log: str
    after: int


@pytest.fixture(scope="module")
def reopen(tmp_path_factory: pytest.TempPathFactory) -> Reopen:
    why = unavailable()
    if why is not None:  # never a silent pass (CRASH-SYS-5)
        pytest.fail(f"this test needs strace with ptrace permitted ({why}); .ci/run installs it")
    work = tmp_path_factory.mktemp("leveldb-reopen")
    root = work / "r"
    root.mkdir()
    script = work / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    trace = work / "trace"
    command = strace_command(str(trace), [sys.executable, str(script), str(root)])
    subprocess.run(command, cwd=work, check=True, capture_output=True, timeout=120)
    ops = extract(read_trace(str(trace)), str(root), str(work)).ops
    rename = max(i for i, op in enumerate(ops) if op.kind == "rename" and op.target == "db/CURRENT")
    unlinks = [(i, op.path) for i, op in enumerate(ops) if op.kind == "unlink" and i > rename]
    manifests = [p for _, p in unlinks if p.startswith("db/MANIFEST-")]
    logs = [p for _, p in unlinks if p.endswith(".log")]
    assert len(manifests) == len(logs) == 1, [op.describe() for op in ops[rename:]]
    return Reopen(ops, rename, manifests[0], logs[0], max(i for i, _ in unlinks) + 1)


def volume(reopen: Reopen, profile: Profile) -> Volume:
    found = Volume(profile=profile)
    for op in reopen.ops[: reopen.after]:
        found.apply(op)
    return found


def reordered(reopen: Reopen, image: Image) -> bool:
    """The rename to ``CURRENT`` lost (it still names the old MANIFEST) and an unlink made
    after it kept."""
    current = image.files.get("db/CURRENT", b"").strip().decode()
    lost_rename = f"db/{current}" == reopen.old_manifest
    return lost_rename and not {reopen.old_manifest, reopen.old_log} <= image.files.keys()


def test_a_reopen_unlinks_the_old_manifest_and_log_with_no_directory_fsync_after_the_rename(
    reopen: Reopen,
) -> None:
    """What the images below rest on, as the trace shows it: the synced temp file renamed to
    ``CURRENT``, then both unlinks, and no sync of the database's folder in between."""
    between = reopen.ops[reopen.rename : reopen.after]
    assert reopen.ops[reopen.rename].path.endswith(".dbtmp")
    synced = {reopen.ops[i].path for i in range(reopen.rename) if reopen.ops[i].kind == "sync"}
    assert "db" in synced  # SyncDirIfManifest, before the rename
    assert not [op for op in between if op.kind in ("sync", "syncall")]


@pytest.mark.rule("CRASH-FS-1", "CRASH-FS-6")
def test_leveldb_cannot_open_or_loses_synced_puts_where_an_unlink_outlives_the_rename(
    reopen: Reopen, tmp_path: Path
) -> None:
    """The images themselves, made by hand from the strict one (the rename and the unlinks
    lost): with the old MANIFEST unlinked LevelDB refuses to open (CURRENT names a missing
    file); with the old log unlinked it opens without the three fdatasynced puts."""
    strict = volume(reopen, POSIX).power_image(Strict())
    assert not reordered(reopen, strict)

    def opened(gone: str) -> list[bytes]:
        folder = tmp_path / (gone.replace("/", "-") or "strict")
        for name, data in strict.files.items():
            if name != gone:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
        db = plyvel.DB(str(folder / "db"))
        try:
            return [key for key, _ in db]
        finally:
            db.close()

    assert opened("") == [b"k0", b"k1", b"k2"]  # strict itself recovers every put
    with pytest.raises(plyvel.CorruptionError, match="CURRENT points to a non-existent file"):
        opened(reopen.old_manifest)
    assert opened(reopen.old_log) == []


@pytest.mark.rule("CRASH-SYS-20", "CRASH-SYS-14")
@pytest.mark.parametrize("profile", [POSIX, BTRFS], ids=lambda p: p.name)
def test_the_model_builds_the_images_with_an_unlink_kept_and_the_rename_lost(
    reopen: Reopen, profile: Profile, tmp_path: Path
) -> None:
    """Under posix (nothing orders the directory's entries before its fsync) and btrfs (no file
    is fsynced here, so its log tree orders nothing), a power loss right after the reopen's
    unlinks may keep one of them and lose the rename: ``names-only`` of an unlink and
    ``names-but`` of the rename.  Each such image, opened by LevelDB itself, is a database it
    refuses (CURRENT names a missing MANIFEST) or one without the three fdatasynced puts."""
    images = volume(reopen, profile).power_images(random.Random(0))
    found = {v.name: image for v, image in images if reordered(reopen, image)}
    assert f"names-but:{reopen.rename}" in found
    assert {name.partition(":")[0] for name in found} == {"names-only", "names-but"}
    for name, image in found.items():
        folder = tmp_path / name.replace(":", "-")
        for path, data in image.files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(data)
        try:
            db = plyvel.DB(str(folder / "db"))
        except plyvel.CorruptionError as exc:
            assert "CURRENT points to a non-existent file" in str(exc)
            continue
        try:
            assert [key for key, _ in db] != [b"k0", b"k1", b"k2"], name
        finally:
            db.close()


@pytest.mark.rule("CRASH-SYS-14", "CRASH-SYS-20")
def test_under_ext4_ordered_the_directory_operations_persist_in_order(reopen: Reopen) -> None:
    """The journal commits directory operations in order (ALICE's ext4 ordered mode): no image
    keeps an unlink without the rename before it.  The model builds the rename and both unlinks
    lost, all three kept, and the prefixes between (``names-before``): the rename kept, the
    unlinks not yet."""
    images = list(volume(reopen, EXT4_ORDERED).power_images(random.Random(0)))
    assert not [v.name for v, image in images if reordered(reopen, image)]
    assert not [v.name for v, _ in images if v.name.startswith(("names-only", "names-but"))]
    currents = {image.files["db/CURRENT"] for _, image in images}
    assert len(currents) == 2
    both = {reopen.old_manifest, reopen.old_log}
    seen = set()
    for _, image in images:
        kept = both & image.files.keys()
        renamed = f"db/{image.files['db/CURRENT'].strip().decode()}" != reopen.old_manifest
        assert renamed or kept == both
        seen.add((renamed, len(kept)))
    assert {(False, 2), (True, 0), (True, 2)} <= seen
