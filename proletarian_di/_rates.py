"""Rate limits (`rate_limit=RateLimit(limit, period_ms)`): at most `limit` job starts of a
queue in any window of `period_ms`, over every process and thread.

A limited queue has `limit` slots, rows of `<job table>_rate_slots`. A start takes a slot
whose last start is at least a period old (`SELECT … FOR UPDATE SKIP LOCKED`) and stamps it
with the database's clock, in the claim's own transaction, right after the claim. So:

- two starts on one slot are a period apart or more, and `limit` slots make at most `limit`
  starts in any window of a period, whatever the number of workers;
- a claim that rolls back (a process that dies in held mode, a handler that ends its own
  transaction, a claim that finds nothing) gives its slot back with it;
- in held mode a slot stays locked while its job runs, so a limited queue also runs at most
  `limit` jobs at once.

A worker that finds every slot taken sleeps until the oldest one is a period old, not
polling meanwhile (`RateGate.wait_s`); when every slot is held by a claim or a running job
(held mode), whose start is not known yet, it looks again after the shorter of its polling
interval and a period divided by the limit.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Literal

from ._dialects import Dialect
from .errors import ConfigurationError, SchemaError

MAX_RATE_LIMIT = 10_000
"""The most starts a period a limit may allow: one row each."""


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """At most `limit` job starts of the worker's queue in any window of `period_ms`
    milliseconds, over every process and thread (`create_queue_worker(rate_limit=...)`).
    A start is counted when its job is claimed, by the database's clock, in the claim's
    transaction: a claim rolled back does not count."""

    limit: int
    period_ms: int
    by: Literal["queue", "group_key"] = "queue"

    def __post_init__(self) -> None:
        for name, value, most in (
            ("limit", self.limit, MAX_RATE_LIMIT),
            ("period_ms", self.period_ms, 366 * 86_400_000),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ConfigurationError(
                    f"RateLimit's {name} must be an int from 1 to {most:,}, got {value!r}"
                )
        if self.by != "queue":
            raise ConfigurationError(
                f"RateLimit's by must be 'queue', got {self.by!r} (limits per group key are "
                "not built yet)"
            )


def check_rate_limit(value: Any) -> RateLimit | None:
    """`rate_limit`: None or a `RateLimit`."""
    if value is not None and not isinstance(value, RateLimit):
        raise ConfigurationError(f"rate_limit must be a RateLimit(limit, period_ms), got {value!r}")
    return value


class RateGate:
    """One worker's side of its queue's rate limit: it makes sure the slots exist, takes one
    for each claim, and knows how long its threads should sleep when none was free."""

    def __init__(self, rate: RateLimit, queue: str, polling_interval_s: float) -> None:
        self.rate, self.bucket = rate, queue
        self.polling_interval_s = polling_interval_s
        self._lock = threading.Lock()
        self._held_back_until = 0.0
        """When (`time.monotonic()`) a slot is expected to be free again."""

    def ensure(self, conn: Any, dialect: Dialect) -> None:
        """Write the queue's slots (and this limit's period) if they are not there, and
        drop slots past the limit, on `conn` (the caller commits)."""
        table = dialect.rate_table
        if not dialect.table_columns(conn, table):
            from .schema import UPGRADE_HINT

            raise SchemaError(
                f"rate_limit needs the {table} table (schema step rate_limits): {UPGRADE_HINT}"
            )
        dialect.ensure_rate_slots(conn, self.bucket, self.rate.limit, self.rate.period_ms)

    def take(self, conn: Any, dialect: Dialect) -> bool:
        """Take a free slot for a job just claimed, in the claim's transaction; False (and
        the time to wait noted) if none is free."""
        rate = self.rate
        if dialect.take_rate_slot(conn, self.bucket, rate.limit, rate.period_ms):
            return True
        free_in = dialect.next_rate_slot_s(conn, self.bucket, rate.limit, rate.period_ms)
        if free_in is None:  # every slot in use: look again in a share of the period
            free_in = min(self.polling_interval_s, rate.period_ms / 1000 / rate.limit)
        with self._lock:
            self._held_back_until = time.monotonic() + max(free_in, 0.001)
        return False

    def wait_s(self) -> float:
        """How long a thread should sleep before it claims again (0: claim now)."""
        with self._lock:
            return max(0.0, self._held_back_until - time.monotonic())
