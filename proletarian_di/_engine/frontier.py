"""Where a worker's claims begin in the claim index, `(queue, -priority, process_at)` (on
MySQL followed by the job id, which orders jobs tied at one process_at).

Archived jobs leave dead index entries behind them, at the head of the index, until the
database cleans them up; while any transaction pins the horizon (a report, a backup, a
long job) it cannot, and a claim that starts at the beginning walks over all of them.
So a worker's claims start at its frontier, the position `(-priority, process_at)` of the
last job it claimed, and skip the dead. Jobs can still fall due behind it (enqueued with a
higher priority, by a host whose clock is behind, committed late, released by a crashed
worker): once per polling interval one claim of the worker sweeps from the beginning, and
a thread that finds a job there walks on from it until it is back at the frontier.

An idle thread woken for one job (a PostgreSQL notification, or a due time it knew of)
must find it at once, whatever its priority: the wake-up says the job's priority, and if
that priority lies behind the frontier the thread's next claim starts at that priority's
own frontier (the last job of that priority the worker claimed; else the earliest
process_at it claimed) and walks on from the job it finds. Busy threads are not woken, and
keep to the sweeps.

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


MAX_LEVELS = 64
"""The most priorities whose own frontier a worker remembers (others start at the earliest
process_at it claimed)."""

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
        self._levels: dict[int, Any] = {}
        """Each priority's own frontier: the last position claimed with that -priority."""
        self._earliest: Any = None
        """The earliest process_at claimed (raw), where a priority not seen yet begins."""
        self._woken: dict[int, int] = {}
        """By thread: the priority of the job it was woken for, until its next claim."""
        self._lock = threading.Lock()

    def woken(self, priority: int) -> None:
        """The calling thread was woken for a job of `priority`: its next claim starts at
        that priority's own frontier if that is behind where it would start."""
        self._woken[threading.get_ident()] = priority

    def start(self, walker: Walker | None) -> Any:
        """Where the next claim begins: the walker's place, else the frontier, or, if that is
        behind, the frontier of the priority the thread was woken for; None (from the
        beginning) when a sweep is due or nothing was claimed yet."""
        priority = self._woken.pop(threading.get_ident(), None) if self._woken else None
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
        place = self.head if walker is None or walker.behind is None else walker.behind
        if priority is not None:
            level = self._levels.get(-priority, (-priority, self._earliest))
            if level < place:
                return level
        return place

    def _sweep_due(self, now: float) -> bool:
        """Nothing claimed yet, no sweep interval, or its time has come and none runs."""
        return (
            self.head is None
            or not self.sweep_every_s
            or (now >= self._next_sweep and self._sweep is None)
        )

    def claimed(self, walker: Walker | None, position: Any) -> None:
        """A claim took jobs up to `position` (raw column values): the frontier moves up to
        it, or the walker stays there, behind the frontier, to claim what follows; so does
        the frontier of the position's priority."""
        rank, process_at = position[0], position[1]
        levels = self._levels
        with self._lock:
            self._swept(walker)
            behind = None
            if self.head is None or position > self.head:
                self.head = position  # the newest claimed of its priority too
                if rank in levels or len(levels) < MAX_LEVELS:
                    levels[rank] = position
            else:
                if position < self.head:
                    behind = position
                level = levels.get(rank)
                if level is None:
                    if len(levels) < MAX_LEVELS:
                        levels[rank] = position
                elif level < position:
                    levels[rank] = position
            if self._earliest is None or process_at < self._earliest:
                self._earliest = process_at
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
