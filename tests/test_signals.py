"""What a handler tells its worker from inside a job: `Snooze` (run again later, nothing
spent), `Cancel` (archived as cancelled, no retry), `current_job()` and its progress, in
both worker modes, both handler modes, sync and async, on both databases."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from proletarian_di import (
    Cancel,
    ConfigurationError,
    NoCurrentJob,
    RetrySpec,
    Snooze,
    admin,
    create_queue_worker,
    current_job,
    process_next_job,
    worker_running,
)
from proletarian_di.jobs import MAX_PROGRESS_BYTES, progress_value

from backends import connection, enqueue_committed, lock_view_settled, wait_until, write_effect

MODES = [
    pytest.param({}, "default", id="held"),
    pytest.param({}, "advanced", id="held-advanced"),
    pytest.param({"lease_ms": 10_000}, "default", id="lease"),  # lease mode refuses advanced
]
FORMS = ["raise", "return", "async-raise", "async-return"]


def signalling(handler_mode: str, form: str, signal_for, seen: list, started=None):
    """A handler that gives `signal_for(attempts_seen)` (None: succeed) the way `form`
    says; it notes the current job's attempt number each time it runs (and when, in
    `started`)."""
    started = [] if started is None else started

    def decide():
        job = current_job()
        seen.append(job.attempts)
        started.append(time.monotonic())
        return signal_for(len(seen))

    def settle(signal):
        if signal is None:
            return None
        if form.endswith("raise"):
            raise signal
        return signal

    if form.startswith("async"):

        async def run(*args):
            await asyncio.sleep(0)
            return settle(decide())

    else:

        def run(*args):
            return settle(decide())

    if handler_mode == "advanced":
        return lambda job: run(job)
    return lambda job_type, payload: run(job_type, payload)


def get(backend, job_id):
    lock_view_settled(backend)  # MySQL's view of row locks: which job runs (held mode)
    with connection(backend) as conn:
        return admin.get_job(conn, job_id)


def worker(pool, handler, handler_mode, mode, **options):
    return create_queue_worker(
        pool,
        handler,
        handler_fn_mode=handler_mode,
        polling_interval_ms=20,
        worker_threads=1,
        **mode,
        **options,
    )


@pytest.mark.parametrize(("mode", "handler_mode"), MODES)
@pytest.mark.parametrize("form", FORMS)
def test_a_snoozed_job_runs_again_later_with_nothing_spent(backend, pool, mode, handler_mode, form):
    (job_id,) = enqueue_committed(backend, ("nap", {"n": 1}))
    seen: list[int] = []
    started: list[float] = []
    handler = signalling(
        handler_mode, form, lambda n: Snooze(300) if n == 1 else None, seen, started
    )
    retries = {"retry_strategy_fn": lambda job, exc: RetrySpec(0)}
    with worker_running(worker(pool, handler, handler_mode, mode, **retries)) as (w,):
        wait_until(lambda: w.summary()["snoozed"] == 1, description="snoozed")
        snoozed_at = datetime.now(timezone.utc)
        info = get(backend, job_id)
        if w.summary()["succeeded"] == 0:  # not run again yet
            assert info.state == "scheduled", info
            assert info.attempts == 0 and info.error is None and info.history == ()
            assert snoozed_at < info.process_at <= snoozed_at + timedelta(milliseconds=300)
        wait_until(lambda: w.summary()["succeeded"] == 1, description="run again")
        summary = w.summary()
    assert started[1] - started[0] >= 0.3, "run again once the snooze was over"
    assert seen == [1, 1], "the snoozed attempt is not counted: both runs are attempt 1"
    assert summary["failed"] == summary["retried"] == 0
    done = get(backend, job_id)
    assert done.state == "succeeded" and done.attempts == 1 and done.error is None
    assert [attempt.error for attempt in done.history] == [None]


@pytest.mark.parametrize(("mode", "handler_mode"), MODES)
@pytest.mark.parametrize("form", FORMS)
def test_a_cancelled_job_is_archived_with_its_reason_and_no_retry(
    backend, pool, mode, handler_mode, form
):
    (job_id,) = enqueue_committed(backend, ("doomed", None))
    seen: list[int] = []
    handler = signalling(handler_mode, form, lambda n: Cancel("the order was withdrawn"), seen)
    retries = {"retry_strategy_fn": lambda job, exc: RetrySpec(5)}
    with worker_running(worker(pool, handler, handler_mode, mode, **retries)) as (w,):
        wait_until(lambda: w.summary()["cancelled"] == 1, description="cancelled")
        summary = w.summary()
    assert seen == [1]
    assert summary["failed"] == summary["retried"] == summary["succeeded"] == 0
    info = get(backend, job_id)
    assert info.state == "cancelled" and info.attempts == 1
    assert info.error == "Cancel: the order was withdrawn"
    assert backend.jobs() == []


@pytest.mark.parametrize("signal", [Snooze(0), Cancel("stop")], ids=["snooze", "cancel"])
def test_an_advanced_handler_keeps_its_writes_when_it_returns_a_signal_not_when_it_raises_one(
    backend, pool, effects, signal
):
    enqueue_committed(backend, ("a", None), ("b", None))

    def handler(job):
        write_effect(job, job.job_type)
        if job.job_type == "a":
            return signal
        raise signal

    ran = [process_next_job(pool, handler, handler_fn_mode="advanced") for _ in range(2)]
    assert ran == [False, False]
    assert effects() == ["a"]


def test_snoozes_are_not_crashes_under_max_crashes(backend, pool):
    (job_id,) = enqueue_committed(backend, ("patient", None))
    seen: list[int] = []
    handler = signalling("default", "raise", lambda n: Snooze(0) if n <= 3 else None, seen)
    with worker_running(worker(pool, handler, "default", {}, max_crashes=1)) as (w,):
        wait_until(lambda: w.summary()["succeeded"] == 1, description="succeeded")
        assert w.summary()["snoozed"] == 3
    assert seen == [1, 1, 1, 1]
    assert get(backend, job_id).state == "succeeded"


def test_a_snooze_past_the_latest_storable_time_fails_the_job_and_says_why(backend, pool):
    (job_id,) = enqueue_committed(backend, ("far", None))
    assert process_next_job(pool, lambda t, p: Snooze(10**16)) is False
    info = get(backend, job_id)
    assert info.state == "failed" and "9999-12-31" in info.error


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Snooze(-1), "Snooze takes a delay of 0 or more milliseconds"),
        (lambda: Snooze(1.5), "Snooze takes a delay"),
        (lambda: Snooze(True), "Snooze takes a delay"),
        (lambda: Cancel(42), "Cancel takes a reason"),
    ],
)
def test_bad_signals_are_clear_errors(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_current_job_outside_a_handler_is_a_clear_error():
    with pytest.raises(NoCurrentJob, match="outside a running job's handler"):
        current_job()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, "a fraction from 0 to 1"),
        (float("nan"), "a fraction from 0 to 1"),
        (True, "a fraction from 0 to 1 or a JSON object"),
        ("half", "a fraction from 0 to 1 or a JSON object"),
        ({"at": object()}, "not JSON"),
        ({"log": "x" * MAX_PROGRESS_BYTES}, "more than the 2048 allowed"),
    ],
)
def test_bad_progress_is_a_clear_error(value, message):
    with pytest.raises(ConfigurationError, match=message):
        progress_value(value)


@pytest.mark.parametrize(("mode", "handler_mode"), MODES)
def test_progress_is_visible_to_other_connections_while_the_job_runs(
    backend, pool, mode, handler_mode
):
    (job_id,) = enqueue_committed(backend, ("long", None))
    step, done = threading.Event(), threading.Event()

    def work():
        job = current_job()
        job.report_progress(0.25)
        step.wait(10)
        job.report_progress({"rows": 500, "of": 1000})
        done.wait(10)

    handler = (lambda job: work()) if handler_mode == "advanced" else (lambda t, p: work())
    with worker_running(worker(pool, handler, handler_mode, mode)) as (w,):
        try:
            wait_until(lambda: get(backend, job_id).progress == 0.25, description="0.25")
            step.set()
            wait_until(
                lambda: get(backend, job_id).progress == {"rows": 500, "of": 1000},
                description="the object",
            )
            assert get(backend, job_id).state == "running"
        finally:
            step.set()
            done.set()
        wait_until(lambda: w.summary()["succeeded"] == 1)
    assert get(backend, job_id).progress is None


def test_progress_reports_are_coalesced_into_few_writes(backend, pool):
    (job_id,) = enqueue_committed(backend, ("chatty", None))
    reported, done = threading.Event(), threading.Event()

    def handler(job_type, payload):
        job = current_job()
        for n in range(1, 5001):
            job.report_progress(n / 5000)
        reported.set()
        done.wait(10)

    queue_worker = worker(pool, handler, "default", {})
    with worker_running(queue_worker) as (w,):
        registration = next(h for h in w._helpers if type(h).__name__ == "Registration")
        try:
            reported.wait(10)
            beats = registration.beats
            wait_until(lambda: get(backend, job_id).progress == 1.0, description="last report")
            assert registration.beats - beats <= 2, "5,000 reports, at most two writes"
        finally:
            done.set()


def test_progress_outside_a_worker_is_checked_then_dropped(backend, pool):
    enqueue_committed(backend, ("alone", None))
    seen = []

    def handler(job_type, payload):
        current_job().report_progress(0.5)
        seen.append(current_job().job_type)
        with pytest.raises(ConfigurationError):
            current_job().report_progress(2)

    assert process_next_job(pool, handler) is True
    assert seen == ["alone"]


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_jobs_show_and_the_dashboard_show_a_running_jobs_progress(backend, pool):
    from starlette.testclient import TestClient
    from test_cli import run

    from proletarian_di.contrib.dashboard import dashboard

    (job_id,) = enqueue_committed(backend, ("long", None))
    step, done = threading.Event(), threading.Event()

    def handler(job_type, payload):
        current_job().report_progress(0.42)
        step.wait(10)
        current_job().report_progress({"stage": "<copy>", "files": 3})
        done.wait(10)

    tables = ["--job-table", backend.job_table, "--archived-job-table", backend.archived_job_table]
    reader = TestClient(dashboard(pool))
    with worker_running(worker(pool, handler, "default", {})):
        try:
            wait_until(lambda: get(backend, job_id).progress == 0.42, description="0.42")
            shown = run("jobs", "show", str(job_id), "-d", backend.url, *tables)
            assert shown.exit_code == 0, shown.output
            assert re.search(r"progress 42%", shown.stdout), shown.stdout
            page = reader.get(f"/jobs/{job_id}").text
            assert '<progress max="1" value="0.42"></progress> 42%' in page
            step.set()
            wait_until(lambda: isinstance(get(backend, job_id).progress, dict))
            shown = run("jobs", "show", str(job_id), "-d", backend.url, *tables)
            assert '"stage": "<copy>", "files": 3' in shown.stdout
            page = reader.get(f"/jobs/{job_id}").text
            assert "\\u003ccopy\\u003e" in page and "<copy>" not in page
        finally:
            step.set()
            done.set()


@pytest.mark.parametrize("lease", [{}, {"lease_ms": 10_000}], ids=["held", "lease"])
def test_a_snooze_runs_again_at_its_time_not_at_the_next_poll(backend, pool, lease):
    """A worker that polls once a minute runs a job snoozed for 300 ms again within
    seconds: the snooze wakes it at the job's new time."""
    (job_id,) = enqueue_committed(backend, ("nap", {"n": 1}))
    seen: list[int] = []
    handler = signalling(
        "default", "raise", lambda n: Snooze(300) if len(seen) == 1 else None, seen
    )
    options = {"polling_interval_ms": 60_000, "worker_threads": 1, **lease}
    with worker_running(create_queue_worker(pool, handler, **options)) as (w,):
        wait_until(lambda: w.summary()["snoozed"] == 1, description="snoozed")
        wait_until(lambda: w.summary()["succeeded"] == 1, timeout=15, description="run again")
    assert len(seen) == 2
    assert get(backend, job_id).state == "succeeded"


def test_a_handlers_cancel_settles_its_dependents_down_the_graph_in_its_transaction(backend):
    """No worker's sweep here (`process_next_job`): the cancel's own transaction cancels
    the job's dependents and theirs, each with the reason that names its parent."""
    from proletarian_di import enqueue

    (parent,) = enqueue_committed(backend, ("parent", None))
    with connection(backend) as conn:
        child = enqueue(conn, "child", None, depends_on=[parent])
        grandchild = enqueue(conn, "grandchild", None, depends_on=[child])
        conn.commit()
    assert process_next_job(backend.connect, lambda t, p: Cancel("withdrawn")) is False
    assert backend.jobs() == []
    states = {
        job_id: (info.state, info.error)
        for job_id in (parent, child, grandchild)
        if (info := get(backend, job_id)) is not None
    }
    assert states == {
        parent: ("cancelled", "Cancel: withdrawn"),
        child: ("cancelled", f"Cancel: job {parent}, which this job depends on, was cancelled"),
        grandchild: ("cancelled", f"Cancel: job {child}, which this job depends on, was cancelled"),
    }
