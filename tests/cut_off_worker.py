"""A worker on a host of the network lab (`netlab`), for the tests of a host cut off mid-job.

Usage: python cut_off_worker.py EVENTS RELEASE [--keepalive-timeout-ms N] [--lease-ms N];
the database comes from the environment (see backends.Backend.env). One thread, polling
every 50 ms. Each job appends "start <payload>" to EVENTS, waits until the file RELEASE
exists, appends "end <payload>" and succeeds. The worker's errors and lost leases are
appended as "event <name>". Runs until it is killed.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from long_job_process import note

from proletarian_di import create_queue_worker

from backends import backend_from_env

EVENTS = {"polling_error", "worker_thread_died", "lease_lost", "attempt_not_recorded"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("release")
    parser.add_argument("--keepalive-timeout-ms", default="0")
    parser.add_argument("--lease-ms", type=int, default=None)
    args = parser.parse_args()
    keepalive = int(args.keepalive_timeout_ms)

    def handler(job_type: str, payload: Any) -> None:
        note(args.events, f"start {payload}")
        while not os.path.exists(args.release):
            time.sleep(0.05)
        note(args.events, f"end {payload}")

    def log(event: str, data: dict[str, Any]) -> None:
        if event in EVENTS:
            note(args.events, f"event {event}")

    worker = create_queue_worker(
        backend_from_env().pool(2),
        handler,
        polling_interval_ms=50,
        keepalive_timeout_ms=keepalive,
        lease_ms=args.lease_ms,
        log=log,
    )
    with worker:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
