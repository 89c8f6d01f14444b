"""`share_cpu`: a worker's threads keep to one CPU while they claim and settle jobs (the GIL
passes between them without cross-CPU wake-ups), and run handlers on their own CPUs."""

from __future__ import annotations

import os
import threading

import pytest

from proletarian_di import ConfigurationError, create_queue_worker
from proletarian_di._engine.cpu import QUIET_SLACK, choose_cpu, interrupt_time, shared_cpu

from backends import enqueue_committed, wait_until

ALL_CPUS = os.sched_getaffinity(0)
needs_two_cpus = pytest.mark.skipif(len(ALL_CPUS) < 2, reason="the machine has one CPU")


def test_processes_spread_over_the_cpus_that_serve_fewest_interrupts():
    """A CPU taking a disk's interrupts is passed over; the quiet ones are taken by pid."""
    busy = {0: 500, 1: 90_000, 2: 600, 3: 620}
    assert [choose_cpu([0, 1, 2, 3], busy, pid) for pid in range(6)] == [0, 2, 3, 0, 2, 3]
    even = {0: 1_000, 1: 1_400}
    assert [choose_cpu([0, 1], even, pid) for pid in (10, 11)] == [0, 1]
    assert choose_cpu([4, 5], {}, 7) == 5  # nothing known: every CPU is quiet
    fresh = {0: 0, 1: QUIET_SLACK}  # a new host: within the slack of nothing
    assert choose_cpu([0, 1], fresh, 1) == 1


def test_interrupt_time_is_read_for_every_cpu_allowed():
    times = interrupt_time()
    assert times.keys() >= ALL_CPUS
    assert all(isinstance(ticks, int) and ticks >= 0 for ticks in times.values())


def test_one_thread_shares_nothing():
    assert shared_cpu(1) is None
    if len(ALL_CPUS) > 1:
        assert shared_cpu(2) in ALL_CPUS


def test_share_cpu_must_be_a_bool(pg):
    with pytest.raises(ConfigurationError, match="share_cpu must be a bool, got 'yes'"):
        create_queue_worker(pg.pool(1), lambda t, p: None, share_cpu="yes")


def _affinities(backend, **options):
    """Run three jobs on a 2-thread worker: the CPUs its threads may use while they poll
    (the log's `polling_for_jobs`, the worker's own code), in the handler, and in a thread
    the handler starts."""
    polling, handling, started = [], [], []

    def log(event, data):
        if event == "polling_for_jobs":
            polling.append(os.sched_getaffinity(0))

    def handler(job_type, payload):
        handling.append(os.sched_getaffinity(0))
        thread = threading.Thread(target=lambda: started.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()

    enqueue_committed(backend, *[("noop", n) for n in range(3)])
    pool = backend.pool(2)
    try:
        worker = create_queue_worker(
            pool, handler, worker_threads=2, polling_interval_ms=10, log=log, **options
        )
        with worker:
            assert wait_until(lambda: worker.summary()["succeeded"] == 3)
    finally:
        pool.close()
    return polling, handling, started


@needs_two_cpus
@pytest.mark.parametrize("lease", [False, True], ids=["held", "lease"])
def test_worker_threads_poll_on_one_cpu_and_run_handlers_on_all(backend, lease):
    options = {"lease_ms": 5_000} if lease else {}
    polling, handling, started = _affinities(backend, **options)
    assert polling and {len(cpus) for cpus in polling} == {1}
    assert len({frozenset(cpus) for cpus in polling}) == 1  # the same CPU for both threads
    assert polling[0] <= ALL_CPUS
    assert handling == [ALL_CPUS] * 3
    assert started == [ALL_CPUS] * 3


@needs_two_cpus
def test_share_cpu_false_leaves_the_threads_alone(backend):
    polling, handling, started = _affinities(backend, share_cpu=False)
    assert polling and all(cpus == ALL_CPUS for cpus in polling)
    assert handling == started == [ALL_CPUS] * 3
