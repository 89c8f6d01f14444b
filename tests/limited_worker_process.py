"""A worker with `max_running` or `rate_limit` in its own process, for the limits' tests.

Usage: python limited_worker_process.py EVENTS MAX_RUNNING THREADS HOLD [LIMIT PERIOD_MS
LEASE_MS [FAIR]]; the database comes from the environment (see backends.Backend.env). MAX_RUNNING
"-" is none; LIMIT and PERIOD_MS make a `rate_limit` (and the worker polls only every 5
seconds: held back, it must not wait for its next poll); LEASE_MS, lease mode; FAIR
"fair", fair claims. Runs the
default queue until it is empty; each job appends "start <ns>" and "end <ns>" lines to the
file EVENTS, and holds its slot for HOLD seconds in between ("forever": until the process is
killed). Prints how many it ran.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from proletarian_di import RateLimit, create_queue_worker

from backends import backend_from_env


def main(
    events: str,
    max_running: str,
    threads: str,
    hold: str,
    limit: str = "",
    period_ms: str = "",
    lease_ms: str = "0",
    fair: str = "",
) -> None:
    backend = backend_from_env()
    ran = []
    forever = threading.Event()

    def handler(job_type: str, payload: object) -> None:
        note(events, "start")
        if hold == "forever":
            forever.wait()
        time.sleep(float(hold))
        note(events, "end")
        ran.append(payload)

    source = backend.pool(int(threads) + 1)
    worker = create_queue_worker(
        source,
        handler,
        worker_threads=int(threads),
        max_running=None if max_running == "-" else int(max_running),
        rate_limit=RateLimit(int(limit), int(period_ms)) if limit else None,
        lease_ms=int(lease_ms) or None,
        fair=fair == "fair",
        polling_interval_ms=5_000 if limit else 20,
        log=lambda event, data: None,
    )
    with worker:
        while backend.query(f"SELECT COUNT(*) FROM {backend.job_table}")[0][0]:
            time.sleep(0.05)
    source.close()
    print(len(ran), flush=True)


def note(path: str, what: str) -> None:
    """One line, written with a single O_APPEND write, so processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{what} {time.time_ns()}\n".encode())
    finally:
        os.close(fd)


if __name__ == "__main__":
    main(*sys.argv[1:])
