"""Crash points as values (CRASH-SYS-9, CRASH-SYS-12): every variant has one stable name that
a reproducer stores and parses back to the same variant, every name of another shape is
refused, and every image the persistence model gives is rebuilt from its typed variant."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopecheck.crashsim.explore import Images, point_images
from scopecheck.crashsim.failure import BadReproducer, CrashFailure, Evidence, crash_kind
from scopecheck.crashsim.persistence import Device, FileOp, Image, Volume, power_image
from scopecheck.crashsim.points import (
    CrashPoint,
    DataKept,
    EntriesKept,
    Names,
    Only,
    Prefix,
    ProcessCrash,
    Strict,
    Torn,
    TornCall,
    Variant,
    parse_variant,
)

pytestmark = pytest.mark.rule("CRASH-SYS-9", "CRASH-SYS-12")

#: One variant of each kind, with its name and family.
NAMED: list[tuple[Variant, str, str]] = [
    (ProcessCrash(), "process", "process"),
    (TornCall("d/log", 3), "torn-call:d/log:3", "torn-call"),
    (TornCall("", 5), "torn-call::5", "torn-call"),
    (Strict(), "strict", "strict"),
    (DataKept(), "data-kept", "data-kept"),
    (EntriesKept(), "entries-kept", "entries-kept"),
    (Only("a"), "only:a", "only"),
    (Only("x:y"), "only:x:y", "only"),
    (Prefix(0), "prefix:0", "prefix"),
    (Prefix(12), "prefix:12", "prefix"),
    (Torn(1, "a", 0, 5000), "torn@1:a:0:5000", "torn"),
    (Torn(512, "dir/x:y", 2, 100), "torn@512:dir/x:y:2:100", "torn"),
    (Names("before", 4), "names-before:4", "names"),
    (Names("only", 0), "names-only:0", "names"),
    (Names("but", 17), "names-but:17", "names"),
]


@pytest.mark.parametrize(("variant", "name", "family"), NAMED, ids=[n for _, n, _ in NAMED])
def test_each_variant_has_its_stable_name_and_family(
    variant: Variant, name: str, family: str
) -> None:
    assert variant.name == str(variant) == name
    assert parse_variant(name) == variant
    assert variant.family == family == crash_kind(variant)
    assert variant.power_loss == (family not in ("process", "torn-call"))


PATHS = st.text(st.sampled_from("ab/:._-"), max_size=8)
NUMBERS = st.integers(0, 10**6)
VARIANTS: st.SearchStrategy[Variant] = st.one_of(
    st.just(ProcessCrash()),
    st.builds(TornCall, PATHS, NUMBERS),
    st.sampled_from([Strict(), DataKept(), EntriesKept()]),
    st.builds(Only, PATHS),
    st.builds(Prefix, NUMBERS),
    st.builds(Torn, st.sampled_from([1, 512, 4096]), PATHS, NUMBERS, NUMBERS),
    st.builds(Names, st.sampled_from(["before", "only", "but"]), NUMBERS),
)


@given(VARIANTS)
def test_every_name_parses_back_to_its_variant(variant: Variant) -> None:
    assert parse_variant(variant.name) == variant


@pytest.mark.parametrize(
    "name",
    [
        "", "Process", "process:", "strict:", "data_kept", "torn", "torn-call", "torn-call:a",
        "torn-call:a:", "torn-call:a:x", "torn-call:a:-1", "only", "prefix:", "prefix:x",
        "prefix:-1", "prefix:01", "prefix: 1", "prefix:+1", "torn@1:a:0", "torn@0:a:0:1",
        "torn@x:a:0:1", "torn@:a:0:1", "torn@1:a:-1:2", "torn@1:a:0:٣", "fault:eio",
        "no-crash", "kill:1:x", "names:1", "names-before:", "names-x:1", "names-only:-1",
        "names-but:01",
    ],
)  # fmt: skip
def test_a_name_of_no_variant_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="no crash image is named"):
        parse_variant(name)


def open_(path: str, handle: int) -> FileOp:
    return FileOp("open", path, handle=handle, flags=frozenset({"create"}))


#: Unsynced writes to two files (one of them renamed), a truncate, a failed fsync, syncs.
OPS = (
    FileOp("open", "", handle=9, flags=frozenset({"directory"})),
    open_("a", 1),
    FileOp("write", handle=1, data=b"a" * 5000),
    FileOp("sync", handle=9),
    open_("b", 2),
    FileOp("sync", handle=9),
    FileOp("write", handle=2, data=b"b" * 700),
    FileOp("truncate", handle=1, size=4500),
    FileOp("write", handle=1, offset=300, data=b"c" * 9000),
    FileOp("syncfail", handle=1),
    FileOp("write", handle=2, offset=100, data=b"d" * 1500),
    FileOp("rename", "b", "c"),
    FileOp("sync", handle=2),
    FileOp("write", handle=1, data=b"e" * 3),
)
DEVICES = [Device(), Device(tear=512), Device(tear=4096), Device(tear=512, reorder=False)]


@pytest.mark.parametrize("device", DEVICES, ids=repr)
def test_every_image_of_every_crash_point_is_rebuilt_from_its_typed_variant(
    device: Device,
) -> None:
    volume = Volume()
    families: set[str] = set()
    for k, op in enumerate([*OPS, None]):
        for variant, image in point_images(volume, OPS, k, 7, Images(device=device)):
            families.add(variant.family)
            assert parse_variant(variant.name) == variant
            assert power_image(OPS, k, variant, device=device) == image, variant
            assert power_image(OPS, k, variant.name, device=device) == image, variant
            if variant.power_loss:
                assert not isinstance(variant, ProcessCrash | TornCall)
                assert volume.power_image(variant, device) == image, variant
        if op is not None:
            volume.apply(op)
    side = "only" if device.reorder else "prefix"
    expected = {"process", "torn-call", "strict", "data-kept", "entries-kept", side, "torn"}
    assert families == expected


def test_power_images_give_typed_power_losses_only() -> None:
    volume = Volume()
    for op in OPS[:11]:
        volume.apply(op)
    found = list(volume.power_images(random.Random(0)))
    assert found and all(variant.power_loss for variant, _ in found)
    kinds = {type(variant) for variant, _ in found}
    assert {Strict, DataKept, Only, Torn} <= kinds <= {Strict, DataKept, EntriesKept, Only, Torn}


def test_an_image_the_operations_cannot_have_is_refused_by_name_and_by_variant() -> None:
    with pytest.raises(ValueError, match="no crash image is named 'torn@1:a'"):
        power_image(OPS, 4, "torn@1:a")
    with pytest.raises(ValueError, match="no power-loss image 'only:zz'"):
        power_image(OPS, 4, Only("zz"))
    with pytest.raises(ValueError, match="no power-loss image 'prefix:99'"):
        power_image(OPS, 4, Prefix(99), device=Device(reorder=False))
    with pytest.raises(ValueError, match="no torn call 'torn-call:a:3'"):
        power_image(OPS, 3, TornCall("a", 3))  # a sync is not a write


def failure(variant: str, recovery: tuple[int, str] | None = None) -> CrashFailure:
    return CrashFailure.of_image(
        "toy", "CRASH-FS-6", "lost", seed=0, workload={}, point=2, variant=variant,
        evidence=Evidence(OPS, Image({}), ()), recovery=recovery,
    )  # fmt: skip


def test_a_failure_keeps_names_and_gives_its_crash_points_typed() -> None:
    crash = failure("torn@1:a:0:5")
    assert crash.kind == "torn" and crash.recovery_point is None
    assert crash.crash_point == CrashPoint(2, Torn(1, "a", 0, 5))
    during = failure("strict", (4, "torn-call::7"))
    assert during.kind == "torn-call" and during.run == "recovery"
    assert during.recovery_point == CrashPoint(4, TornCall("", 7))
    record = orjson.loads(orjson.dumps(during.to_json()))
    assert record["variant"] == "strict" and record["recovery"] == [4, "torn-call::7"]
    assert CrashFailure.from_json(record) == during
    with pytest.raises(ValueError, match="no crash image is named 'torn'"):
        failure("torn")


@pytest.mark.parametrize(
    ("field", "value"), [("variant", "torn@1:a"), ("recovery", [4, "entries"])]
)
def test_a_reproducer_naming_no_crash_image_is_refused(field: str, value: object) -> None:
    record = {**orjson.loads(orjson.dumps(failure("strict", (4, "process")).to_json()))}
    record[field] = value
    with pytest.raises(BadReproducer, match="no crash image is named"):
        CrashFailure.from_json(record)


def test_a_fault_run_keeps_its_own_variant_and_has_no_crash_point() -> None:
    fault = CrashFailure(
        source="toy", rule="CRASH-FS-9", problem="p", run="fault", kind="fault:write:eio",
        seed=0, workload={}, point=3, variant="fault:eio",
    )  # fmt: skip
    assert fault.crash_point is None
    assert CrashFailure.from_json(orjson.loads(orjson.dumps(fault.to_json()))) == fault
