"""A worker in its own process whose handler can block, kill its process or exit, for the
lease and crash-loop tests.

Usage: python long_job_process.py EVENTS BEHAVIOUR [--lease-ms N] [--max-crashes K]
[--retries R] [--batch-size B] [--only PAYLOAD] [--advanced] [--job-timeout-ms T]
[--max-running M] [--rate-per-s N] [--fair] [--threads N]; the database comes from the environment
(see backends.Backend.env). Runs the default queue until it is empty. Each job appends
"start <payload>" to the file EVENTS, then: "block" waits forever, "kill" sends SIGKILL to
its own process, "exit" ends it with os._exit(3), "ok" returns (with --only, jobs with
another payload return too). Without --lease-ms the worker runs in the held-transaction mode.
Prints how many jobs it ran to the end; reports worker errors on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from proletarian_di import RateLimit, create_queue_worker

from backends import Backend, backend_from_env

ERRORS = {"worker_thread_died", "polling_error", "heartbeat_error", "attempt_not_recorded"}


def start(backend: Backend, events: Path, behaviour: str, *options: str) -> subprocess.Popen[str]:
    """Start this script on the backend's database (for the tests)."""
    return subprocess.Popen(
        [sys.executable, __file__, str(events), behaviour, *options],
        env=backend.env(),
        cwd=Path(__file__).parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("behaviour", choices=["block", "kill", "exit", "ok"])
    parser.add_argument("--lease-ms", type=int, default=None)
    parser.add_argument("--max-crashes", type=int, default=None)
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--only", default=None)
    parser.add_argument("--advanced", action="store_true")
    parser.add_argument("--job-timeout-ms", type=int, default=None)
    parser.add_argument("--max-running", type=int, default=None)
    parser.add_argument("--rate-per-s", type=int, default=None)
    parser.add_argument("--fair", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    backend = backend_from_env()
    ran: list[Any] = []
    forever = threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        note(args.events, f"start {payload}")
        if args.only is not None and payload != args.only:
            pass
        elif args.behaviour == "block":
            forever.wait()
        elif args.behaviour == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif args.behaviour == "exit":
            os._exit(3)
        ran.append(payload)

    def advanced(job: Any) -> None:
        handler(job.job_type, job.payload)

    def log(event: str, data: dict[str, Any]) -> None:
        if event in ERRORS:
            print(event, data, file=sys.stderr, flush=True)

    source = backend.pool(4)
    worker = create_queue_worker(
        source,
        advanced if args.advanced else handler,
        handler_fn_mode="advanced" if args.advanced else "default",
        job_timeout_ms=args.job_timeout_ms,
        max_running=args.max_running,
        rate_limit=None if args.rate_per_s is None else RateLimit(args.rate_per_s, 1000),
        fair=args.fair,
        worker_threads=args.threads,
        polling_interval_ms=20,
        fallback_polling_interval_ms=50,
        lease_ms=args.lease_ms,
        max_crashes=args.max_crashes,
        batch_size=args.batch_size,
        retry_strategy_fn=lambda job, exc: {"retries": args.retries},
        log=log,
    )
    with worker:
        while backend.query(f"SELECT COUNT(*) FROM {backend.job_table}")[0][0]:
            time.sleep(0.05)
    source.close()
    print(len(ran), flush=True)


def starts(events: Path) -> list[str]:
    """The "start <payload>" lines the worker processes wrote to EVENTS."""
    if not events.exists():
        return []
    return [line for line in events.read_text().splitlines() if line.startswith("start")]


def note(path: str, line: str) -> None:
    """One line, written with a single O_APPEND write, so processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
