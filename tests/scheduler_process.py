"""A scheduler in its own process, for the exactly-once test across processes.

Usage: python scheduler_process.py START MINUTES; the database comes from the environment
(see backends.Backend.env). Steps a fake clock from START one minute at a time, running
the scheduler's pending ticks at each step, and prints each tick this process enqueued.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta

from proletarian_di import PeriodicJob, create_scheduler
from proletarian_di.testing import FakeClock

from backends import backend_from_env


def main(start: str, minutes: str) -> None:
    backend = backend_from_env()
    begin = datetime.fromisoformat(start)
    clock = FakeClock(begin)
    jobs = [PeriodicJob("every-minute", "* * * * *", "tick", payload=None)]
    source = backend.pool(1)
    try:
        scheduler = create_scheduler(source, jobs, clock=clock, serializer=TickPayload(clock))
        scheduler.register()
        for minute in range(1, int(minutes) + 1):
            clock.now = begin + timedelta(minutes=minute, seconds=1)
            for tick in scheduler.run_pending():
                if tick.job_id is not None:
                    print(tick.tick.isoformat(), flush=True)
    finally:
        source.close()


class TickPayload:
    """Writes the tick (the clock's minute) into each payload, so the test can match them."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def encode(self, payload: object) -> str:
        minute = self.clock.now.replace(second=0, microsecond=0)
        return json.dumps({"tick": minute.isoformat()})

    def decode(self, text: str) -> object:
        return text


if __name__ == "__main__":
    main(*sys.argv[1:])
