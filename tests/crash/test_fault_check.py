"""The one fault checker (``crashsim/fault_check.py``): the images after a fault, and how each
is judged, whatever source ran the faulted workload."""

from __future__ import annotations

import pytest

from scopecheck.crashsim.fault_check import (
    FaultImage,
    FaultRules,
    fault_images,
    judge_images,
)
from scopecheck.crashsim.persistence import FileOp, Image
from scopecheck.models.addresses import value
from scopecheck.models.errors import StorageIOError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository
from scopecheck.models.writes import set_value

RULES = FaultRules("WRONG", "LOST", "UNOPENABLE", "UNOPENABLE-AFTER-POWER-LOSS")
CREATED = (
    FileOp("open", "log", handle=1, flags=frozenset({"create"})),
    FileOp("open", "", handle=2, flags=frozenset({"directory"})),
    FileOp("sync", "", handle=2),
    FileOp("sync", "log", handle=1),
)
WRITE = FileOp("write", "log", handle=1, data=b"one\n", step=1)


def _states() -> tuple[Snapshot, Snapshot]:
    repo = ReferenceRepository()
    session = repo.create("s")
    empty = session.snapshot()
    session.commit((set_value(value("app", "k"), 1),), 1_000)
    return empty, session.snapshot()


EMPTY, ONE = _states()


def reopen(image: Image) -> Snapshot | str | None:
    """A stand-in backend: the log's one line is the one commit, a torn line is dropped."""
    if "log" not in image.files:
        return None
    data = image.files["log"]
    if data == b"one\n":
        return ONE
    return EMPTY if not data.endswith(b"\n") else f"log holds {data!r}"


def _images(*ops: FileOp) -> list[FaultImage]:
    return fault_images(Image({"log": b"one\n"}), [*CREATED, *ops], seed="t")


@pytest.mark.rule("CRASH-SYS-11")
def test_a_retried_fsync_after_a_failed_one_makes_nothing_durable() -> None:
    """The log's write, an fsync that failed, a retry that succeeded: at power loss the write
    is gone, so the acknowledged commit is lost -- caught as a power-loss image."""
    images = _images(WRITE, FileOp("syncfail", "log", handle=1), FileOp("sync", "log", handle=1))
    assert images[0] == FaultImage("a process crash", Image({"log": b"one\n"}), False)
    assert any(i.power_loss and i.image.files.get("log") == b"" for i in images)
    found = judge_images(reopen, images, [ONE], RULES, "the commit")
    assert found is not None and found.rule == "LOST" and found.power_loss
    assert found.problem.startswith("power loss (strict) right after the commit reopens to")


@pytest.mark.rule("CRASH-SYS-1")
def test_a_write_fsynced_once_survives_every_image() -> None:
    images = _images(WRITE, FileOp("sync", "log", handle=1))
    assert len(images) == 1  # nothing pending: power loss leaves the same disk
    assert judge_images(reopen, images, [ONE], RULES, "the commit") is None


@pytest.mark.rule("CRASH-FS-9")
def test_an_unsynced_write_may_be_lost_only_where_that_is_allowed() -> None:
    images = _images(WRITE)
    assert judge_images(reopen, images, [ONE, EMPTY], RULES, "a failed commit") is None
    found = judge_images(reopen, images, [EMPTY], RULES, "a failed commit")
    assert found is not None and found.rule == "WRONG" and not found.power_loss
    assert "a process crash right after a failed commit reopens to" in found.problem


@pytest.mark.rule("CRASH-FS-11")
def test_an_image_that_does_not_open_breaks_the_unopenable_rules() -> None:
    def broken(image: Image) -> Snapshot | None:
        raise StorageIOError("corrupt", "bad header")

    found = judge_images(broken, _images(WRITE), [ONE], RULES, "a failed create")
    assert found is not None and found.rule == "UNOPENABLE"
    assert "reopening raised StorageIOError(corrupt)" in found.problem
    power = [i for i in _images(WRITE) if i.power_loss]
    found = judge_images(broken, power, [ONE], RULES, "a failed create")
    assert found is not None and found.rule == "UNOPENABLE-AFTER-POWER-LOSS"
    said = judge_images(lambda _: "no header", power, [ONE], RULES, "x")
    assert said is not None and said.problem.endswith("x: no header")


def test_errors_outside_those_named_propagate() -> None:
    """A source that names only scopecheck errors as the backend's failing to open lets any
    other exception through: never blamed on the backend."""

    def crashing(image: Image) -> Snapshot | None:
        raise KeyError("ours")

    with pytest.raises(KeyError):
        judge_images(crashing, _images(WRITE), [ONE], RULES, "x", errors=(StorageIOError,))
