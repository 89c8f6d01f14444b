"""Job id strategies: how ids are made and how each database stores them.

Ids are `uuid.UUID` everywhere in Python. PostgreSQL stores them as `UUID`,
MySQL as `BINARY(16)`. New ids are time-ordered (UUIDv7 layout), which keeps
inserts at the right edge of the primary-key index.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Protocol, runtime_checkable


def uuid7() -> uuid.UUID:
    """A UUIDv7: 48 bits of Unix milliseconds, then 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | rand
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=value)


@runtime_checkable
class JobIdStrategy(Protocol):
    """Makes new job ids and converts them to and from the database's column type."""

    def generate(self) -> uuid.UUID: ...

    def encode(self, job_id: uuid.UUID) -> Any: ...

    def decode(self, value: Any) -> uuid.UUID: ...


class UUIDStrategy:
    """Ids in a native `UUID` column (PostgreSQL)."""

    def generate(self) -> uuid.UUID:
        return uuid7()

    def encode(self, job_id: uuid.UUID) -> Any:
        return job_id

    def decode(self, value: Any) -> uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


class BinaryUUIDStrategy(UUIDStrategy):
    """Ids in a `BINARY(16)` column (MySQL), as Proletarian's mysql-uuid-strategy."""

    def encode(self, job_id: uuid.UUID) -> Any:
        return job_id.bytes

    def decode(self, value: Any) -> uuid.UUID:
        if isinstance(value, uuid.UUID):
            return value
        return uuid.UUID(bytes=bytes(value))
