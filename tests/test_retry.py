"""Retry strategies, attempt counting, the failure archive and failed_job_fn."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from faults import NotAnException, running

from proletarian_di import InvalidRetrySpec, RetrySpec, create_queue_worker, process_next_job

from backends import Events, enqueue_committed, wait_until, write_effect

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now += timedelta(milliseconds=ms)


def failing(job):
    raise RuntimeError(f"attempt {job.attempts} failed")


def test_retry_spec_delays_and_repetition():
    spec = RetrySpec(retries=4, delays=[100, 1000])
    assert [spec.delay_ms(n) for n in (1, 2, 3, 4)] == [100, 1000, 1000, 1000]
    assert RetrySpec(2).delay_ms(1) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1,), "retries must be >= 0"),
        ((2**40, [0]), "at most 2147483646 .the attempts column counts up to 2147483647"),
        ((2**31 - 1,), "at most 2147483646"),
        (("3",), "retries must be an int"),
        ((True,), "retries must be an int"),
        ((2, [10, -5]), "delay must be an int >= 0"),
        ((2, "100"), "delays must be a sequence"),
        ((2, [1.5]), "delay must be an int"),
    ],
)
def test_invalid_retry_specs_are_clear_errors(args, message):
    with pytest.raises(InvalidRetrySpec, match=message):
        RetrySpec(*args)


def run(pool, clock, **options):
    return process_next_job(pool, failing, handler_fn_mode="advanced", clock=clock, **options)


@pytest.mark.parametrize("spec", [RetrySpec(3, [10, 20]), {"retries": 3, "delays": [10, 20]}])
def test_retries_move_process_at_and_count_attempts(backend, pool, spec):
    clock = Clock()
    enqueue_committed(backend, ("flaky", None), clock=clock)
    seen = []

    def strategy(job, exc):
        seen.append((job.attempts, str(exc)))
        return spec

    options = {"retry_strategy_fn": strategy}
    assert run(pool, clock, **options) is False
    assert backend.jobs() == [("flaky", 1, "default")]
    assert run(pool, clock, **options) is None, "not due before the first delay"
    clock.advance(10)
    assert run(pool, clock, **options) is False
    clock.advance(19)
    assert run(pool, clock, **options) is None
    clock.advance(1)
    assert run(pool, clock, **options) is False
    clock.advance(20)  # the last delay repeats
    assert run(pool, clock, **options) is False
    assert [a for a, _ in seen] == [1, 2, 3, 4]
    assert seen[-1][1] == "attempt 4 failed"
    assert backend.jobs() == []
    assert backend.archived() == [("flaky", "failure", 4)]


def test_no_strategy_means_no_retry(backend, pool):
    enqueue_committed(backend, ("once", None))
    assert run(pool, Clock()) is False
    assert backend.archived() == [("once", "failure", 1)]


def test_a_job_that_succeeds_on_retry_archives_its_attempt_number(backend, pool):
    enqueue_committed(backend, ("flaky", None))
    attempts = []

    def handler(job):
        attempts.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError("not yet")

    while (
        process_next_job(
            pool,
            handler,
            handler_fn_mode="advanced",
            retry_strategy_fn=lambda job, exc: RetrySpec(5),
        )
        is not None
    ):
        pass
    assert attempts == [1, 2, 3]
    assert backend.archived() == [("flaky", "success", 3)]


def raising_strategy(job, exc):
    raise KeyError("strategy bug")


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        pytest.param(lambda job, exc: {"retries": -1}, "retries must be >= 0", id="negative"),
        pytest.param(lambda job, exc: {"retriez": 2}, "unknown retry spec keys", id="typo"),
        pytest.param(
            lambda job, exc: {"retries": 2, "delay": [5]},
            "unknown retry spec keys ['delay']",
            id="delay-not-delays",
        ),
        pytest.param(lambda job, exc: {"delays": [10]}, "needs a 'retries' key", id="no-retries"),
        pytest.param(lambda job, exc: 3, "must return a RetrySpec, a dict or None", id="an-int"),
        pytest.param(
            lambda job, exc: "retry please", "must return a RetrySpec, a dict or None", id="a-str"
        ),
        pytest.param(
            lambda job, exc: {"retries": 2, "delays": [-5]},
            "delay must be an int >= 0",
            id="negative-delay",
        ),
        pytest.param(lambda job, exc: {"retries": 2.5}, "retries must be an int", id="float"),
        pytest.param(
            lambda job, exc: {"retries": 2**40, "delays": [0]},
            "at most 2147483646",
            id="retries-past-the-attempts-column",
        ),
        pytest.param(
            lambda job, exc: RetrySpec(2**40, [0]), "at most 2147483646", id="spec-past-it"
        ),
        pytest.param(raising_strategy, "strategy bug", id="raises"),
    ],
)
def test_an_invalid_spec_from_a_strategy_fails_the_job_once_with_a_clear_log(
    backend, pool, strategy, message
):
    (job_id,) = enqueue_committed(backend, ("x", None))
    events, runs, failed = Events(), [], []

    def handler(job):
        runs.append(job.attempts)
        raise RuntimeError("boom")

    options = {
        "handler_fn_mode": "advanced",
        "log": events,
        "retry_strategy_fn": strategy,
        "failed_job_fn": lambda job, exc: failed.append(job.job_id),
    }
    assert process_next_job(pool, handler, **options) is False
    assert process_next_job(pool, handler, **options) is None
    assert runs == [1]
    assert failed == [job_id]
    assert backend.archived() == [("x", "failure", 1)]
    (error,) = events.named("retry_strategy_error")
    assert message in str(error["exception"])


def test_failed_job_fn_runs_inside_the_transaction(backend, pool, effects):
    enqueue_committed(backend, ("x", None))
    seen = []

    def on_failure(job, exc):
        seen.append((job.job_type, job.attempts, str(exc)))
        write_effect(job, "compensated")

    assert (
        process_next_job(pool, failing, handler_fn_mode="advanced", failed_job_fn=on_failure)
        is False
    )
    assert seen == [("x", 1, "attempt 1 failed")]
    assert effects() == ["compensated"]
    assert backend.archived() == [("x", "failure", 1)]


@pytest.mark.parametrize(
    "raised",
    [ValueError("mailer down"), SystemExit(1), NotAnException()],
    ids=["ValueError", "SystemExit", "BaseException"],
)
def test_a_raising_failed_job_fn_keeps_the_failure_archived_and_never_loops(
    backend, pool, effects, raised
):
    bad, _ = enqueue_committed(backend, ("bad", None), ("good", None))
    runs, events = [], Events()

    def handler(job):
        runs.append(job.job_type)
        if job.job_type == "bad":
            raise RuntimeError("boom")

    def on_failure(job, exc):
        write_effect(job, "half")
        raise raised

    worker = create_queue_worker(
        pool,
        handler,
        handler_fn_mode="advanced",
        polling_interval_ms=10,
        failed_job_fn=on_failure,
        log=events,
    )
    with running(worker):
        wait_until(lambda: len(backend.archived()) == 2)
    assert sorted(backend.archived()) == [("bad", "failure", 1), ("good", "success", 1)]
    assert sorted(runs) == ["bad", "good"], "the failed job ran once: no loop"
    assert effects() == [], "failed_job_fn's write is undone with its error"
    assert backend.jobs() == []
    (error,) = events.named("failed_job_fn_error")
    assert error["exception"] is raised
    assert error["job_id"] == bad
    assert process_next_job(pool, failing) is None, "the job never loops"


def test_the_most_retries_the_attempts_column_counts_are_accepted():
    assert RetrySpec(retries=2**31 - 2, delays=[0]).retries == 2_147_483_646


def test_a_delay_that_cannot_be_scheduled_is_refused_with_the_limit():
    with pytest.raises(InvalidRetrySpec, match=r"at most 3162240000000 ms \(about 100 years\)"):
        RetrySpec(retries=3, delays=[10**15])
    assert RetrySpec(retries=1, delays=[3_162_240_000_000]).delay_ms(1) == 3_162_240_000_000


def test_a_retry_that_overflows_at_run_time_fails_the_job_once(backend, pool):
    near_the_end = datetime(9999, 12, 30, tzinfo=timezone.utc)
    clock = Clock()
    clock.now = near_the_end
    enqueue_committed(backend, ("late", None), clock=clock)
    events, runs = Events(), []

    def handler(job):
        runs.append(job.attempts)
        raise RuntimeError("boom")

    options = {
        "handler_fn_mode": "advanced",
        "clock": clock,
        "log": events,
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=3, delays=[3 * 86_400_000]),
    }
    assert process_next_job(pool, handler, **options) is False
    assert process_next_job(pool, handler, **options) is None
    assert runs == [1]
    assert backend.archived() == [("late", "failure", 1)]
    (error,) = events.named("retry_strategy_error")
    assert "past the latest time that can be stored" in str(error["exception"])
