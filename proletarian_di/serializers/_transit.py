"""Transit JSON, written by hand, as Proletarian (Clojure) stores job payloads.

Matched against Proletarian v1.0.109-alpha (commit 1384d7b57ae82083954e7be455a88f6a3029253a;
its deps.edn pins com.cognitect/transit-clj 1.0.329, on transit-java 1.0.362), which the
test suite runs as its oracle. Proletarian writes with
`(transit/writer out :json {:handlers {Instant instant-writer}})`, so:

* the non-verbose `:json` mode, with the write cache on (`^0`, `^1`, ... for map
  keys, and for keywords, symbols and `~#tag`s anywhere, longer than 3 characters);
* its one custom handler writes `java.time.Instant` as `~m<epoch millis>`, as
  transit-java does `java.util.Date`; it reads `~m` back, and transit-java reads `~t`;
* everything else is transit-clj's and transit-java's defaults: maps with
  one-character-tag keys as `["^ ", k, v, ...]`, others as `["~#cmap", [k, v, ...]]`,
  `~#set`, `~#list`, `~#ratio` of two `~n` big integers, `~i` for longs past 2^53-1,
  `~n` past 64 bits, `~f` big decimals, `~c`, `~u`, `~r`, `~b`, `~z` special numbers,
  and a top-level scalar quoted as `["~#'", value]`.

The write cache follows transit-java: a miss when 44*44 = 1936 codes are in use
empties the cache and starts again from `^0` (a hit is still written as its code), and a
string's length is Java's (UTF-16 units). Strings are written as transit-java's Jackson
UTF-8 generator writes them: control characters escaped, characters beyond the BMP as
surrogate pair escapes (`\\uD83D\\uDE00`), the rest as UTF-8.
Doubles are written as Java's `Double.toString` (JDK 19+) writes them.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..errors import PayloadError

__all__ = ["URI", "Char", "Keyword", "Symbol", "TaggedValue", "TransitSerializer"]

_CACHE_DIGITS = 44
_CACHE_BASE = 48
_CACHE_MAX = _CACHE_DIGITS * _CACHE_DIGITS
_MAP_AS_ARRAY = "^ "
_JSON_INT_MAX = 2**53 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLI = timedelta(milliseconds=1)


class _Named:
    """A Clojure keyword's or symbol's text, `ns/name` or `name`, immutable and hashable."""

    __slots__ = ("_text",)
    _text: str

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"{type(self).__name__} text must be a str, got {text!r}")
        object.__setattr__(self, "_text", text)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def text(self) -> str:
        """The text without a prefix: `ns/name`, or `name` when it has no namespace."""
        return self._text

    @property
    def namespace(self) -> str | None:
        """The part before the first `/`, as Clojure splits it; None without one."""
        slash = self._text.find("/")
        return None if slash <= 0 or self._text == "/" else self._text[:slash]

    @property
    def name(self) -> str:
        """The part after the namespace's `/` (the whole text without a namespace)."""
        namespace = self.namespace
        return self._text if namespace is None else self._text[len(namespace) + 1 :]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Named) and type(other) is type(self) and other._text == self._text

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._text))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text!r})"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self._text,))


class Keyword(_Named):
    """A Clojure keyword as a map value or collection member: `str()` is `:ns/name`."""

    __slots__ = ()

    def __str__(self) -> str:
        return ":" + self._text


class Symbol(_Named):
    """A Clojure symbol: `str()` is `ns/name`, as Clojure prints it."""

    __slots__ = ()

    def __str__(self) -> str:
        return self._text


class Char(str):
    """A one-character string that is written as Transit's `~c` (a java.lang.Character)."""

    __slots__ = ()

    def __new__(cls, value: str) -> Char:
        if len(value) != 1:
            raise ValueError(f"a Char is one character, got {value!r}")
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"Char({str(self)!r})"


