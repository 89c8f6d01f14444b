"""Where a worker's claims begin in the claim index, `(queue, -priority, process_at)`.

Archived jobs leave dead index entries behind them, at the head of the index, until the
database cleans them up; while any transaction pins the horizon (a report, a backup, a
long job) it cannot, and a claim that starts at the beginning walks over all of them.
So a worker's claims start at its frontier, the position `(-priority, process_at)` of the
last job it claimed, and skip the dead. Jobs can still fall due behind it (enqueued with a
higher priority, by a host whose clock is behind, committed late, released by a crashed
worker): once per polling interval one claim of the worker sweeps from the beginning, and
a thread that finds a job there walks on from it until it is back at the frontier.

A sweep walks over the dead too, so its cost grows while the horizon is held: one sweep
runs at a time, and sweeps are kept to a tenth of the worker's time (a sweep that took
40 ms puts the next one 400 ms later, where the polling interval is shorter). On a table
that vacuum keeps clean a sweep takes well under a millisecond, and the polling interval
rules.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


class Walker(Protocol):
    """A worker thread's own place, while it walks jobs found behind the frontier."""

    behind: Any


SWEEP_SHARE = 0.1
"""The most of its time a worker spends sweeping: the next sweep waits 1 / SWEEP_SHARE times
as long as the last one took, if that is longer than the polling interval."""


class Frontier:
    """The shared frontier of one worker's threads, and when the next sweep is due."""

    def __init__(self, sweep_every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.sweep_every_s = sweep_every_s
        self.clock = clock
        self.head: Any = None
        self._next_sweep = 0.0
        self._sweep: tuple[Walker | None, float] | None = None
        self._lock = threading.Lock()

    def start(self, walker: Walker | None) -> Any:
        """Where the next claim begins: the walker's place, else the frontier; None (from
        the beginning) when a sweep is due or nothing was claimed yet."""
        now = self.clock()
        if self._sweep_due(now):
            with self._lock:
                if self._sweep_due(now):
                    self._next_sweep = now + self.sweep_every_s
                    self._sweep = (walker, now)
                    return None
        if self._sweep is not None and self._sweep[0] is walker:
            with self._lock:
                self._sweep = None  # that sweep failed; its cost is unknown
        if walker is not None and walker.behind is not None:
            return walker.behind
        return self.head

    def _sweep_due(self, now: float) -> bool:
        """Nothing claimed yet, no sweep interval, or its time has come and none runs."""
        return (
            self.head is None
            or not self.sweep_every_s
            or (now >= self._next_sweep and self._sweep is None)
        )

    def claimed(self, walker: Walker | None, position: Any) -> None:
        """A claim took jobs up to `position` (raw column values): the frontier moves up to
        it, or the walker stays there, behind the frontier, to claim what follows."""
        with self._lock:
            self._swept(walker)
            behind = None
            if self.head is None or position > self.head:
                self.head = position
            elif position < self.head:
                behind = position
        if walker is not None:
            walker.behind = behind

    def missed(self, walker: Walker | None) -> None:
        """A claim found nothing: a walker is back at the frontier."""
        with self._lock:
            self._swept(walker)
        if walker is not None:
            walker.behind = None

    def _swept(self, walker: Walker | None) -> None:
        """If `walker` was sweeping, hold the next sweep back by what this one cost."""
        if self._sweep is None or self._sweep[0] is not walker or not self.sweep_every_s:
            return
        started = self._sweep[1]
        self._sweep = None
        cost = self.clock() - started
        self._next_sweep = max(self._next_sweep, started + cost / SWEEP_SHARE)
