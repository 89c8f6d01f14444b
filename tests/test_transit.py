"""TransitSerializer: Transit JSON as Proletarian (Clojure, transit-clj `:json`) writes it.

Literal Transit texts pin what Proletarian writes and reads, and the real Proletarian
(v1.0.109-alpha, tests/proletarian_oracle.py) checks them and many more values in one JVM
call: for each it writes Python's text byte for byte, and each side reads the other's.
Cognitect's transit-js is the oracle for the rest (tests/transit_oracle.js, one node process
for the session): what it writes, Python reads as meant; what Python writes, it reads as
meant. It is installed with `npm ci --prefix tests/transit_node`; without node or transit-js
the oracle's tests skip, saying why, unless CI is set, which makes them fail instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from proletarian_oracle import edn
from proletarian_oracle import oracle as clojure

from proletarian_di.errors import PayloadError
from proletarian_di.serializers import (
    URI,
    Char,
    Keyword,
    Serializer,
    Symbol,
    TaggedValue,
    TransitSerializer,
    check_serializer,
)
from proletarian_di.serializers._transit import java_double

TRANSIT = TransitSerializer()
UTC = timezone.utc
AN_ID = UUID("531a379e-31bb-4ce1-8690-158dceb64be6")
A_MOMENT = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
NODE_PROJECT = Path(__file__).parent / "transit_node"
ORACLE_SCRIPT = Path(__file__).parent / "transit_oracle.js"
INSTALL = "npm ci --prefix tests/transit_node"


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0, "a" is not Char("a"))."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and str(a) == str(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, TaggedValue):
        return a.tag == b.tag and same(a.rep, b.rep)
    return bool(a == b)


# What Proletarian writes and reads, literally


PROLETARIAN_TEXTS = [
    ({"email": "a@b", "user-id": 42}, '["^ ","~:email","a@b","~:user-id",42]'),
    ({"user/id": 7}, '["^ ","~:user/id",7]'),
    ("just a string", '["~#\'","just a string"]'),
    (None, '["~#\'",null]'),
    (42, '["~#\'",42]'),
    (Keyword("confirmation-email"), '["~#\'","~:confirmation-email"]'),
    (A_MOMENT, '["~#\'","~m1714979289123"]'),
    (AN_ID, '["~#\'","~u531a379e-31bb-4ce1-8690-158dceb64be6"]'),
    ([Keyword("a"), Keyword("abcd"), Keyword("abcd")], '["~:a","~:abcd","^0"]'),
    ([{"id": 1}, {"id": 2}], '[["^ ","~:id",1],["^ ","^0",2]]'),
    ({"tags": frozenset({"x"})}, '["^ ","~:tags",["~#set",["x"]]]'),
    ([frozenset({1}), frozenset({2})], '[["~#set",[1]],["^0",[2]]]'),
    (["~a", "^b", "`c", "~", "^ "], '["~~a","~^b","~`c","~~","~^ "]'),
    ({2: "a", None: "b", True: "c", False: "d"}, '["^ ","~i2","a","~_","b","~?t","c","~?f","d"]'),
    ({(1, 2): "v"}, '["~#cmap",[[1,2],"v"]]'),
    ({"k": [1, 2]}, '["^ ","~:k",[1,2]]'),
    (Fraction(1, 3), '["~#ratio",["~n1","~n3"]]'),
    (Decimal("3.14"), '["~#\'","~f3.14"]'),
    (2**53 - 1, '["~#\'",9007199254740991]'),
    (2**53, '["~#\'","~i9007199254740992"]'),
    (-(2**63), '["~#\'","~i-9223372036854775808"]'),
    (2**63, '["~#\'","~n9223372036854775808"]'),
    (1.5, '["~#\'",1.5]'),
    (1e10, '["~#\'",1.0E10]'),
    ([math.nan, math.inf, -math.inf], '["~zNaN","~zINF","~z-INF"]'),
    ({2.5: 1}, '["^ ","~d2.5",1]'),
    (Char("x"), '["~#\'","~cx"]'),
    (Symbol("clojure.core/inc"), '["~#\'","~$clojure.core/inc"]'),
    (URI("https://example.com/"), '["~#\'","~rhttps://example.com/"]'),
    (b"\x00\x01\x02", '["~#\'","~bAAEC"]'),
    ('tab\tquote"back\\slash\x01é✓', '["~#\'","tab\\tquote\\"back\\\\slash\\u0001é✓"]'),
    ("😀", '["~#\'","\\uD83D\\uDE00"]'),
    ({"s": "a😀b\U0010ffff"}, '["^ ","~:s","a\\uD83D\\uDE00b\\uDBFF\\uDFFF"]'),
    ([{"😀": 1}, {"😀": 2}], '[["^ ","~:\\uD83D\\uDE00",1],["^ ","^0",2]]'),
    ([Keyword("😀"), Keyword("😀")], '["~:\\uD83D\\uDE00","^0"]'),
    (TaggedValue("point", [1, 2]), '["~#point",[1,2]]'),
    (TaggedValue("x", "foo"), '["~#\'","~xfoo"]'),
]


@pytest.mark.parametrize(
    ("value", "text"), PROLETARIAN_TEXTS, ids=[t for _, t in PROLETARIAN_TEXTS]
)
def test_writes_and_reads_what_proletarian_does(value: Any, text: str) -> None:
    assert TRANSIT.encode(value) == text
    assert same(TRANSIT.decode(text), value)


READ_ONLY_TEXTS = [
    ('["~#\'","~t2024-05-06T07:08:09.123Z"]', A_MOMENT),
    ('["~#\'","~t2024-05-06T09:08:09.123+02:00"]', A_MOMENT),
    ('["~#\'","~n5"]', 5),
    ('["~#\'","~i5"]', 5),
    ('["~#list",[1,"~:a"]]', [1, Keyword("a")]),
    ('["~#set",[]]', frozenset()),
    ('["~#set",[[1,2]]]', frozenset({(1, 2)})),
    ('["~#ratio",[1,2]]', Fraction(1, 2)),
    ('["~#cmap",["~:a",1,[1],2]]', {"a": 1, (1,): 2}),
    ('["^ ","~$sym",1,"~u531a379e-31bb-4ce1-8690-158dceb64be6",2]', {Symbol("sym"): 1, AN_ID: 2}),
    ('["^ ","~m1714979289123","m"]', {A_MOMENT: "m"}),
    ('{"~:verbose":1,"plain":2}', {"verbose": 1, "plain": 2}),
    ('{"~#set":[1]}', frozenset({1})),
    ('{"~#\'":"~:k"}', Keyword("k")),
    (
        '["~#u",[6000000000000000000,-8754316938001257498]]',
        UUID(int=(6 * 10**18 << 64) | (2**64 - 8754316938001257498)),
    ),
    ('["~#\'","~dNaN"]', math.nan),
    ('"top"', "top"),
    ("12", 12),
    ("[]", []),
    ('["^ "]', {}),
    ('["~:abcd",["^0",["^0"]]]', [Keyword("abcd"), [Keyword("abcd"), [Keyword("abcd")]]]),
    ('[["^ ","~:name",1],["^ ","^0",2],{"^0":3}]', [{"name": 1}, {"name": 2}, {"name": 3}]),
    ('["~#point",["^0",1]]', TaggedValue("point", TaggedValue("point", 1))),
    ('["^ ","~:s","a😀b"]', {"s": "a😀b"}),
    ('[["^ ","~:😀",1],["^ ","~:😀",2]]', [{"😀": 1}, {"😀": 2}]),
]


@pytest.mark.parametrize(("text", "value"), READ_ONLY_TEXTS, ids=[t for t, _ in READ_ONLY_TEXTS])
def test_reads_what_other_transit_writers_write(text: str, value: Any) -> None:
    assert same(TRANSIT.decode(text), value)


def test_keyword_keys_are_plain_strings_and_keyword_values_are_keywords() -> None:
    payload = TRANSIT.decode('["^ ","~:email","a@b","~:kind","~:welcome","~:user/id",7]')
    assert payload == {"email": "a@b", "kind": Keyword("welcome"), "user/id": 7}
    assert all(type(key) is str for key in payload)


def test_str_keys_can_be_written_as_transit_strings() -> None:
    assert TransitSerializer(keyword_keys=False).encode({"email": 1}) == '["^ ","email",1]'
    assert TransitSerializer(keyword_keys=False).encode({"~x": 1}) == '["^ ","~~x",1]'


def test_tuples_are_written_as_arrays_and_read_as_lists() -> None:
    assert TRANSIT.encode({"k": (1, (2,))}) == '["^ ","~:k",[1,[2]]]'
    assert same(TRANSIT.decode('["^ ","~:k",[1,[2]]]'), {"k": [1, [2]]})


def test_unknown_tags_are_kept_and_written_back_unchanged() -> None:
    for text in ('["~#point",[1,2]]', '["~#\'","~xfoo"]', '["~#rec",["^ ","~:x",1]]'):
        value = TRANSIT.decode(text)
        assert isinstance(value, TaggedValue)
        assert TRANSIT.encode(value) == text


def test_instants_are_utc_aware_datetimes_to_the_millisecond() -> None:
    moment = TRANSIT.decode('["~#\'","~m-1"]')
    assert moment == datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert moment.tzinfo is UTC
    oslo = timezone(timedelta(hours=2))
    assert TRANSIT.encode(A_MOMENT.astimezone(oslo)) == TRANSIT.encode(A_MOMENT)
    assert TRANSIT.encode(A_MOMENT + timedelta(microseconds=999)) == TRANSIT.encode(A_MOMENT)


def test_the_write_cache_starts_again_like_transit_java_when_full() -> None:
    keys = [f"key{i:04d}" for i in range(1937)]
    full = {key: 0 for key in keys[:1936]}
    text = TRANSIT.encode([full, {keys[0]: 0}])
    assert text.endswith('["^ ","^0",0]]')  # a hit is still its code when the cache is full
    assert TRANSIT.decode(text) == [full, {keys[0]: 0}]
    text = TRANSIT.encode([full, {keys[1936]: 0}, {keys[0]: 0}, {keys[1936]: 0}])
    assert text.endswith('["^ ","~:key1936",0],["^ ","~:key0000",0],["^ ","^0",0]]')
    assert TRANSIT.decode(text)[3] == {"key1936": 0}


def test_cache_codes_have_two_digits_past_44() -> None:
    keys = [f"k{i:03d}" for i in range(50)]
    text = TRANSIT.encode([{key: 0 for key in keys}, {keys[44]: 1, keys[49]: 2}])
    assert text.endswith('["^ ","^10",1,"^15",2]]')
    assert TRANSIT.decode(text)[1] == {keys[44]: 1, keys[49]: 2}


@pytest.mark.parametrize(
    ("x", "java"),
    [
        (0.1, "0.1"),
        (100.0, "100.0"),
        (1e7, "1.0E7"),
        (9999999.0, "9999999.0"),
        (0.001, "0.001"),
        (0.0009999, "9.999E-4"),
        (1e23, "1.0E23"),
        (5e-324, "4.9E-324"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (-0.0, "-0.0"),
        (-123.456, "-123.456"),
    ],
)
def test_doubles_are_written_as_java_writes_them(x: float, java: str) -> None:
    assert java_double(x) == java
    assert float(java) == x


def test_keywords_and_symbols_are_small_immutable_values() -> None:
    kw = Keyword("user/id")
    assert (kw.namespace, kw.name, kw.text, str(kw), repr(kw)) == (
        "user",
        "id",
        "user/id",
        ":user/id",
        "Keyword('user/id')",
    )
    assert Keyword("id").namespace is None and Keyword("/").name == "/"
    assert kw == Keyword("user/id") and hash(kw) == hash(Keyword("user/id"))
    assert kw != Symbol("user/id") and kw != "user/id" and str(Symbol("a/b")) == "a/b"
    with pytest.raises(AttributeError):
        kw._text = "other"
    with pytest.raises(FrozenInstanceError):
        TaggedValue("t", 1).tag = "u"  # type: ignore[misc]
    with pytest.raises(ValueError, match="one character"):
        Char("ab")


def test_it_is_a_serializer() -> None:
    assert isinstance(TRANSIT, Serializer)
    assert check_serializer(TRANSIT) is TRANSIT


class _Unwritable:
    pass


def _cycle() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (datetime(2024, 1, 1), "naive datetime"),
        (date(2024, 1, 1), "date without a time"),
        (_Unwritable(), "type _Unwritable that Transit cannot write"),
        (Decimal("NaN"), "BigDecimal cannot be"),
        (_cycle(), "contains itself"),
        ("\ud800", "not valid UTF-8"),
        (TaggedValue("x", 1), "needs a str rep"),
    ],
    ids=["naive", "date", "object", "decimal-nan", "cycle", "surrogate", "tagged"],
)
def test_what_cannot_be_written_is_a_payload_error_naming_it(value: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        TRANSIT.encode(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid Transit JSON"),
        ("[NaN]", "not valid Transit JSON"),
        ('["^0"]', "cache code '\\^0', which names nothing"),
        ('["~:abcd","^~"]', "cache code"),
        ('["~#\'","~ix"]', "bad ~i value 'x'"),
        ('["~#\'","~m12.5"]', "bad ~m value"),
        ('["~#\'","~m999999999999999999"]', "bad ~m value"),
        ('["~#\'","~t2024-13-01T00:00:00Z"]', "bad ~t value"),
        ('["~#\'","~uxyz"]', "bad ~u value"),
        ('["~#\'","~?x"]', "bad ~\\? value"),
        ('["~#\'","~b!!"]', "bad ~b value"),
        ('["~#\'","~f1_0"]', "bad ~f value"),
        ('["~#\'","~zNope"]', "bad ~z value"),
        ('["~#\'","~cab"]', "bad ~c value"),
        ('["~#ratio",[1,0]]', "bad ~#ratio"),
        ('["~#set",1]', "~#set whose value is not an array"),
        ('["~#set",[1,1]]', "equal in Python"),
        ('["~#set"]', "without exactly one value"),
        ('["^ ","~:a"]', "key and no value"),
        ('["^ ","~:email",1,"email",2]', "occurs twice"),
        ('["~#cmap",[["^ ","~:a",1],2]]', "map as a map key"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_what_cannot_be_read_is_a_payload_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        TRANSIT.decode(text)


# The oracle: transit-js


class Oracle:
    """A transit-js process answering encode/decode requests, one JSON line each."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        assert answer["ok"], answer["error"]
        return answer

    def encode(self, description: dict[str, Any]) -> str:
        text: str = self.ask({"op": "encode", "value": description})["text"]
        return text

    def decode(self, text: str) -> dict[str, Any]:
        value: dict[str, Any] = self.ask({"op": "decode", "text": text})["value"]
        return value