class URI(str):
    """A URI string that is written as Transit's `~r` (a java.net.URI)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"URI({str(self)!r})"


@dataclass(frozen=True)
class TaggedValue:
    """A value with a tag this codec has no reader for: kept, and written back unchanged."""

    tag: str
    rep: Any


@dataclass(frozen=True)
class _Tag:
    """A `~#tag` string while its array is read."""

    name: str


class TransitSerializer:
    """Transit JSON as Proletarian (transit-clj `:json`) writes and reads job payloads.

    Python `str` map keys are written as keywords (`{"email": ...}` is `{:email ...}`),
    and keyword map keys are read as `str`; `keyword_keys=False` writes `str` keys as
    Transit strings instead. Read: keyword values as `Keyword`, symbols as `Symbol`, sets
    as `frozenset`, vectors and lists as `list` (as tuples inside map keys and sets), `~u`
    as `UUID`, `~m`/`~t` as aware UTC `datetime`, `~i`/`~n` as `int`, `~f` as `Decimal`,
    ratios as `Fraction`, `~c` as `Char`, `~r` as `URI`, `~b` as `bytes`, and any other
    tag as a `TaggedValue`; each of these is written back as it was read.
    """

    def __init__(self, *, keyword_keys: bool = True) -> None:
        self.keyword_keys = keyword_keys

    def encode(self, payload: Any) -> str:
        """The payload as Transit JSON text; PayloadError names what cannot be written."""
        try:
            text = _Writer(self.keyword_keys).write_top(payload)
        except RecursionError as exc:
            raise PayloadError("payload is nested too deeply for Transit") from exc
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PayloadError(f"payload has a string that is not valid UTF-8: {exc}") from exc
        return text

    def decode(self, text: str) -> Any:
        """The value of Transit JSON text; PayloadError names what cannot be read."""
        try:
            tree = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_no_constant)
        except (ValueError, TypeError) as exc:
            raise PayloadError(f"stored payload is not valid Transit JSON: {exc}") from exc
        except RecursionError as exc:
            raise PayloadError("stored payload is nested too deeply to read") from exc
        try:
            return _Reader().read(tree)
        except RecursionError as exc:
            raise PayloadError("stored payload is nested too deeply to read") from exc


# Writing


_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)}
_JSON_ESCAPES.update(
    {ord('"'): '\\"', ord("\\"): "\\\\", 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}
)


_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")


def _surrogate_pair(match: re.Match[str]) -> str:
    """A character beyond the BMP as Jackson's UTF-8 writer escapes it: its UTF-16
    surrogate pair, `\\uD83D\\uDE00` for U+1F600."""
    high, low = struct.unpack(">HH", match.group().encode("utf-16-be"))
    return f"\\u{high:04X}\\u{low:04X}"


def _json_string(s: str) -> str:
    """A JSON string literal as Jackson's UTF-8 generator (transit-java's, Proletarian's)
    writes one: `"` and `\\` escaped, control characters as `\\n` or `\\u001F`, characters
    beyond the BMP as surrogate pairs (`\\uD83D\\uDE00`), every other one as it is."""
    text = s.translate(_JSON_ESCAPES)
    if not text.isascii() and _BEYOND_BMP.search(text):
        text = _BEYOND_BMP.sub(_surrogate_pair, text)
    return '"' + text + '"'


def _cache_code(index: int) -> str:
    hi, lo = divmod(index, _CACHE_DIGITS)
    low = chr(lo + _CACHE_BASE)
    return "^" + low if hi == 0 else "^" + chr(hi + _CACHE_BASE) + low


def _cacheable(s: str, as_key: bool) -> bool:
    """Whether transit-java caches the string: longer than 3 UTF-16 units (Java's
    `String.length`, in which a character beyond the BMP counts twice), and a map key or a
    keyword, symbol or tag."""
    long_enough = len(s) > 3 or len(s) + sum(c > "\uffff" for c in s) > 3
    return long_enough and (as_key or (s[0] == "~" and s[1] in ":$#"))


class _WriteCache:
    """transit-java's WriteCache: codes in order of first use, emptied on a miss when full."""

    def __init__(self) -> None:
        self.codes: dict[str, str] = {}

    def write(self, s: str, as_key: bool) -> str:
        if not _cacheable(s, as_key):
            return s
        code = self.codes.get(s)
        if code is not None:
            return code
        if len(self.codes) == _CACHE_MAX:
            self.codes.clear()
        self.codes[s] = _cache_code(len(self.codes))
        return s


