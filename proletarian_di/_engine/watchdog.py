"""Job timeouts: a thread that gives up on jobs running past their deadline.

A sync handler cannot be stopped from outside, so the worker gives up on it: its attempt is
recorded as timed out (in the held-transaction mode, in the job's own transaction, which
still holds its row; in lease mode, under its lease), another thread takes its place, and
whatever the handler does after is discarded. The handler itself keeps running until it
returns. An advanced handler in the held-transaction mode shares the job's transaction, so
the job stays with it: its statement is cancelled, and when it returns its writes are rolled
back and the attempt is recorded as timed out. An async handler is cancelled at its deadline
by its own thread, and reaches here only if it does not end when cancelled. See
`QueueWorker._time_out`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from .slot import Slot

CHECK_EVERY_S = 0.05
"""How often the watchdog looks at the running jobs' deadlines (no database involved)."""

Overdue = Callable[[Slot, float], None]
"""Called with each slot and the monotonic time now: gives up on its job if it is overdue."""


class Watchdog(threading.Thread):
    """Looks at every slot's deadline every `CHECK_EVERY_S` until `done` is set."""

    def __init__(
        self,
        slots: Callable[[], Iterable[Slot]],
        check: Overdue,
        done: threading.Event,
        name: str,
    ) -> None:
        self.slots, self.check, self.done = slots, check, done
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        while not self.done.wait(CHECK_EVERY_S):
            now = time.monotonic()
            for slot in self.slots():
                self.check(slot, now)
