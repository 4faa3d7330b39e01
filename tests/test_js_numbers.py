"""Values a JavaScript reader gets back unchanged (WRITE-8), written as JavaScript writes them
(JSONL-25): the seeds' harness and its files are TypeScript."""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess

import orjson
import pytest

from scopecheck.machines.strategies import storable_float
from scopecheck.models.errors import UsageError
from scopecheck.models.payload import MAX_SAFE_INTEGER, encode_json, js_number

#: Python's float, orjson's spelling, and the one JavaScript (and upstream's files) use.
SPELLINGS = [
    (2.0, b"2.0", "2"),
    (-0.0, b"-0.0", "0"),
    (1e15, b"1000000000000000.0", "1000000000000000"),
    (1e16, b"1e+16", "10000000000000000"),
    (1e20, b"1e+20", "100000000000000000000"),
    (1e21, b"1e+21", "1e+21"),
    (1.23e-6, b"1.23e-6", "0.00000123"),
    (1e-7, b"1e-7", "1e-7"),
    (0.021500000000000002, b"0.021500000000000002", "0.021500000000000002"),
    (9007199254740991.0, b"9007199254740991.0", "9007199254740991"),
]


@pytest.mark.rule("JSONL-25")
@pytest.mark.parametrize(("number", "orjson_text", "js_text"), SPELLINGS)
def test_numbers_are_written_as_javascript_writes_them(
    number: float, orjson_text: bytes, js_text: str
) -> None:
    assert js_number(number) == js_text
    if not storable_float(number):  # an integer beyond 2**53 - 1 as written (WRITE-8)
        return
    assert encode_json(number) == js_text.encode()
    assert encode_json({"n": [number]}) == b'{"n":[' + js_text.encode() + b"]}"


@pytest.mark.rule("JSONL-25")
def test_the_spelling_agrees_with_node_on_thousands_of_doubles() -> None:
    node = shutil.which("node")
    assert node is not None, "this check compares with Node.js, which the machine provides"
    rng = random.Random(25)
    numbers = [struct.unpack("d", rng.randbytes(8))[0] for _ in range(4000)]
    numbers = [x for x in numbers if x == x and abs(x) != float("inf")]
    numbers += [
        round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)) * 10.0 ** rng.randint(-12, 24)
        for _ in range(4000)
    ]
    script = (
        "const v = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(v.map((x) => JSON.stringify(x))))"
    )
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(numbers), capture_output=True, text=True, check=True
    )
    theirs = json.loads(done.stdout)
    assert [js_number(x) for x in numbers] == theirs


@pytest.mark.rule("WRITE-8")
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (2**53, "integer 9007199254740992 at value is outside ±(2**53 - 1)"),
        (2**53 + 1, "(a JavaScript reader gets 9007199254740992)"),
        (-(2**53) - 1, "(a JavaScript reader gets -9007199254740992)"),
        ([{"x": 2**60}], "integer 1152921504606846976 at value[0].x"),
        (10**400, "100000000000...(401 digits) at value is outside"),
        (1e17, "number 1e+17 at value is written 100000000000000000, an integer outside"),
        (-(2.0**53), "written -9007199254740992"),
        (float("nan"), "non-finite"),
        (float("inf"), "non-finite"),
        (-float("inf"), "non-finite"),
    ],
)
def test_values_a_javascript_reader_would_change_are_refused(bad: object, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        encode_json(bad)
    assert caught.value.code == "invalid_payload"
    assert said in caught.value.message and "(WRITE-8)" in caught.value.message


@pytest.mark.rule("WRITE-8", "WRITE-3")
@pytest.mark.parametrize(
    ("number", "written"),
    [(1e21, b"1e+21"), (-1.5e300, b"-1.5e+300"), (9007199254740991.0, b"9007199254740991")],
)
def test_numbers_javascript_writes_with_an_exponent_stay_floats_and_storable(
    number: float, written: bytes
) -> None:
    """From 1e21 up JavaScript writes an exponent, which reads back as a float: storable, and
    the bytes are a fixed point; so is an integral float inside the safe range."""
    data = encode_json(number)
    assert data == written
    assert encode_json(orjson.loads(data)) == data


@pytest.mark.rule("WRITE-8")
def test_the_safe_integer_range_is_accepted_to_its_edges() -> None:
    assert (
        encode_json([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER])
        == b"[9007199254740991,-9007199254740991]"
    )
