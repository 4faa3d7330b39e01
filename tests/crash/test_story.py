"""The one story of a crash failure (``crashsim/story.py``): which files a power loss lost,
told by what it changed against the page cache -- never by the file its image is named after,
and never for a file whose contents were read from the disk because the trace could not see
them (CRASH-SYS-17)."""

from __future__ import annotations

import base64

import attrs
import pytest

from scopecheck.crashsim.failure import CrashFailure
from scopecheck.crashsim.generic_sweep import explore
from scopecheck.crashsim.story import NAMED, lost_text, story_of, with_lost
from scopecheck.planted import fs_crash

pytestmark = pytest.mark.rule("CRASH-FS-6", "CRASH-SYS-17")


def _power_loss() -> CrashFailure:
    factory = getattr(fs_crash, fs_crash.PLANTED["fs-append-without-fsync"][0])
    found = explore(factory, budget=3, seed=0, max_failures=3)
    lost = [f for f in found.failures if f.run == "crash" and f.rule == "CRASH-FS-6"]
    assert lost, [str(f) for f in found.failures]
    return lost[0]


def test_a_power_loss_names_the_files_it_changed_and_not_those_read_from_the_disk() -> None:
    failure = _power_loss()
    assert isinstance(failure.shown.get("lost"), str)  # kept failures carry it
    story = story_of(failure)
    assert story is not None and story.power_loss
    changed = sorted(n for n, d in story.before.files.items() if story.after.files.get(n) != d)
    assert list(story.lost) == changed and changed, (story.before.files, story.after.files)
    assert f"data lost: {', '.join(changed)}" in str(failure)

    # the same image, its lost file read from the disk: no story says it lost anything
    read = {name: base64.b64encode(story.after.files.get(name, b"")).decode() for name in changed}
    blind = attrs.evolve(failure, target={**failure.target, "contents": read},
                         shown={k: v for k, v in failure.shown.items() if k != "lost"})  # fmt: skip
    assert story_of(blind) is not None and story_of(blind).lost == ()  # type: ignore[union-attr]
    assert with_lost(blind).shown["lost"] == "none"


def test_a_long_list_of_lost_files_is_cut_and_escaped() -> None:
    names = [f"f{i}" for i in range(NAMED + 5)]
    assert lost_text(names).endswith(f"f{NAMED - 1} and 5 more")
    assert "\\udc80" in lost_text(["a\udc80"]) and lost_text([]) == "none"
