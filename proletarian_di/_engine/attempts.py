"""Who ran an attempt (`host:pid thread`), as kept with its outcome: the archive's row holds
the last attempt's start and worker (written by the statement that archives it), the attempt
table a row per failed attempt (written with the retry or the failure)."""

from __future__ import annotations

import functools
import os
import random
import socket
import threading

WORKER_CHARS = 255
"""The longest worker name stored (MySQL's column is a VARCHAR(255))."""


@functools.cache
def _host() -> str:
    return socket.gethostname()


_pid = os.getpid()
"""This process's id, kept rather than asked for (a system call) with every job."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def unique_name() -> str:
    """`host:pid:` and 64 random bits, which name a lease's claim or a running worker.
    Not a secret (anyone reading the table sees it), so no system call makes it: a claim
    makes one per job."""
    return f"{_host()[:180]}:{_pid}:{random.getrandbits(64):016x}"


def worker_name(fallback: str) -> str:
    """The calling thread as a worker: `host:pid thread-name`. In the main thread
    (`process_next_job`, `run_due_jobs`) `fallback`, the queue worker id, names it."""
    thread = threading.current_thread()
    name = fallback if thread is threading.main_thread() else thread.name
    return f"{_host()}:{_pid} {name}"[:WORKER_CHARS]


def lease_holder(lease: str) -> str:
    """The `host:pid` whose lease this was (`_leases.lease_token`): who ran an attempt that
    died under it."""
    return lease.rsplit(":", 1)[0][:WORKER_CHARS]
