"""Wake idle worker threads: on stop, and on PostgreSQL NOTIFY from `enqueue` (and from
pausing or resuming the queue, which the worker then reads again).

`enqueue` sends `pg_notify('proletarian_di', queue)` in the caller's
transaction, so the notification arrives only when the job is committed. One
listener connection per worker wakes one idle thread per notification;
polling stays the fallback, so a lost notification costs at most one interval.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ._dialects import NOTIFY_CHANNEL
from ._pauses import STATE_CHANNEL


class Wakeup:
    """Idle threads wait here; a wake-up that comes while none waits is kept for the next.

    One idle thread of the worker, the poller, polls every interval; the others sleep until
    woken, so an idle worker queries once per interval, however many threads it has. A
    thread that finds work gives up polling and wakes one more: if it finds work too, it
    wakes another, and the first that finds none polls in turn.
    """

    def __init__(self, capacity: int) -> None:
        self._condition = threading.Condition()
        self._pending = 0
        self._waiting = 0
        self._poller: threading.Thread | None = None
        self.capacity = capacity
        self._closed = False

    def idle(self, seconds: float) -> None:
        """A claim found nothing: the poller waits `seconds` (or until woken) and polls
        again; any other thread sleeps until woken."""
        current = threading.current_thread()
        with self._condition:
            if self._poller is None:
                self._poller = current
            if not self._pending and not self._closed:
                self._waiting += 1
                try:
                    self._condition.wait(seconds if self._poller is current else None)
                finally:
                    self._waiting -= 1
            if self._pending:
                self._pending -= 1

    def busy(self) -> None:
        """A claim found work (before running it): stop polling, and bring in a sleeping
        thread, if any."""
        with self._condition:
            if self._poller is threading.current_thread():
                self._poller = None
            if self._waiting > self._pending:
                self._pending += 1
                self._condition.notify()

    def wake(self, count: int = 1) -> None:
        with self._condition:
            self._pending = min(self._pending + count, self.capacity)
            self._condition.notify(count)

    def close(self) -> None:
        """Wake every thread now and from now on (the worker is stopping)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()


class Listener:
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
    ) -> None:
        self.connect, self.queue, self.wakeup = connect, queue, wakeup
        self.stopping, self.on_error, self.on_state = stopping, on_error, on_state
        self.listening = threading.Event()
        """Set while its connection LISTENs."""
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
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
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}; LISTEN {STATE_CHANNEL}")
            self.listening.set()
            self.on_state()  # what changed while nobody listened is read again
            self.wakeup.wake(self.wakeup.capacity)
            while not self.stopping.is_set():
                for note in conn.notifies(timeout=0.25):
                    if note.payload != self.queue:
                        continue
                    if note.channel == STATE_CHANNEL:
                        self.on_state()
                        self.wakeup.wake(self.wakeup.capacity)
                    else:
                        self.wakeup.wake()
        finally:
            self.listening.clear()
            with contextlib.suppress(Exception):
                conn.close()