def java_double(x: float) -> str:
    """`Double.toString(x)` as JDK 19+ writes it (shortest digits that read back as x)."""
    if math.isnan(x) or math.isinf(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    digits, point = _shortest_digits(abs(x))
    sign = "-" if x < 0 else ""
    if 1e-3 <= abs(x) < 1e7:
        return sign + _plain(digits, point)
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _shortest_digits(x: float) -> tuple[str, int]:
    """Significant digits of x and the decimal point's place (x = 0.DIGITS * 10**point)."""
    shortest = Decimal(repr(x)).normalize()
    if len(shortest.as_tuple().digits) == 1:
        shortest = _closer_two_digits(x, shortest)
    tup = shortest.as_tuple()
    digits = "".join(map(str, tup.digits)).rstrip("0") or "0"
    return digits, len(tup.digits) + int(tup.exponent)


def _closer_two_digits(x: float, one: Decimal) -> Decimal:
    """Java picks among 1- and 2-digit decimals the closest that reads back (4.9E-324)."""
    exact = Decimal(x)
    two = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1))
    if float(two) == x and abs(two - exact) < abs(one - exact):
        return two.normalize()
    return one


def _plain(digits: str, point: int) -> str:
    if point <= 0:
        return "0." + "0" * -point + digits
    whole, fraction = digits[:point].ljust(point, "0"), digits[point:]
    return f"{whole}.{fraction or '0'}"


class _Writer:
    """One payload's writing: the emitted JSON parts and its write cache."""

    def __init__(self, keyword_keys: bool) -> None:
        self.keyword_keys = keyword_keys
        self.cache = _WriteCache()
        self.parts: list[str] = []
        self.open: set[int] = set()

    def write_top(self, value: Any) -> str:
        if _is_scalar(value):
            self.tagged("'", lambda: self.value(value))
        else:
            self.value(value)
        return "".join(self.parts)

    def string(self, s: str, as_key: bool = False) -> None:
        self.parts.append(_json_string(self.cache.write(s, as_key)))

    def value(self, value: Any, as_key: bool = False) -> None:
        for types, write in _WRITERS:
            if isinstance(value, types):
                write(self, value, as_key)
                return
        raise PayloadError(
            f"payload has a value of type {type(value).__name__} that Transit cannot write: "
            f"{value!r:.80}"
        )

    def key(self, key: Any, as_key: bool) -> None:
        if self.keyword_keys and type(key) is str:
            key = Keyword(key)
        self.value(key, as_key)

    def tagged(self, tag: str, write_rep: Callable[[], None]) -> None:
        self.parts.append("[")
        self.string("~#" + tag)
        self.parts.append(",")
        write_rep()
        self.parts.append("]")

    def array(self, items: Iterable[Any]) -> None:
        self.parts.append("[")
        for i, item in enumerate(items):
            if i:
                self.parts.append(",")
            self.value(item)
        self.parts.append("]")

    def container(self, value: Any, write: Callable[[], None]) -> None:
        """Write a collection, refusing one that contains itself."""
        if id(value) in self.open:
            raise PayloadError(f"payload contains itself (a {type(value).__name__} in a cycle)")
        self.open.add(id(value))
        write()
        self.open.discard(id(value))


def _write_none(w: _Writer, _: None, as_key: bool) -> None:
    if as_key:
        w.string("~_", True)
    else:
        w.parts.append("null")


def _write_bool(w: _Writer, value: bool, as_key: bool) -> None:
    if as_key:
        w.string("~?t" if value else "~?f", True)
    else:
        w.parts.append("true" if value else "false")


def _write_int(w: _Writer, value: int, as_key: bool) -> None:
    if not _LONG_MIN <= value <= _LONG_MAX:
        w.string(f"~n{value}", as_key)
    elif as_key or abs(value) > _JSON_INT_MAX:
        w.string(f"~i{value}", as_key)
    else:
        w.parts.append(str(value))


def _write_float(w: _Writer, value: float, as_key: bool) -> None:
    if math.isnan(value) or math.isinf(value):
        w.string("~zNaN" if math.isnan(value) else ("~zINF" if value > 0 else "~z-INF"), as_key)
    elif as_key:
        w.string("~d" + java_double(value), True)
    else:
        w.parts.append(java_double(value))


def _write_str(w: _Writer, value: str, as_key: bool) -> None:
    if type(value) is Char:
        w.string("~c" + value, as_key)
    elif type(value) is URI:
        w.string("~r" + value, as_key)
    else:
        w.string("~" + value if value[:1] in ("~", "^", "`") else value, as_key)


def _write_named(w: _Writer, value: _Named, as_key: bool) -> None:
    w.string(("~:" if isinstance(value, Keyword) else "~$") + value.text, as_key)


