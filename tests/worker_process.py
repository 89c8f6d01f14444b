"""A worker in its own process, for the multi-process, SIGKILL and signal tests.

Usage: python worker_process.py MODE [ARG]; the database comes from the
environment (see backends.Backend.env). Every handler run is recorded in
proletarian.runs through its own autocommitted connection, so runs that are
rolled back still count.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from proletarian_di import create_queue_worker

from backends import backend_from_env


def main(mode: str, arg: str = "") -> None:
    backend = backend_from_env()
    recorder = backend.connect()
    if backend.name == "mysql":
        recorder.autocommit(True)
    else:
        recorder.autocommit = True

    lock = threading.Lock()

    def record(job) -> None:
        with lock, contextlib.closing(recorder.cursor()) as cur:
            cur.execute("INSERT INTO proletarian.runs VALUES (%s)", (str(job.job_id),))

    if mode == "drain":

        def handler(job):
            record(job)
            time.sleep(0.002)

        pool = backend.pool(4)
        worker = create_queue_worker(
            pool, handler, worker_threads=3, polling_interval_ms=20, handler_fn_mode="advanced"
        )
        worker.start()
        deadline = time.monotonic() + 60
        while backend.jobs() and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.stop()
    elif mode == "hang":

        def handler(job):
            record(job)
            print("started", flush=True)
            time.sleep(3600)

        worker = create_queue_worker(
            backend.pool(2), handler, polling_interval_ms=20, handler_fn_mode="advanced"
        )
        worker.start()
        time.sleep(3600)
    elif mode == "hook":
        if arg == "chained":

            def previous(signum, frame):
                print("previous handler called", flush=True)
                sys.exit(3)

            signal.signal(signal.SIGTERM, previous)

        def handler(job):
            record(job)
            print("started", flush=True)
            time.sleep(0.5)

        worker = create_queue_worker(
            backend.pool(2),
            handler,
            polling_interval_ms=20,
            handler_fn_mode="advanced",
            install_shutdown_hook=True,
        )
        worker.start()
        time.sleep(60)
        print("not stopped by the signal", flush=True)
    elif mode == "hook-start":
        pool = backend.pool(2)
        checked = []

        @contextlib.contextmanager
        def signalled_during_check():
            """The first connection (start()'s check) gets a SIGTERM sent meanwhile."""
            if not checked:
                checked.append(1)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3)
            with pool.connection() as conn:
                yield conn

        source = type("Source", (), {"connection": staticmethod(signalled_during_check)})()
        worker = create_queue_worker(
            source, lambda t, p: None, polling_interval_ms=20, install_shutdown_hook=True
        )
        worker.start()
        print("start() returned", flush=True)
        time.sleep(60)


if __name__ == "__main__":
    main(*sys.argv[1:])
