"""Payload serializers: JSON by default, Transit JSON for Proletarian (Clojure)'s rows,
any `Serializer` on request."""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, PayloadError
from ._transit import URI, Char, Keyword, Symbol, TaggedValue, TransitSerializer

__all__ = [
    "DEFAULT_SERIALIZER",
    "URI",
    "Char",
    "JSONSerializer",
    "Keyword",
    "Serializer",
    "Symbol",
    "TaggedValue",
    "TransitSerializer",
    "check_serializer",
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


def check_serializer(serializer: Any) -> Serializer:
    """Return the serializer to use, rejecting objects without encode/decode."""
    if serializer is None:
        return DEFAULT_SERIALIZER
    if not isinstance(serializer, Serializer):
        raise ConfigurationError(
            f"serializer must have encode() and decode() methods, got {serializer!r}"
        )
    return serializer
