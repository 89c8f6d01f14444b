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
import sys
import time
from pathlib import Path
from typing import Any

from long_job_process import note

from proletarian_di import create_queue_worker

from backends import backend_from_env
from netlab import Host

EVENTS = {"polling_error", "worker_thread_died", "lease_lost", "attempt_not_recorded"}


def start(host: Host, kind: str, url: str, events: Path, release: Path, *options: str) -> None:
    """Start this script on `host` against the database at `url` (`kind`: "postgresql" or
    "mysql"), and wait until its job "cut" has started and the claim's reply has been
    acknowledged: the connection is then idle, as mid-job."""
    host.popen(
        [sys.executable, __file__, str(events), str(release), *options],
        env={**os.environ, "TEST_BACKEND": kind, "TEST_DATABASE_URL": url},
        cwd=Path(__file__).parent,
    )
    deadline = time.monotonic() + 60
    while not (events.exists() and "start cut" in events.read_text()):
        if time.monotonic() > deadline:
            raise RuntimeError("the cut-off worker did not start its job within 60 s")
        time.sleep(0.05)
    time.sleep(0.5)


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
