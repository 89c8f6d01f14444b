"""Wake idle worker threads: on stop, and on PostgreSQL NOTIFY from `enqueue` (and from
pausing or resuming the queue, which the worker then reads again).

`enqueue` sends `pg_notify('proletarian_di', queue)` in the caller's transaction, so the
notification arrives only when the job is committed; a job due later says when
(`queue@epoch`), a job whose priority is not 0 says which (`queue#10`, `queue@epoch#10`).
One listener connection per worker wakes one idle thread per notification; the thread that
wakes for a job claims from the frontier of the job's priority, if that lies behind the
worker's frontier (see `_frontier`).
While it listens, an idle worker sleeps until the next time it knows a job falls due, or
the fallback polling interval (5 s by default), which bounds a lost notification; without a
listener (MySQL, or while it reconnects) it polls every polling interval.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from .._store.dependencies import GRAPH_CHANNEL
from .._store.dialects import NOTIFY_CHANNEL, read_wake_payload
from .frontier import Frontier
from .pauses import STATE_CHANNEL

WAKE_LATE_S = 0.005
"""How long after a known due time the poller claims: a timed wait may end early, and the
wall clock may step back a little."""
MAX_KNOWN_TIMES = 1_000
"""The most due times of future jobs an idle worker remembers (the earliest are kept)."""


class Wakeup:
    """Idle threads wait here; a wake-up that comes while none waits is kept for the next.

    One idle thread of the worker, the poller, polls every interval; the others sleep until
    woken, so an idle worker queries once per interval, however many threads it has. A
    thread that finds work gives up polling and wakes one more: if it finds work too, it
    wakes another, and the first that finds none polls in turn.
    """

    def __init__(self, capacity: int, frontier: Frontier | None = None) -> None:
        self._condition = threading.Condition()
        self._pending = 0
        self._waiting = 0
        self._poller: threading.Thread | None = None
        self.capacity = capacity
        self.frontier = frontier
        self._closed = False
        self._due: list[tuple[float, int, int | None]] = []
        """Known jobs that fall due later: (monotonic time, sequence, priority), a heap."""
        self._sequence = itertools.count()
        self._priority: int | None = None
        """The highest priority of the jobs woken for and not yet looked for, handed to the
        next thread that wakes (see `Frontier.woken`)."""

    def idle(self, seconds: float, fallback: float | None = None) -> None:
        """A claim found nothing: the poller waits `seconds` (or until woken) and polls
        again; any other thread sleeps until woken. With `fallback` (a listener is up), the
        poller waits until the next known due time, at most `fallback` seconds."""
        current = threading.current_thread()
        with self._condition:
            if self._poller is None:
                self._poller = current
            self._waiting += 1
            try:
                while not self._pending and not self._closed:
                    polls = self._poller is current
                    timeout = self._poll_in(seconds, fallback) if polls else None
                    if timeout is not None and timeout <= 0:
                        break
                    if not self._condition.wait(timeout) and polls:
                        self._passed(time.monotonic())
                        break
            finally:
                self._waiting -= 1
            if self._pending:
                self._pending -= 1
            if self._priority is not None:
                if self.frontier is not None:
                    self.frontier.woken(self._priority)
                self._priority = None

    def _wanted(self, priority: int | None) -> None:
        """A job of `priority` is to be looked for by the next thread that wakes."""
        if priority is not None and (self._priority is None or priority > self._priority):
            self._priority = priority

    def _poll_in(self, seconds: float, fallback: float | None) -> float:
        """How long the poller waits before its next claim (0: claim now): until the next
        known due time (a job this worker snoozed or retried, or one a listener heard of),
        at most the polling interval, or `fallback` with a listener up."""
        now = time.monotonic()
        if self._passed(now):
            return 0.0
        wait = seconds if fallback is None else fallback
        return min(wait, self._due[0][0] - now) if self._due else wait

    def _passed(self, now: float) -> bool:
        """Forget the due times that have come (the claim about to run looks for their
        jobs, from their priorities); whether there were any."""
        passed = False
        while self._due and self._due[0][0] <= now:
            self._wanted(heapq.heappop(self._due)[2])
            passed = True
        return passed

    def due_at(self, epoch: float, priority: int | None = None) -> None:
        """A job (of `priority`, if known) falls due at `epoch` (wall-clock seconds): the
        poller wakes then (a little after, so that its claim, by the wall clock, finds the
        job due), and claims from that priority on (see `Frontier.woken`)."""
        at = time.monotonic() + (epoch - time.time()) + WAKE_LATE_S
        with self._condition:
            if len(self._due) >= MAX_KNOWN_TIMES:
                latest = max(self._due)
                if at >= latest[0]:
                    return
                self._due.remove(latest)
                heapq.heapify(self._due)
            entry = (at, next(self._sequence), priority)
            heapq.heappush(self._due, entry)
            if self._due[0] is entry:
                self._condition.notify_all()  # the poller waits less; the others sleep on

    def busy(self) -> None:
        """A claim found work (before running it): stop polling, and bring in a sleeping
        thread, if any."""
        with self._condition:
            if self._poller is threading.current_thread():
                self._poller = None
            if self._waiting > self._pending:
                self._pending += 1
                self._condition.notify()

    def wake(self, count: int = 1, priority: int | None = None) -> None:
        """Wake `count` idle threads, now or as they go idle; the first to wake looks for a
        job of `priority`, if given (see `Frontier.woken`)."""
        with self._condition:
            self._pending = min(self._pending + count, self.capacity)
            self._wanted(priority)
            self._condition.notify(count)

    def close(self) -> None:
        """Wake every thread now and from now on (the worker is stopping)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()


