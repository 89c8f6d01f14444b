"""Queue names and job types are compared exactly and never cut short, on both databases."""

from __future__ import annotations

import contextlib

import pytest

from proletarian_di import ConfigurationError, create_queue_worker, enqueue, process_next_job

from backends import enqueue_committed


def test_a_trailing_space_makes_another_queue(backend, pool):
    enqueue_committed(backend, ("padded", None), queue="email ")
    enqueue_committed(backend, ("exact", None), queue="email")
    seen = []
    assert process_next_job(pool, lambda t, p: seen.append(t), queue="email") is True
    assert process_next_job(pool, lambda t, p: seen.append(t), queue="email") is None
    assert seen == ["exact"]
    assert backend.jobs() == [("padded", 0, "email ")]
    assert process_next_job(pool, lambda t, p: seen.append(t), queue="email ") is True
    assert seen == ["exact", "padded"]


def test_job_types_keep_their_trailing_spaces(backend, pool):
    enqueue_committed(backend, ("send ", None))
    seen = []
    assert process_next_job(pool, lambda t, p: seen.append(t)) is True
    assert seen == ["send "]


@pytest.mark.parametrize("option", ["queue", "job_type"])
def test_names_longer_than_255_characters_are_refused_before_any_statement(backend, option):
    long_name = "q" * 256
    conn = backend.connect()
    try:
        enqueue(conn, "before", None)
        kwargs = {"queue": long_name} if option == "queue" else {}
        job_type = long_name if option == "job_type" else "x"
        with pytest.raises(ConfigurationError, match=rf"{option} must be at most 255 characters"):
            enqueue(conn, job_type, None, **kwargs)
        conn.commit()  # the caller's transaction is intact: the first job commits
    finally:
        conn.close()
    assert backend.jobs() == [("before", 0, "default")]


def test_a_worker_for_a_too_long_queue_is_refused():
    with pytest.raises(ConfigurationError, match="queue must be at most 255 characters"):
        create_queue_worker(lambda: None, lambda t, p: None, queue="w" * 256)


def test_255_characters_of_four_bytes_each_round_trip(backend, pool):
    queue = "\N{SNAKE}" * 255  # 1,020 bytes: fits MySQL's VARCHAR(255) and pg_notify
    enqueue_committed(backend, ("wide", None), queue=queue)
    assert backend.jobs() == [("wide", 0, queue)]
    assert process_next_job(pool, lambda t, p: None, queue=queue) is True


def test_a_long_queue_name_never_aborts_the_callers_postgres_transaction(pg):
    with contextlib.closing(pg.connect()) as conn:
        with pytest.raises(ConfigurationError):
            enqueue(conn, "x", None, queue="n" * 10_000)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.rollback()
