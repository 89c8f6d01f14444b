"""Rate limits (`rate_limit=RateLimit(limit, period_ms, by=...)`): at most `limit` job starts
of a queue (or of each of its group keys) in any window of `period_ms`, over every process
and thread.

A limited queue (or group key: a bucket) has `limit` slots, rows of
`<job table>_rate_slots`. A start takes a slot whose last start is at least a period old
(`SELECT … FOR UPDATE SKIP LOCKED`) and stamps it with the database's clock, in the claim's
own transaction, right after the claim. So:

- two starts on one slot are a period apart or more, and `limit` slots make at most `limit`
  starts in any window of a period, whatever the number of workers;
- a claim that rolls back (a process that dies in held mode, a handler that ends its own
  transaction, a claim that finds nothing) gives its slot back with it;
- in held mode a slot stays locked while its job runs, so a limited queue also runs at most
  `limit` jobs at once.

A worker that finds every slot's last start (as committed) less than a period old sleeps
until the oldest one is a period old, not polling meanwhile (`RateGate.wait_s`): no slot
can be free before. A slot that is free but held by a claim in flight (or, in held mode, a
running job) only makes the thread that met it wait as an idle thread does, until woken or
its next poll: that claim may roll back.

Limited by group key (`by="group_key"`, which implies `fair=True`), a group without a free
slot is passed over; once a turn has met one, its next scans read each group's slots beside
its jobs (`Dialect.fair_claim`), so they pass over every held group, however many: the claim
goes on to the next group key with a free slot. When no due group has one, the threads go
idle as when no job is due (a new job wakes them, or their next poll), and the worker also
wakes when the first slot of the queue's groups is a period old. A group's slots are written
the first time the worker meets it, on a connection of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from .._store.dialects import Dialect, GroupSlots, is_transient
from .._store.tables import UPGRADE_HINT
from ..errors import ConfigurationError, SchemaError

MAX_RATE_LIMIT = 10_000
"""The most starts a period a limit may allow: one row each."""

PRUNE_MOST = 1_000
"""The most group keys whose idle slots one prune deletes (a worker prunes once a minute)."""

ENSURE_TRIES = 5
"""Tries of writing a queue's slots at a worker's start (workers started at once may
deadlock on MySQL: each try but the last that fails so is rolled back and made again)."""


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """At most `limit` job starts of the worker's queue (`by="queue"`), or of each of its
    group keys (`by="group_key"`, which implies `fair=True`), in any window of `period_ms`
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
        if self.by not in ("queue", "group_key"):
            raise ConfigurationError(
                f"RateLimit's by must be 'queue' or 'group_key', got {self.by!r}"
            )


def prune_slots(conn: Any, dialect: Dialect, most: int = PRUNE_MOST) -> int:
    """Delete the slots of the group keys idle for longer than their period, at most `most`
    keys (the caller commits); how many rows went. A deadlock with the claims (MySQL) is
    rolled back: the next prune deletes them."""
    try:
        return dialect.prune_rate_slots(conn, most)
    except Exception as exc:
        if not is_transient(exc):
            raise
        dialect.rollback(conn)
        return 0


def check_rate_limit(value: Any) -> RateLimit | None:
    """`rate_limit`: None or a `RateLimit`."""
    if value is not None and not isinstance(value, RateLimit):
        raise ConfigurationError(f"rate_limit must be a RateLimit(limit, period_ms), got {value!r}")
    return value


BUCKET_LENGTH = 255
"""The longest bucket name (MySQL's VARCHAR(255))."""


def bucket_of(queue: str, group_key: str | None) -> str:
    """The slots' name of a queue, or of one group key of it: `queue`, or `queue`, a unit
    separator and the key (a digest of the key where that would be too long)."""
    if group_key is None:
        return queue
    bucket = f"{queue}\x1f{group_key}"
    if len(bucket) <= BUCKET_LENGTH:
        return bucket
    digest = hashlib.blake2s(group_key.encode(), digest_size=16).hexdigest()
    return f"{queue[: BUCKET_LENGTH - 34]}\x1f#{digest}"