class Listener(threading.Thread):
    """A thread that LISTENs on one connection and wakes the worker for its queue."""

    def __init__(
        self,
        connect: Callable[[], Any],
        queue: str,
        wakeup: Wakeup,
        stopping: threading.Event,
        on_error: Callable[[BaseException], None],
        name: str,
        on_state: Callable[[], None] = lambda: None,
        on_listen: Callable[[Any], None] = lambda conn: None,
        on_graph: Callable[[], None] = lambda: None,
    ) -> None:
        self.connect, self.queue, self.wakeup = connect, queue, wakeup
        self.stopping, self.on_error, self.on_state = stopping, on_error, on_state
        self.on_listen = on_listen
        """Called with the connection once it listens (the worker reads when the next job
        falls due)."""
        self.on_graph = on_graph
        """Called when a job was blocked (`GRAPH_CHANNEL`)."""
        self.listening = threading.Event()
        """Set while its connection LISTENs."""
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        delay = 0.1
        while not self.stopping.is_set():
            try:
                self._listen()
                delay = 0.1
            except BaseException as exc:
                if self.stopping.is_set():
                    break
                self.on_error(exc)
                if not isinstance(exc, Exception):
                    break  # the listener ends (logged); polling goes on
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)

    def _listen(self) -> None:
        conn = self.connect()
        try:
            conn.autocommit = True
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}; LISTEN {STATE_CHANNEL}; LISTEN {GRAPH_CHANNEL}")
            self.on_listen(conn)
            self.listening.set()
            self.on_state()  # what changed while nobody listened is read again
            self.wakeup.wake(self.wakeup.capacity)
            while not self.stopping.is_set():
                for note in conn.notifies(timeout=0.25):
                    if note.channel == GRAPH_CHANNEL:
                        self.on_graph()
                        continue
                    if note.channel == STATE_CHANNEL:
                        if note.payload == self.queue:
                            self.on_state()
                            self.wakeup.wake(self.wakeup.capacity)
                        continue
                    wake = read_wake_payload(note.payload, self.queue)
                    if wake is None:
                        continue
                    if wake.due is None:
                        self.wakeup.wake(priority=wake.priority)
                    else:
                        self.wakeup.due_at(wake.due, wake.priority)
        finally:
            self.listening.clear()
            with contextlib.suppress(Exception):
                conn.close()
