"""Payload serializers: JSON by default, Transit JSON for Proletarian (Clojure)'s rows,
any `Serializer` on request."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import ConfigurationError, PayloadError
from ._transit import URI, Char, Keyword, Symbol, TaggedValue, TransitSerializer

__all__ = [
    "DEFAULT_SERIALIZER",
    "SERIALIZER_NAMES",
    "URI",
    "Char",
    "JSONSerializer",
    "Keyword",
    "Serializer",
    "SerializerName",
    "Symbol",
    "TaggedValue",
    "TransitSerializer",
    "check_serializer",
    "jsonable",
    "serializer_name",
]


@runtime_checkable
class Serializer(Protocol):
    """Turns payloads into text for the `payload` column and back."""

    def encode(self, payload: Any) -> str: ...

    def decode(self, text: str) -> Any: ...


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class JSONSerializer:
    """Strict JSON: no NaN, no arbitrary objects, valid UTF-8 only."""

    def encode(self, payload: Any) -> str:
        try:
            text = _ENCODER.encode(payload)
            text.encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"payload is not JSON-serializable: {exc}") from exc
        return text

    def decode(self, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise PayloadError(f"stored payload is not valid JSON: {exc}") from exc


DEFAULT_SERIALIZER = JSONSerializer()


SerializerName = Literal["json", "transit"]
"""A serializer by name, wherever one is taken: "json" (the default, `JSONSerializer`) or
"transit" (`TransitSerializer`, Proletarian's payloads, for sharing a queue with Clojure)."""

SERIALIZER_NAMES: tuple[SerializerName, ...] = ("json", "transit")


def check_serializer(serializer: Any) -> Serializer:
    """The serializer to use: None for the default, a name (`SerializerName`), or an object
    with encode() and decode(); anything else is a `ConfigurationError` naming it. The one
    parser of the option for every API, the CLI and the dashboard."""
    if serializer is None or serializer == "json":
        return DEFAULT_SERIALIZER
    if serializer == "transit":
        return TransitSerializer()
    if not isinstance(serializer, Serializer):
        raise ConfigurationError(
            "serializer must be 'json', 'transit' or an object with encode() and decode() "
            f"methods, got {serializer!r}"
        )
    return serializer


def serializer_name(serializer: Serializer) -> str:
    """What a serializer is called: "json", "transit", or its class's name."""
    if isinstance(serializer, JSONSerializer):
        return "json"
    if isinstance(serializer, TransitSerializer):
        return "transit"
    return type(serializer).__name__


def jsonable(value: Any) -> Any:
    """A decoded payload as plain JSON values, to show it (`JobInfo.as_dict`, the CLI, the
    dashboard): keywords as their text (`:welcome`), symbols, characters and URIs as theirs,
    sets and tuples as lists, times in ISO 8601, UUIDs, decimals and ratios as strings, bytes
    in base64, a tagged value as `{"~#tag": rep}`, a map key that JSON has no key for as its
    JSON text; anything else unknown as its `str`."""
    if isinstance(value, str):
        return str(value)  # a Char or a URI as a plain str
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {_json_key(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, TaggedValue):
        return {"~#" + value.tag: jsonable(value.rep)}
    return str(value)  # Keyword, Symbol, UUID, Decimal, Fraction, or another's text


def _json_key(key: Any) -> str | int | float | bool | None:
    """A map key as JSON keeps it: a string, a number, true, false or null as it is, a
    keyword or another scalar as its text, a collection as its JSON text."""
    shown = jsonable(key)
    if shown is None or isinstance(shown, (str, int, float)):
        return shown
    return json.dumps(shown, ensure_ascii=False, sort_keys=True)
