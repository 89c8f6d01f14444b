"""The worker: claim, run under the row lock, archive, drain, stop, log."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
from faults import running

from proletarian_di import (
    ConfigurationError,
    Job,
    PayloadError,
    SchemaError,
    create_queue_worker,
    process_next_job,
    worker_running,
)
from proletarian_di._store.dialects.postgresql import keepalives
from proletarian_di.testing import run_due_jobs

from backends import (
    Events,
    archive_by_id,
    enqueue_committed,
    store_raw_payload,
    wait_until,
    write_effect,
)


def test_process_next_job_outcomes(backend, pool):
    assert process_next_job(pool, lambda t, p: None) is None
    enqueue_committed(backend, ("ok", 1), ("bad", 2))
    assert process_next_job(pool, lambda t, p: None) is True

    def boom(t, p):
        raise RuntimeError("boom")

    assert process_next_job(pool, boom) is False
    assert backend.archived() == [("ok", "success", 1), ("bad", "failure", 1)]
    assert backend.jobs() == []


def test_claims_the_oldest_due_job_of_its_own_queue(backend, pool):
    from datetime import timedelta

    enqueue_committed(backend, ("future", None), process_in=timedelta(hours=1))
    enqueue_committed(backend, ("first", None))
    enqueue_committed(backend, ("other-queue", None), queue="reports")
    enqueue_committed(backend, ("second", None))
    seen = []
    while process_next_job(pool, lambda t, p: seen.append(t)):
        pass
    assert seen == ["first", "second"]
    assert sorted(j[0] for j in backend.jobs()) == ["future", "other-queue"]
    assert process_next_job(pool, lambda t, p: seen.append(t), queue="reports") is True
    assert seen[-1] == "other-queue"


def test_handler_runs_while_the_row_lock_is_held(backend, pool):
    enqueue_committed(backend, ("slow", None))
    observed = {}

    def handler(job_type, payload):
        other = backend.pool(1)
        try:
            observed["second_claim"] = process_next_job(other, lambda t, p: None)
        finally:
            other.close()
        observed["archived_during_run"] = backend.archived()
        observed["waiting_during_run"] = [j[0] for j in backend.jobs()]

    assert process_next_job(pool, handler) is True
    assert observed == {
        "second_claim": None,
        "archived_during_run": [],
        "waiting_during_run": ["slow"],
    }
    assert backend.archived() == [("slow", "success", 1)]


def test_advanced_mode_gets_the_job(backend, pool):
    (job_id,) = enqueue_committed(backend, ("send", {"to": "a"}), queue="mail")
    seen = []
    assert process_next_job(pool, seen.append, handler_fn_mode="advanced", queue="mail")
    (job,) = seen
    assert isinstance(job, Job)
    assert (job.job_id, job.queue, job.job_type, job.payload, job.attempts) == (
        job_id,
        "mail",
        "send",
        {"to": "a"},
        1,
    )
    assert job.enqueued_at.tzinfo is not None and job.process_at >= job.enqueued_at


def test_effects_through_the_jobs_connection_commit_with_the_archive(backend, pool, effects):
    enqueue_committed(backend, ("ok", None))
    assert process_next_job(pool, lambda job: write_effect(job, "done"), handler_fn_mode="advanced")
    assert effects() == ["done"]
    assert backend.archived() == [("ok", "success", 1)]


def test_effects_of_a_failing_handler_are_rolled_back(backend, pool, effects):
    enqueue_committed(backend, ("bad", None))

    def handler(job):
        write_effect(job, "half-done")
        raise RuntimeError("after the write")

    assert process_next_job(pool, handler, handler_fn_mode="advanced") is False
    assert effects() == []
    assert backend.archived() == [("bad", "failure", 1)]


def test_worker_drains_back_to_back_and_names_its_threads(backend, pool):
    enqueue_committed(backend, *[("n", i) for i in range(30)])
    threads, lock = set(), threading.Lock()

    def handler(job_type, payload):
        with lock:
            threads.add(threading.current_thread().name)

    worker = create_queue_worker(
        pool, handler, worker_threads=3, polling_interval_ms=60_000, queue_worker_id="mailer"
    )
    with worker:
        # One idle wait would take a minute: the queue is drained back to back.
        wait_until(lambda: len(backend.archived()) == 30, timeout=20)
    assert threads <= {"mailer-0", "mailer-1", "mailer-2"} and threads
    assert worker.summary() == {
        "succeeded": 30,
        "failed": 0,
        "retried": 0,
        "abandoned": 0,
        "timed_out": 0,
        "snoozed": 0,
        "cancelled": 0,
    }


def test_idle_worker_picks_up_new_jobs(backend, pool):
    done = threading.Event()
    worker = create_queue_worker(pool, lambda t, p: done.set(), polling_interval_ms=20)
    with worker_running(worker):
        time.sleep(0.1)
        enqueue_committed(backend, ("late", None))
        assert done.wait(10)
    assert backend.archived() == [("late", "success", 1)]


def test_log_events_carry_worker_and_job_identity(backend, pool):
    (job_id,) = enqueue_committed(backend, ("ok", None))
    events = Events()
    worker = create_queue_worker(pool, lambda t, p: None, log=events, polling_interval_ms=10)
    with worker:
        wait_until(lambda: events.named("job_finished"))
    names = {name for name, _ in events.events}
    assert {
        "polling_for_jobs",
        "handling_job",
        "job_finished",
        "shutting_down",
        "shutdown_complete",
    } <= names
    assert all(d["queue_worker_id"] == "proletarian[default]" for _, d in events.events)
    (finished,) = events.named("job_finished")
    assert (finished["job_id"], finished["job_type"], finished["attempt"]) == (job_id, "ok", 1)


def test_stop_drains_in_flight_jobs_then_calls_on_shutdown(backend, pool):
    enqueue_committed(backend, ("slow", None))
    started, order = threading.Event(), []

    def handler(job_type, payload):
        started.set()
        time.sleep(0.5)
        order.append("job done")

    worker = create_queue_worker(
        pool, handler, polling_interval_ms=10, on_shutdown=lambda: order.append("on_shutdown")
    )
    worker.start()
    assert started.wait(10)
    assert worker.stop() is True
    assert order == ["job done", "on_shutdown"]
    assert backend.archived() == [("slow", "success", 1)]
    assert worker.stop() is True, "stop() is idempotent"


def test_a_job_outliving_the_timeout_is_abandoned_and_runs_again_its_retries_unspent(backend, pool):
    from proletarian_di import RetrySpec

    (job_id,) = enqueue_committed(backend, ("stuck", None))
    started, release = threading.Event(), threading.Event()
    events = Events()

    def handler(job_type, payload):
        started.set()
        release.wait(30)

    worker = create_queue_worker(
        pool,
        handler,
        log=events,
        polling_interval_ms=10,
        await_termination_timeout_ms=200,
        retry_strategy_fn=lambda job, exc: RetrySpec(3),
    )
    worker.start()
    assert started.wait(10)
    assert worker.stop() is False
    release.set()
    (abandoned,) = events.named("job_abandoned")
    assert abandoned["job_id"] == job_id
    assert worker.summary() == {
        "succeeded": 0,
        "failed": 0,
        "retried": 0,
        "abandoned": 1,
        "timed_out": 0,
        "snoozed": 0,
        "cancelled": 0,
    }
    assert backend.jobs() == [("stuck", 0, "default")], "rolled back, no retry spent"
    [(last_error,)] = backend.query(f"SELECT last_error FROM {backend.job_table}")
    assert last_error.startswith("JobAbandoned: abandoned after ")
    assert backend.archived() == []
    assert process_next_job(pool, lambda t, p: None) is True
    assert backend.archived() == [("stuck", "success", 1)]


def test_a_job_that_always_outlives_the_timeout_ends_in_the_failure_archive(backend, pool):
    """Abandoned at every stop, it ends in the failure archive at the third, whatever its
    retry strategy allows (no retry was spent)."""
    from proletarian_di import JobAbandoned
    from proletarian_di._engine.runner import MAX_ABANDONMENTS

    enqueue_committed(backend, ("stuck", None))
    release = threading.Event()
    failures = []

    def handler(job_type, payload):
        release.wait(30)

    for _ in range(MAX_ABANDONMENTS):
        assert backend.archived() == []
        started = threading.Event()
        worker = create_queue_worker(
            pool,
            lambda t, p, started=started: (started.set(), handler(t, p)),
            polling_interval_ms=10,
            await_termination_timeout_ms=100,
            retry_strategy_fn=lambda job, exc: {"retries": 1},
            failed_job_fn=lambda job, exc: failures.append((job.attempts, type(exc))),
            log=Events(),
        )
        worker.start()
        assert started.wait(10)
        assert worker.stop() is False
    release.set()
    assert failures == [(1, JobAbandoned)]
    assert backend.archived() == [("stuck", "failure", 1)]
    [(error,)] = backend.query(f"SELECT last_error FROM {backend.archived_job_table}")
    assert f"(abandonment {MAX_ABANDONMENTS} of {MAX_ABANDONMENTS})" in error
    assert backend.jobs() == []


def test_worker_running_stops_everything_when_the_block_raises(backend, pool):
    a = create_queue_worker(pool, lambda t, p: None, queue="a", polling_interval_ms=10)
    b = create_queue_worker(pool, lambda t, p: None, queue="b", polling_interval_ms=10)
    with pytest.raises(RuntimeError, match="inside"), worker_running(a, b):
        assert a.running and b.running
        raise RuntimeError("inside")
    assert not a.running and not b.running


@pytest.fixture
def custom_tables(backend):
    backend.install("proletarian.custom_job", "proletarian.custom_archive")
    yield {
        "job_table": "proletarian.custom_job",
        "archived_job_table": "proletarian.custom_archive",
    }
    backend.execute("DROP TABLE IF EXISTS proletarian.custom_job")
    backend.execute("DROP TABLE IF EXISTS proletarian.renamed_job")
    backend.execute("DROP TABLE IF EXISTS proletarian.custom_archive")


def test_custom_table_names(backend, pool, custom_tables):
    enqueue_committed(backend, ("x", None), job_table=custom_tables["job_table"])
    assert backend.jobs() == []
    assert process_next_job(pool, lambda t, p: None, **custom_tables) is True
    assert backend.query("SELECT job_type, status FROM proletarian.custom_archive") == [
        ("x", "success")
    ]


def rename(backend, old, new):
    if backend.name == "mysql":
        backend.execute(f"RENAME TABLE proletarian.{old} TO proletarian.{new}")
    else:
        backend.execute(f"ALTER TABLE proletarian.{old} RENAME TO {new}")


def test_polling_errors_are_survived_by_default(backend, pool, custom_tables):
    events = Events()
    worker = create_queue_worker(
        pool, lambda t, p: None, log=events, polling_interval_ms=10, **custom_tables
    )
    with worker:
        rename(backend, "custom_job", "renamed_job")
        wait_until(lambda: len(events.named("polling_error")) >= 2)
        rename(backend, "renamed_job", "custom_job")
        enqueue_committed(backend, ("after", None), job_table=custom_tables["job_table"])
        wait_until(lambda: events.named("job_finished"))
    assert worker.summary()["succeeded"] == 1


def test_on_polling_error_can_stop_the_worker(backend, pool, custom_tables):
    seen, stopped = [], threading.Event()
    worker = create_queue_worker(
        pool,
        lambda t, p: None,
        polling_interval_ms=10,
        on_polling_error=lambda exc: seen.append(exc) or True,
        on_shutdown=stopped.set,
        log=Events(),
        **custom_tables,
    )
    worker.start()
    rename(backend, "custom_job", "renamed_job")
    try:
        assert stopped.wait(10)
        assert not worker.running
        assert seen and "job" in str(seen[0]).lower()
    finally:
        rename(backend, "renamed_job", "custom_job")


def test_start_names_a_missing_table(backend, pool):
    worker = create_queue_worker(pool, lambda t, p: None, job_table="proletarian.nope")
    with pytest.raises(SchemaError, match=r"proletarian\.nope \(job_table\) does not exist"):
        worker.start()
    assert not worker.running


def test_start_rejects_an_old_server(backend, pool, monkeypatch):
    from proletarian_di import UnsupportedDatabase
    from proletarian_di._store.dialects import MySQLDialect, PostgresDialect

    old = ("MariaDB", (10, 5, 9)) if backend.name == "mysql" else ("PostgreSQL", (9, 4, 26))
    cls = MySQLDialect if backend.name == "mysql" else PostgresDialect
    monkeypatch.setattr(cls, "server_version", lambda self, conn: old)
    worker = create_queue_worker(pool, lambda t, p: None)
    needed = "10.6.0" if backend.name == "mysql" else "9.5"
    with pytest.raises(UnsupportedDatabase, match=rf"{old[0]} .* found; .* needs .*{needed}"):
        worker.start()


def test_the_real_server_passes_the_check(backend, pool):
    create_queue_worker(pool, lambda t, p: None).check()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"worker_threads": 0}, "worker_threads must be an int >= 1"),
        ({"worker_threads": -1}, "worker_threads must be an int >= 1"),
        ({"worker_threads": True}, "worker_threads must be an int >= 1"),
        ({"worker_threads": "4"}, "worker_threads must be an int >= 1"),
        ({"worker_threads": 2.0}, "worker_threads must be an int >= 1"),
        ({"handler_fn_mode": "fancy"}, "handler_fn_mode"),
        ({"handler_fn_mode": "ADVANCED"}, "handler_fn_mode must be 'default' or 'advanced'"),
        ({"polling_interval_ms": -1}, "polling_interval_ms"),
        ({"polling_interval_ms": -100}, "polling_interval_ms must be an int >= 0"),
        ({"polling_interval_ms": "100"}, "polling_interval_ms must be an int >= 0"),
        ({"await_termination_timeout_ms": -1}, "await_termination_timeout_ms"),
        ({"threads": 4}, "unknown worker option.*threads"),
        ({"polling_intervall_ms": 5}, "unknown worker option.*polling_intervall_ms"),
        ({"queue": ""}, "queue must be a non-empty string"),
        ({"queue": 7}, "queue must be a non-empty string"),
        ({"queue": "a\x00b"}, "queue must not contain NUL"),
        ({"retry_strategy_fn": {"retries": 3}}, "retry_strategy_fn must be callable"),
        ({"failed_job_fn": 3}, "failed_job_fn must be callable"),
        ({"serializer": "yaml"}, "serializer must be 'json', 'transit' or an object with"),
        ({"log": "stdout"}, "log must be a callable"),
        ({"install_shutdown_hook": "yes"}, "install_shutdown_hook must be a bool"),
        ({"job_table": "job; DROP TABLE x"}, "job_table must be a plain identifier"),
        (
            {"keepalive_timeout_ms": 500},
            "keepalive_timeout_ms must be 0 \\(off\\) or an int >= 3000",
        ),
        (
            {"keepalive_timeout_ms": 45.0},
            "keepalive_timeout_ms must be 0 \\(off\\) or an int >= 3000",
        ),
        (
            {"keepalive_timeout_ms": 10**9},
            r"keepalive_timeout_ms must be at most 86400000 \(a day\)",
        ),
    ],
)
def test_invalid_options_fail_before_any_connection(options, message):
    def data_source():
        raise AssertionError("no connection may be opened for invalid options")

    with pytest.raises(ConfigurationError, match=message):
        create_queue_worker(data_source, lambda t, p: None, **options)
    with pytest.raises(ConfigurationError, match=message):
        process_next_job(data_source, lambda t, p: None, **options)
    with pytest.raises(ConfigurationError, match=message):
        run_due_jobs(data_source, lambda t, p: None, **options)


def test_undecodable_payloads_fail_their_jobs_and_the_worker_goes_on(backend, pool):
    ids = enqueue_committed(backend, *[("work", {"n": n}) for n in range(6)])
    bad = {ids[1]: "{not json", ids[3]: "", ids[4]: "[1,"}
    for job_id, text in bad.items():
        store_raw_payload(backend, job_id, text)
    handled, failures, events = [], {}, Events()

    def on_failure(job, exc):
        failures[job.job_id] = exc

    worker = create_queue_worker(
        pool,
        lambda t, p: handled.append(p["n"]),
        polling_interval_ms=10,
        failed_job_fn=on_failure,
        log=events,
    )
    with running(worker):
        wait_until(lambda: len(archive_by_id(backend)) == 6, timeout=20)
    assert sorted(handled) == [0, 2, 5], "the handler never sees an undecodable payload"
    assert set(failures) == set(bad)
    assert all(isinstance(exc, PayloadError) for exc in failures.values())
    assert all("JSON" in str(exc) for exc in failures.values())
    assert {event["job_id"] for event in events.named("payload_decode_error")} == set(bad)
    assert archive_by_id(backend) == {
        job_id: ("failure" if job_id in bad else "success", 1) for job_id in ids
    }
    assert backend.jobs() == []
    (job_id,) = enqueue_committed(backend, ("work", {"n": 6}))
    store_raw_payload(backend, job_id, "{")
    assert process_next_job(pool, lambda t, p: handled.append(p["n"])) is False
    assert archive_by_id(backend)[job_id] == ("failure", 1)


def test_a_callable_data_source_gets_a_fresh_connection(backend):
    opened = []

    def connect():
        conn = backend.connect()
        opened.append(conn)
        return conn

    enqueue_committed(backend, ("x", None))
    assert process_next_job(connect, lambda t, p: None) is True
    assert len(opened) == 1
    with contextlib.suppress(Exception):
        opened[0].cursor().execute("SELECT 1")
        pytest.fail("the connection should have been closed")


def test_postgres_wakes_an_idle_worker_on_commit(pg):
    """enqueue's NOTIFY (sent on commit) wakes a worker whose polling interval is a minute."""
    pool = pg.pool(2)
    done = threading.Event()
    events = Events()
    worker = create_queue_worker(
        pool, lambda t, p: done.set(), polling_interval_ms=60_000, log=events
    )
    try:
        with worker:
            wait_until(lambda: events.named("polling_for_jobs"))
            time.sleep(0.2)
            conn = pg.connect()
            from proletarian_di import enqueue

            enqueue(conn, "wake", None)
            time.sleep(0.3)
            assert not done.is_set(), "not before the enqueuing transaction commits"
            conn.commit()
            conn.close()
            assert done.wait(20)
    finally:
        pool.close()
    assert pg.archived() == [("wake", "success", 1)]
    assert not events.named("listener_error")


