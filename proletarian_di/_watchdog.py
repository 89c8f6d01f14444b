"""Job timeouts: a thread that abandons jobs running past their deadline.

A sync handler cannot be stopped from outside, so the worker gives up on it: its attempt
is recorded as timed out on a connection of its own (in the held-transaction mode, after
the job's connection is cut, which rolls its transaction back and frees its row lock),
another thread takes its place, and whatever the handler does after is discarded. An
async handler is cancelled at its deadline by its own thread, and reaches here only if it
does not end when cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ._runner import Slot
from .jobs import Job

CHECK_EVERY_S = 0.05
"""How often the watchdog looks at the running jobs' deadlines (no database involved)."""

Overdue = Callable[[Slot, Job, Any, "str | None", float], None]
"""Called with the slot, its job, the job's raw id, its lease and how long it ran (s)."""


class Watchdog(threading.Thread):
    """Looks at every slot's deadline every `CHECK_EVERY_S` until `done` is set."""

    def __init__(
        self,
        slots: Callable[[], Iterable[Slot]],
        on_overdue: Overdue,
        done: threading.Event,
        name: str,
    ) -> None:
        self.slots, self.on_overdue, self.done = slots, on_overdue, done
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        while not self.done.wait(CHECK_EVERY_S):
            now = time.monotonic()
            for slot in self.slots():
                taken = slot.take_overdue(now)
                if taken is not None:
                    try:
                        self.on_overdue(slot, *taken)
                    finally:
                        slot.handed_over.set()