class RateGate:
    """One worker's side of its queue's rate limit: it makes sure the slots exist, takes one
    for each claim, and knows how long its threads should sleep when none was free (by
    group key: when to wake them, the first held group's slot free again)."""

    def __init__(self, rate: RateLimit, queue: str, polling_interval_s: float) -> None:
        self.rate, self.queue = rate, queue
        self.by_group = rate.by == "group_key"
        self.polling_interval_s = polling_interval_s
        self._lock = threading.Lock()
        self._held_back_until = 0.0
        """When (`time.monotonic()`) a slot is expected to be free again."""
        prefix = bucket_of(queue, "")
        self.group_slots = GroupSlots(
            prefix, BUCKET_LENGTH - len(prefix), rate.limit, rate.period_ms
        )
        """By group key: what a fair claim passes over the groups without a free slot with."""
        self.free_at: Callable[[float], None] = lambda epoch: None
        """By group key: where the worker learns when (wall-clock seconds) a slot of a held
        group is free again, to wake then."""
        self._ensured: set[str] = set()
        self.connect: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
        """A connection beside the claim's, where a new group's slots are written."""
        self.dialect_of: Callable[[Any], Dialect] | None = None

    def ensure(self, conn: Any, dialect: Dialect) -> None:
        """Check the slots' table, and write the queue's slots (and this limit's period) if
        they are not there, dropping slots past the limit, on `conn` (the caller commits);
        by group key, each group's are written when it is first met."""
        table = dialect.rate_table
        if not dialect.table_columns(conn, table):
            raise SchemaError(
                f"rate_limit needs the {table} table (schema step rate_limits): {UPGRADE_HINT}"
            )
        if not self.by_group:
            for attempt in range(ENSURE_TRIES):
                try:
                    self._write_slots(conn, dialect, self.queue)
                    return
                except Exception as exc:  # workers started at once may deadlock (MySQL)
                    if attempt + 1 == ENSURE_TRIES or not is_transient(exc):
                        raise
                    dialect.rollback(conn)
                    time.sleep(random.uniform(0.01, 0.1) * (attempt + 1))

    def _write_slots(self, conn: Any, dialect: Dialect, bucket: str) -> None:
        dialect.ensure_rate_slots(conn, bucket, self.rate.limit, self.rate.period_ms)
        self._ensured.add(bucket)

    def take(self, conn: Any, dialect: Dialect, group_key: str | None = None) -> bool:
        """Take a free slot for a job just claimed (of `group_key`, limited by group), in
        the claim's transaction; False (and the time to wait noted) if none is free."""
        rate = self.rate
        bucket = bucket_of(self.queue, group_key if self.by_group else None)
        if bucket not in self._ensured:
            self._ensure_elsewhere(bucket)
        if dialect.take_rate_slot(conn, bucket, rate.limit, rate.period_ms):
            return True
        if self.by_group:
            if not dialect.rate_slots_short(conn, bucket, rate.limit):
                return False  # another claim took the free slot: on to the next group
            self._ensure_elsewhere(bucket)  # pruned since this worker wrote them
            return dialect.take_rate_slot(conn, bucket, rate.limit, rate.period_ms)
        free_in = dialect.next_rate_slot_s(conn, bucket, rate.limit, rate.period_ms)
        if free_in is None:
            return False  # a slot is free but held by a claim in flight: no wait for all
        with self._lock:
            self._held_back_until = time.monotonic() + free_in
        return False

    def _ensure_elsewhere(self, bucket: str) -> None:
        """Write a group's slots on a connection of their own, committed at once: two
        claims meeting a new group never wait on each other's transaction."""
        if self.connect is None or self.dialect_of is None:
            raise RuntimeError("a rate limit by group key needs a connection for its slots")
        with self.connect() as conn:
            self._write_slots(conn, self.dialect_of(conn), bucket)
            conn.commit()

    def prune(self, conn: Any, dialect: Dialect) -> int:
        """By group key: `prune_slots`, run by the worker's registry beat."""
        return prune_slots(conn, dialect)

    def all_held(self, conn: Any, dialect: Dialect) -> None:
        """By group key: a fair claim found no due job of a group with a free slot; the
        worker wakes when the first slot of the queue's groups is free again (if any is
        taken), besides its usual wake-ups: a new group may come any time."""
        free_in = dialect.next_group_slot_s(conn, self.group_slots)
        if free_in is not None:
            self.free_at(time.time() + free_in)

    def wait_s(self) -> float:
        """How long a thread should sleep before it claims again (0: claim now)."""
        with self._lock:
            return max(0.0, self._held_back_until - time.monotonic())
