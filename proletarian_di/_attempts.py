"""Who ran an attempt (`host:pid thread`), as kept with its outcome: the archive's row holds
the last attempt's start and worker (written by the statement that archives it), the attempt
table a row per failed attempt (written with the retry or the failure)."""

from __future__ import annotations

import functools
import os
import socket
import threading

WORKER_CHARS = 255
"""The longest worker name stored (MySQL's column is a VARCHAR(255))."""


@functools.cache
def _host() -> str:
    return socket.gethostname()


def worker_name(fallback: str) -> str:
    """The calling thread as a worker: `host:pid thread-name`. In the main thread
    (`process_next_job`, `run_due_jobs`) `fallback`, the queue worker id, names it."""
    thread = threading.current_thread()
    name = fallback if thread is threading.main_thread() else thread.name
    return f"{_host()}:{os.getpid()} {name}"[:WORKER_CHARS]


def lease_holder(lease: str) -> str:
    """The `host:pid` whose lease this was (`_leases.lease_token`): who ran an attempt that
    died under it."""
    return lease.rsplit(":", 1)[0][:WORKER_CHARS]