def _write_uuid(w: _Writer, value: uuid.UUID, as_key: bool) -> None:
    w.string(f"~u{value}", as_key)


def _write_datetime(w: _Writer, value: date, as_key: bool) -> None:
    if not isinstance(value, datetime):
        raise PayloadError(
            f"payload has a date without a time ({value.isoformat()}): "
            "Transit has instants only, pass an aware datetime"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise PayloadError(
            f"payload has a naive datetime ({value.isoformat()}): "
            "Transit instants need a timezone, e.g. datetime.now(timezone.utc)"
        )
    w.string(f"~m{(value - _EPOCH) // _MILLI}", as_key)


def _write_decimal(w: _Writer, value: Decimal, as_key: bool) -> None:
    if not value.is_finite():
        raise PayloadError(f"payload has the Decimal {value}, which a BigDecimal cannot be")
    w.string(f"~f{value}", as_key)


def _write_fraction(w: _Writer, value: Fraction, as_key: bool) -> None:
    def rep() -> None:
        w.parts.append("[")
        w.string(f"~n{value.numerator}")
        w.parts.append(",")
        w.string(f"~n{value.denominator}")
        w.parts.append("]")

    w.tagged("ratio", rep)


def _write_bytes(w: _Writer, value: bytes | bytearray, as_key: bool) -> None:
    w.string("~b" + base64.b64encode(bytes(value)).decode("ascii"), as_key)


def _write_tagged(w: _Writer, value: TaggedValue, as_key: bool) -> None:
    if len(value.tag) == 1:
        if not isinstance(value.rep, str):
            raise PayloadError(f"TaggedValue {value.tag!r} needs a str rep, got {value.rep!r:.80}")
        w.string(f"~{value.tag}{value.rep}", as_key)
    else:
        w.tagged(value.tag, lambda: w.value(value.rep))


def _write_map(w: _Writer, value: Mapping[Any, Any], as_key: bool) -> None:
    w.container(value, lambda: _map_body(w, value))


def _map_body(w: _Writer, value: Mapping[Any, Any]) -> None:
    if all(_is_scalar(key) for key in value):
        w.parts.append("[")
        w.string(_MAP_AS_ARRAY)
        for key, item in value.items():
            w.parts.append(",")
            w.key(key, True)
            w.parts.append(",")
            w.value(item)
        w.parts.append("]")
    else:
        w.tagged("cmap", lambda: _cmap_rep(w, value))


def _cmap_rep(w: _Writer, value: Mapping[Any, Any]) -> None:
    w.parts.append("[")
    for i, (key, item) in enumerate(value.items()):
        w.parts.append("," if i else "")
        w.key(key, False)
        w.parts.append(",")
        w.value(item)
    w.parts.append("]")


def _write_set(w: _Writer, value: set[Any] | frozenset[Any], as_key: bool) -> None:
    w.container(value, lambda: w.tagged("set", lambda: w.array(value)))


def _write_array(w: _Writer, value: list[Any] | tuple[Any, ...], as_key: bool) -> None:
    w.container(value, lambda: w.array(value))


_WRITERS: tuple[tuple[type | tuple[type, ...], Callable[[_Writer, Any, bool], None]], ...] = (
    (type(None), _write_none),
    (bool, _write_bool),
    (int, _write_int),
    (float, _write_float),
    (str, _write_str),
    (_Named, _write_named),
    (uuid.UUID, _write_uuid),
    (date, _write_datetime),
    (Decimal, _write_decimal),
    (Fraction, _write_fraction),
    ((bytes, bytearray), _write_bytes),
    (TaggedValue, _write_tagged),
    (Mapping, _write_map),
    ((set, frozenset), _write_set),
    ((list, tuple), _write_array),
)

_SCALARS = (type(None), bool, int, float, str, _Named, uuid.UUID, date, Decimal, bytes, bytearray)


def _is_scalar(value: Any) -> bool:
    """Whether transit's handler for the value has a one-character tag (it can be a map key)."""
    if isinstance(value, TaggedValue):
        return len(value.tag) == 1
    return isinstance(value, _SCALARS)


# Reading


class _Pairs(list[Any]):
    """A JSON object's (key, value) pairs, told apart from a JSON array."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DOUBLE_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_SPECIAL = {"NaN": math.nan, "INF": math.inf, "-INF": -math.inf}
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?"
    r"(Z|[+-]\d\d(?::?\d\d)?)?",
    re.IGNORECASE,
)


def _parse_int(rep: str) -> int:
    if not _INT.fullmatch(rep):
        raise ValueError("not an integer")
    return int(rep)


def _parse_double(rep: str) -> float:
    if rep in _DOUBLE_WORDS:
        return _DOUBLE_WORDS[rep]
    if not _DECIMAL.fullmatch(rep):
        raise ValueError("not a decimal number")
    return float(rep)


def _parse_decimal(rep: str) -> Decimal:
    if not _DECIMAL.fullmatch(rep):
        raise ValueError("not a decimal number")
    return Decimal(rep)


def _parse_special(rep: str) -> float:
    if rep not in _SPECIAL:
        raise ValueError("not NaN, INF or -INF")
    return _SPECIAL[rep]


def _parse_bool(rep: str) -> bool:
    if rep not in ("t", "f"):
        raise ValueError("not t or f")
    return rep == "t"


def _parse_millis(rep: str | int) -> datetime:
    millis = rep if isinstance(rep, int) else _parse_int(rep)
    try:
        return _EPOCH + millis * _MILLI
    except OverflowError:
        raise ValueError("outside the years 1 to 9999 that a Python datetime holds") from None


def _parse_iso(rep: str) -> datetime:
    match = _ISO.fullmatch(rep.strip())
    if not match:
        raise ValueError("not an ISO 8601 date and time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    y, mo, d, h, mi, sec = (int(part) for part in (year, month, day, hour, minute, second or 0))
    moment = datetime(y, mo, d, h, mi, sec, micros, tzinfo=_zone(zone))
    return moment.astimezone(timezone.utc)


def _zone(text: str | None) -> timezone:
    if text is None or text.upper() == "Z":
        return timezone.utc
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return timezone(-offset if text[0] == "-" else offset)


def _parse_bytes(rep: str) -> bytes:
    return base64.b64decode(rep, validate=True)


_GROUND: dict[str, Callable[[str], Any]] = {
    "_": lambda rep: None,
    "?": _parse_bool,
    "i": _parse_int,
    "n": _parse_int,
    "d": _parse_double,
    "f": _parse_decimal,
    "z": _parse_special,
    "c": Char,
    ":": Keyword,
    "$": Symbol,
    "u": uuid.UUID,
    "m": _parse_millis,
    "t": _parse_iso,
    "r": URI,
    "b": _parse_bytes,
}


def _ground(tag: str, rep: str) -> Any:
    """The value of `~<tag><rep>`; a tag without a reader stays a TaggedValue."""
    parse = _GROUND.get(tag)
    if parse is None:
        return TaggedValue(tag, rep)
    try:
        return parse(rep)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise PayloadError(f"stored payload has a bad ~{tag} value {rep!r:.80}: {exc}") from exc


def _parse_string(s: str) -> Any:
    if len(s) < 2 or s[0] != "~":
        return s
    if s[1] in "~^`":
        return s[1:]
    if s[1] == "#":
        return _Tag(s[2:])
    return _ground(s[1], s[2:])


def _hashable(value: Any) -> Any:
    """A map key or set member as something hashable: arrays become tuples."""
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, TaggedValue):
        return TaggedValue(value.tag, _hashable(value.rep))
    if isinstance(value, dict):
        raise PayloadError("stored payload has a map as a map key or set member")
    return value


def _map_key(key: Any) -> Any:
    return key.text if isinstance(key, Keyword) else _hashable(key)


def _put(target: dict[Any, Any], key: Any, value: Any) -> None:
    key = _map_key(key)
    if key in target:
        raise PayloadError(
            f"stored payload has a map whose key {key!r} occurs twice once read "
            "(a string key and a keyword key of the same name?)"
        )
    target[key] = value


def _pairs_to_dict(items: list[Any]) -> dict[Any, Any]:
    if len(items) % 2:
        raise PayloadError("stored payload has a map with a key and no value")
    result: dict[Any, Any] = {}
    for i in range(0, len(items), 2):
        _put(result, items[i], items[i + 1])
    return result


def _as_list(tag: str, rep: Any) -> list[Any]:
    if not isinstance(rep, list):
        raise PayloadError(f"stored payload has a ~#{tag} whose value is not an array: {rep!r:.80}")
    return rep


def _read_set(rep: Any) -> frozenset[Any]:
    items = [_hashable(item) for item in _as_list("set", rep)]
    result = frozenset(items)
    if len(result) != len(items):
        raise PayloadError("stored payload has a set with members that are equal in Python")
    return result


def _read_ratio(rep: Any) -> Fraction:
    parts = _as_list("ratio", rep)
    if len(parts) != 2 or not all(type(part) is int for part in parts) or parts[1] == 0:
        raise PayloadError(f"stored payload has a bad ~#ratio {rep!r:.80}")
    return Fraction(parts[0], parts[1])


def _read_uuid(rep: Any) -> uuid.UUID:
    if isinstance(rep, str):
        return uuid.UUID(_ground("u", rep).hex)
    parts = _as_list("u", rep)
    if len(parts) != 2 or not all(type(part) is int for part in parts):
        raise PayloadError(f"stored payload has a bad ~#u {rep!r:.80}")
    return uuid.UUID(int=((parts[0] % 2**64) << 64) | (parts[1] % 2**64))


_COMPOSITE: dict[str, Callable[[Any], Any]] = {
    "'": lambda rep: rep,
    "set": _read_set,
    "list": lambda rep: list(_as_list("list", rep)),
    "cmap": lambda rep: _pairs_to_dict(_as_list("cmap", rep)),
    "ratio": _read_ratio,
    "u": _read_uuid,
}


def _tagged(tag: str, rep: Any) -> Any:
    reader = _COMPOSITE.get(tag)
    if reader is not None:
        return reader(rep)
    if len(tag) == 1 and (isinstance(rep, str) or (tag == "m" and type(rep) is int)):
        return _ground(tag, rep)  # type: ignore[arg-type]
    return TaggedValue(tag, rep)


class _Reader:
    """One payload's reading, with its read cache of already-read values."""

    def __init__(self) -> None:
        self.cache: list[Any] = []
        self.index = 0

    def read(self, node: Any, as_key: bool = False) -> Any:
        if isinstance(node, str):
            return self.string(node, as_key)
        if isinstance(node, _Pairs):
            return self.json_object(node)
        if isinstance(node, list):
            return self.array(node)
        return node

    def string(self, s: str, as_key: bool) -> Any:
        if s[:1] == "^" and s != _MAP_AS_ARRAY:
            return self.cached(s)
        value = _parse_string(s)
        if _cacheable(s, as_key):
            self.remember(value)
        return value

    def remember(self, value: Any) -> None:
        if self.index == _CACHE_MAX:
            self.index = 0
        if self.index == len(self.cache):
            self.cache.append(value)
        else:
            self.cache[self.index] = value
        self.index += 1

    def cached(self, code: str) -> Any:
        digits = [ord(c) - _CACHE_BASE for c in code[1:]]
        index = -1
        if len(digits) in (1, 2) and all(0 <= d < _CACHE_DIGITS for d in digits):
            index = digits[0] if len(digits) == 1 else digits[0] * _CACHE_DIGITS + digits[1]
        if not 0 <= index < len(self.cache):
            raise PayloadError(f"stored payload has the cache code {code!r}, which names nothing")
        return self.cache[index]

    def array(self, items: list[Any]) -> Any:
        if not items:
            return []
        if items[0] == _MAP_AS_ARRAY:
            return self.map_as_array(items[1:])
        head = self.read(items[0])
        if isinstance(head, _Tag):
            if len(items) != 2:
                raise PayloadError(f"stored payload has ~#{head.name} without exactly one value")
            return _tagged(head.name, self.read(items[1]))
        return [head, *(self.read(item) for item in items[1:])]

    def map_as_array(self, items: list[Any]) -> dict[Any, Any]:
        if len(items) % 2:
            raise PayloadError("stored payload has a map with a key and no value")
        result: dict[Any, Any] = {}
        for i in range(0, len(items), 2):
            key = self.read(items[i], as_key=True)
            _put(result, key, self.read(items[i + 1]))
        return result

    def json_object(self, pairs: _Pairs) -> Any:
        keys = [self.string(key, as_key=True) for key, _ in pairs[:1]]
        if len(pairs) == 1 and isinstance(keys[0], _Tag):
            return _tagged(keys[0].name, self.read(pairs[0][1]))
        result: dict[Any, Any] = {}
        for i, (key, value) in enumerate(pairs):
            _put(result, keys[0] if i == 0 else self.string(key, True), self.read(value))
        return result