def _oracle_missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not on PATH, so transit-js (the Transit oracle) cannot run"
    if not (NODE_PROJECT / "node_modules" / "transit-js" / "package.json").exists():
        return f"transit-js is not installed in tests/transit_node: run `{INSTALL}`"
    return None


@contextlib.contextmanager
def oracle_process() -> Iterator[Oracle]:
    """transit-js in a node process of its own; without it a skip, or a failure when CI is
    set (test_clojure_interop.py starts one too)."""
    reason = _oracle_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}")
        pytest.skip(reason)
    node = shutil.which("node")
    assert node is not None
    process = subprocess.Popen(
        [node, str(ORACLE_SCRIPT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    try:
        yield Oracle(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    with oracle_process() as process:
        yield process


def describe(value: Any, key: bool = False) -> dict[str, Any]:
    """How transit-js describes the value that Python writes (see tests/transit_oracle.js)."""
    if key and type(value) is str:
        return {"t": "kw", "v": value}
    for types, describe_one in _DESCRIBERS:
        if isinstance(value, types):
            return describe_one(value)
    raise TypeError(f"cannot describe {value!r}")


def _describe_int(value: int) -> dict[str, Any]:
    if abs(value) < 2**53:
        return {"t": "num", "v": value}
    return {"t": "int" if -(2**63) <= value < 2**63 else "bigint", "v": str(value)}


def _describe_float(value: float) -> dict[str, Any]:
    if math.isnan(value) or math.isinf(value):
        return {"t": "num", "v": "NaN" if math.isnan(value) else ("INF" if value > 0 else "-INF")}
    return {"t": "num", "v": value}


def _describe_tagged(value: TaggedValue) -> dict[str, Any]:
    return {"t": "tagged", "tag": value.tag, "v": describe(value.rep)}


_DESCRIBERS: list[tuple[Any, Any]] = [
    (type(None), lambda v: {"t": "null"}),
    (bool, lambda v: {"t": "bool", "v": v}),
    (int, _describe_int),
    (float, _describe_float),
    (URI, lambda v: {"t": "uri", "v": str(v)}),
    (str, lambda v: {"t": "str", "v": str(v)}),
    (Keyword, lambda v: {"t": "kw", "v": v.text}),
    (Symbol, lambda v: {"t": "sym", "v": v.text}),
    (UUID, lambda v: {"t": "uuid", "v": str(v)}),
    (
        datetime,
        lambda v: {
            "t": "inst",
            "v": str((v - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)),
        },
    ),
    (Decimal, lambda v: {"t": "bigdec", "v": str(v)}),
    (
        Fraction,
        lambda v: {
            "t": "tagged",
            "tag": "ratio",
            "v": {
                "t": "vec",
                "v": [
                    {"t": "bigint", "v": str(v.numerator)},
                    {"t": "bigint", "v": str(v.denominator)},
                ],
            },
        },
    ),
    (bytes, lambda v: {"t": "bytes", "v": __import__("base64").b64encode(v).decode()}),
    (TaggedValue, _describe_tagged),
    (
        dict,
        lambda v: {"t": "map", "v": [[describe(k, key=True), describe(x)] for k, x in v.items()]},
    ),
    ((set, frozenset), lambda v: {"t": "set", "v": [describe(x) for x in v]}),
    ((list, tuple), lambda v: {"t": "vec", "v": [describe(x) for x in v]}),
]


def canonical(description: Any) -> Any:
    """A description with sets' and maps' members sorted and whole floats as ints."""
    if isinstance(description, list):
        return [canonical(item) for item in description]
    if not isinstance(description, dict):
        return description
    result = {name: canonical(part) for name, part in description.items()}
    if result.get("t") in ("set", "map"):
        result["v"] = sorted(result["v"], key=lambda member: json.dumps(member, sort_keys=True))
    if result.get("t") == "num" and isinstance(result["v"], float) and result["v"].is_integer():
        result["v"] = int(result["v"])
    return result


ROUND_TRIPS = [
    None,
    True,
    False,
    0,
    -1,
    2**53 - 1,
    2**53,
    -(2**53),
    2**63 - 1,
    -(2**63),
    2**64,
    -(2**80),
    1.5,
    -0.25,
    1e300,
    5e-324,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "plain",
    "~tilde",
    "^caret",
    "`backtick",
    "~",
    "^",
    "^ ",
    "unicode é ✓ 𝄞",
    'control \x00\x1f\n"\\',
    Keyword("email"),
    Keyword("user/id"),
    Symbol("clojure.core/inc"),
    Symbol("x"),
    AN_ID,
    A_MOMENT,
    datetime(1960, 1, 1, 0, 0, 0, 500000, tzinfo=UTC),
    Decimal("3.14"),
    Decimal("-1E+10"),
    Decimal("0.000001"),
    Fraction(1, 3),
    Fraction(-22, 7),
    b"\x00\x01\xfe",
    URI("https://example.com/a?b=c"),
    [],
    [1, [2, [3]]],
    frozenset(),
    frozenset({1, "a", Keyword("k")}),
    frozenset({(1, 2)}),
    {},
    {"email": "a@b", "user-id": 42},
    {"user/id": 7, "kind": Keyword("welcome")},
    {2: "two", None: "nil", True: "yes"},
    {AN_ID: 1, A_MOMENT: 2, Keyword("k"): 3},
    {(1, 2): "vector key", frozenset({1}): "set key", Fraction(1, 2): "ratio key"},
    TaggedValue("point", [1, 2]),
    TaggedValue("x", "foo"),
    {"nested": {"list": [{"email": "a@b", "tags": frozenset({"x"})}], "more": [[{}]]}},
]


ROUND_TRIP_IDS = [f"{n}-{type(value).__name__}" for n, value in enumerate(ROUND_TRIPS)]
"""Stable ids (a set's repr changes with hash seeds, and pytest-xdist's workers must agree)."""


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=ROUND_TRIP_IDS)
def test_python_reads_what_transit_js_writes(oracle: Oracle, value: Any) -> None:
    text = oracle.encode(describe(value))
    assert same(TRANSIT.decode(text), _as_read(value)), text


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=ROUND_TRIP_IDS)
def test_transit_js_reads_what_python_writes(oracle: Oracle, value: Any) -> None:
    text = TRANSIT.encode(value)
    assert canonical(oracle.decode(text)) == canonical(describe(value)), text


def _as_read(value: Any) -> Any:
    """The value as Python reads it back: Keyword map keys become str."""
    if isinstance(value, dict):
        return {(k.text if isinstance(k, Keyword) else k): _as_read(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_read(item) for item in value]
    return value


@pytest.mark.parametrize(
    ("description", "value"),
    [
        ({"t": "char", "v": "x"}, Char("x")),
        ({"t": "list", "v": [{"t": "num", "v": 1}]}, [1]),
        ({"t": "bigint", "v": "5"}, 5),
        ({"t": "num", "v": 2.0}, 2),
        ({"t": "map", "v": [[{"t": "str", "v": "email"}, {"t": "num", "v": 1}]]}, {"email": 1}),
        ({"t": "map", "v": [[{"t": "num", "v": 3}, {"t": "null"}]]}, {3: None}),
        ({"t": "tagged", "tag": "point", "v": {"t": "vec", "v": []}}, TaggedValue("point", [])),
    ],
    ids=["char", "list", "small-bigint", "whole-float", "string-key", "int-key", "tagged"],
)
def test_what_transit_js_writes_is_read_as_documented(
    oracle: Oracle, description: dict[str, Any], value: Any
) -> None:
    assert same(TRANSIT.decode(oracle.encode(description)), value)


@pytest.mark.parametrize(
    "value",
    [{2.5: "double key"}, -0.0, Char("c"), [Char("a")], (1, (2,))],
    ids=["double-key", "negative-zero", "char", "chars", "tuples"],
)
def test_transit_js_reads_what_python_writes_one_way(oracle: Oracle, value: Any) -> None:
    assert canonical(oracle.decode(TRANSIT.encode(value))) == canonical(describe(value))


def _repeated_keys() -> dict[str, Any]:
    users = [
        {
            "email": f"u{i}@x",
            "user-id": i,
            "roles": frozenset({Keyword("admin")}),
            "address": {"city": "Oslo", "zip": "0150"},
        }
        for i in range(30)
    ]
    return {"users": users}


def test_the_cache_writes_exactly_as_transit_js_does(oracle: Oracle) -> None:
    value = _repeated_keys()
    text = TRANSIT.encode(value)
    assert '["^4",["^5"]]' in text and '"^8"' in text
    assert text == oracle.encode(describe(value))


def _rolling_keys() -> list[dict[str, int]]:
    """200 maps of 40 keys each from 2,500: hits, misses and several cache restarts."""
    return [{f"key-{(j * 37 + i) % 2500}": i for i in range(40)} for j in range(200)]


def test_the_cache_past_1936_entries_python_to_transit_js(oracle: Oracle) -> None:
    value = _rolling_keys()
    text = TRANSIT.encode(value)
    assert re.search(r'"\^[0-\[]{2}"', text), "no two-digit cache code"
    assert canonical(oracle.decode(text)) == canonical(describe(value))


def test_the_cache_past_1936_entries_transit_js_to_python(oracle: Oracle) -> None:
    value = _rolling_keys()
    text = oracle.encode(describe(value))
    assert '"^[' in text
    assert TRANSIT.decode(text) == value


def test_a_full_cache_hit_transit_js_and_python_each_read_the_others(oracle: Oracle) -> None:
    keys = [f"key{i:04d}" for i in range(1937)]
    value = [{key: 0 for key in keys[:1936]}, {keys[0]: 0}, {keys[1936]: 0}, {keys[1936]: 1}]
    assert canonical(oracle.decode(TRANSIT.encode(value))) == canonical(describe(value))
    assert TRANSIT.decode(oracle.encode(describe(value))) == value


# The real Proletarian (tests/proletarian_oracle.py)

_ODD_CHARACTERS = (
    "\x80\x85\xa0\u07ff\u0800\u2028\u2029\ud7ff\ue000\ufeff\ufffe\uffffé✓"
    "\U00010000\U0001d11e\U0001f600\U0010ffff"
)


def _strings() -> list[Any]:
    """Every ASCII character and some others in the BMP and beyond it, in strings, keywords
    and map keys (beyond the BMP a character counts twice for the write cache)."""
    odd = [chr(i) for i in range(0x80)] + list(_ODD_CHARACTERS)
    return [
        *(f"a{c}b" for c in odd),
        "\U0001f600" * 3,
        [Keyword("é\U0001f600"), Keyword("é\U0001f600"), Keyword("ab\U0001f600")],
        [{"\U0001f600": 1}, {"\U0001f600": 2}, {"k\U0001f600": 3}, {"k\U0001f600": 4}],
        {"s": "\U0001f600", "t": ["\U0010ffff", Symbol("a\U0001f600")]},
    ]


def _ordered(value: Any) -> bool:
    """Whether Clojure keeps the value's order as EDN gives it (no set of two or more, no
    map of more than 8 entries), so that it writes it in the same order as Python."""
    if isinstance(value, (set, frozenset)):
        return len(value) < 2
    if isinstance(value, dict):
        return len(value) <= 8 and all(map(_ordered, [*value, *value.values()]))
    if isinstance(value, (list, tuple)):
        return all(map(_ordered, value))
    return True


def test_proletarian_writes_what_python_writes_and_each_reads_the_other() -> None:
    """Proletarian's own serializer, in one JVM call: given each value (as EDN) it writes
    exactly Python's text (where Clojure keeps the order), it reads Python's text as that
    value, and Python reads what it writes as the value."""
    full = [f"key{i:04d}" for i in range(1937)]
    values = [
        *(value for value, _ in PROLETARIAN_TEXTS),
        *ROUND_TRIPS,
        *_strings(),
        _rolling_keys(),
        [{key: 0 for key in full[:1936]}, {full[0]: 0}, {full[1936]: 0}, {full[1936]: 1}],
    ]
    texts = [TRANSIT.encode(value) for value in values]

    records = clojure().run(
        {
            "cmd": "transit",
            "check": [{"edn": edn(v), "transit": t} for v, t in zip(values, texts, strict=True)],
        }
    )

    assert len(records) == len(values)
    for value, text, record in zip(values, texts, records, strict=True):
        assert "error" not in record, (value, record)
        assert record["read_equal"] or record["read_edn_equal"], (text, record["read_edn"])
        assert same(TRANSIT.decode(record["written"]), _as_read(value)), record["written"]
        if _ordered(value):
            assert record["written"] == text
    assert sum(record["write_equal"] for record in records) > len(records) - 5