def test_batch_claiming_settles_each_job_on_its_own(backend, pool, effects):
    from proletarian_di import RetrySpec

    enqueue_committed(backend, *[("ok", i) for i in range(7)], ("retry", 7), ("fail", 8))

    def handler(job):
        write_effect(job, f"{job.job_type}-{job.payload}")
        if job.job_type != "ok":
            raise RuntimeError(job.job_type)

    worker = create_queue_worker(
        pool,
        handler,
        handler_fn_mode="advanced",
        batch_size=10,
        polling_interval_ms=10,
        retry_strategy_fn=lambda job, exc: (
            RetrySpec(1, [60_000]) if job.job_type == "retry" else None
        ),
    )
    with worker:
        wait_until(lambda: len(backend.archived()) == 8)
    assert sorted(effects()) == sorted(f"ok-{i}" for i in range(7))
    assert backend.jobs() == [("retry", 1, "default")]
    assert sorted(backend.archived()) == sorted(
        [("ok", "success", 1)] * 7 + [("fail", "failure", 1)]
    )
    assert worker.summary() == {
        "succeeded": 7,
        "failed": 1,
        "retried": 1,
        "abandoned": 0,
        "timed_out": 0,
        "snoozed": 0,
        "cancelled": 0,
    }


@pytest.mark.parametrize(
    ("timeout_ms", "version", "expected"),
    [
        (45_000, 150000, (15, 10, 3, 45_000)),
        (3_000, 150000, (1, 1, 3, 3_000)),
        (600_000, 110000, (200, 133, 3, None)),  # PostgreSQL 11 has no tcp_user_timeout
    ],
)
def test_the_keepalives_a_timeout_asks_of_the_server(
    timeout_ms: int, version: int, expected: tuple[Any, ...]
) -> None:
    """What docs/operations.md quotes: a third of the bound idle, then three probes."""
    sets = dict(
        part.removeprefix("SET ").split(" = ")
        for part in keepalives(timeout_ms, version).split("; ")[1:]
    )
    names = ("idle", "interval", "count")
    assert tuple(int(sets[f"tcp_keepalives_{n}"]) for n in names) == expected[:3]
    assert (int(sets["tcp_user_timeout"]) if "tcp_user_timeout" in sets else None) == expected[3]
    idle, interval, count, _ = expected
    assert idle + interval * count <= timeout_ms / 1000 + 1
    assert keepalives(0, version) == ""
