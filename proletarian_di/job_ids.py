"""Job id strategies: how ids are made and how each database stores them.

Ids are `uuid.UUID` everywhere in Python. PostgreSQL stores them as `UUID`,
MySQL as `BINARY(16)`. New ids are time-ordered (UUIDv7 layout), which keeps
inserts at the right edge of the primary-key index.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Protocol, runtime_checkable

_RANDOM_BITS = 74
_last = (0, 0)
"""The last id's milliseconds and random bits, in this process."""
_lock = threading.Lock()


def uuid7() -> uuid.UUID:
    """A UUIDv7: 48 bits of Unix milliseconds, then 74 random bits. Within a process each id
    is greater than the one before (RFC 9562's monotonic random: in the same millisecond,
    or after the clock stepped back, the last random bits plus one), so that jobs made in
    one millisecond keep their order where ids order them (the newest first, a key's
    right edge)."""
    global _last
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") >> (80 - _RANDOM_BITS)
    with _lock:
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand >> _RANDOM_BITS:  # 2**74 ids in one millisecond: borrow the next one
                ms, rand = ms + 1, 0
        _last = (ms, rand)
    high, low = rand >> 62, rand & ((1 << 62) - 1)
    return uuid.UUID(int=(ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | high << 64 | 0b10 << 62 | low)


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
