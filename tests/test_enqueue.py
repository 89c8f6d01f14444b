"""Enqueue: the outbox pattern, scheduling, ids, payloads and options."""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from proletarian_di import (
    ConfigurationError,
    PayloadError,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
)
from proletarian_di.job_ids import uuid7
from proletarian_di.schema import install_schema, schema_sql

from backends import as_uuid, enqueue_committed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)


def fixed_clock(at: datetime = T0):
    return lambda: at


def process_at_of(backend, job_id):
    strategy_value = job_id.bytes if backend.name == "mysql" else job_id
    (value,) = backend.query(
        f"SELECT process_at FROM {backend.job_table} WHERE job_id = %s", (strategy_value,)
    )[0]
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def test_enqueue_returns_uuid_and_stores_a_waiting_job(backend):
    (job_id,) = enqueue_committed(backend, ("send_email", {"email": "a@example.com"}))
    assert isinstance(job_id, uuid.UUID)
    assert backend.jobs() == [("send_email", 0, "default")]


def test_rollback_leaves_no_job(backend):
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "send_email", {"email": "a@example.com"})
        conn.rollback()
    assert backend.jobs() == []


def test_enqueue_never_commits(backend):
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "send_email", {"n": 1})
        assert backend.jobs() == [], "another connection must not see an uncommitted job"
        conn.commit()
    assert len(backend.jobs()) == 1


def test_job_commits_together_with_application_data(backend):
    backend.execute("DROP TABLE IF EXISTS proletarian.accounts")
    backend.execute("CREATE TABLE proletarian.accounts (email VARCHAR(100))")
    with contextlib.closing(backend.connect()) as conn:
        cur = conn.cursor()
        cur.execute("INSERT INTO proletarian.accounts VALUES (%s)", ("a@example.com",))
        enqueue(conn, "send_confirmation", {"email": "a@example.com"})
        conn.commit()
    assert backend.query("SELECT email FROM proletarian.accounts") == [("a@example.com",)]
    assert [j[0] for j in backend.jobs()] == ["send_confirmation"]


def test_process_in_schedules_later(backend):
    (job_id,) = enqueue_committed(
        backend, ("later", None), process_in=timedelta(minutes=5), clock=fixed_clock()
    )
    assert process_at_of(backend, job_id) == T0 + timedelta(minutes=5)


def test_negative_process_in_and_past_process_at_mean_now(backend):
    a, b = enqueue_committed(
        backend, ("a", None), process_in=timedelta(minutes=-5), clock=fixed_clock()
    ) + enqueue_committed(
        backend, ("b", None), process_at=T0 - timedelta(days=1), clock=fixed_clock()
    )
    assert process_at_of(backend, a) == T0
    assert process_at_of(backend, b) == T0


def test_process_at_wins_over_process_in(backend):
    (job_id,) = enqueue_committed(
        backend,
        ("x", None),
        process_at=T0 + timedelta(hours=1),
        process_in=timedelta(minutes=1),
        clock=fixed_clock(),
    )
    assert process_at_of(backend, job_id) == T0 + timedelta(hours=1)


def test_naive_or_mistyped_times_are_clear_errors_and_write_nothing(backend):
    naive = datetime(2030, 1, 1, 12, 0)
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match="timezone-aware"):
            enqueue(conn, "x", None, process_at=naive)
        with pytest.raises(ConfigurationError, match="timezone-aware"):
            enqueue_many(conn, [("a", 1), ("b", 2)], process_at=naive)
        with pytest.raises(ConfigurationError, match="process_at must be a datetime"):
            enqueue(conn, "a", 1, process_at="2030-01-01T12:00:00")
        with pytest.raises(ConfigurationError, match="process_in must be a timedelta"):
            enqueue(conn, "a", 1, process_in=5)
        enqueue(conn, "ok", 1, process_in=timedelta(seconds=-5))
        conn.commit()
    assert backend.jobs() == [("ok", 0, "default")]


def test_unserializable_payload_is_rejected_before_anything_is_written(backend):
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(PayloadError, match="not JSON-serializable"):
            enqueue(conn, "x", {"when": object()})
        conn.commit()
    assert backend.jobs() == []


@pytest.mark.parametrize("job_type", ["", None, 7])
def test_job_type_must_be_a_non_empty_string(backend, job_type):
    with (
        contextlib.closing(backend.connect()) as conn,
        pytest.raises(ConfigurationError, match="job_type"),
    ):
        enqueue(conn, job_type, None)


BAD_TABLE_NAMES = [
    "proletarian.job; DROP TABLE x",
    "proletarian.job; DROP TABLE proletarian.archived_job --",
    'proletarian."job"',
    "proletarian.job ",
    "a.b.c",
    "1job",
    "job-table",
    "",
    "proletarian.jöb",
    "proletarian.job)--",
]


def statements_sent(backend, conn):
    """A marker of the statements the server has seen on `conn`."""
    if backend.name == "mysql":
        cursor = conn.cursor()
        cursor.execute("SHOW SESSION STATUS LIKE 'Questions'")
        return int(cursor.fetchone()[1]) - 1
    return conn.info.transaction_status


@pytest.mark.parametrize("name", BAD_TABLE_NAMES)
def test_table_names_that_are_not_plain_identifiers_are_rejected_before_any_sql(
    backend, pool, name
):
    with contextlib.closing(backend.connect()) as conn:
        before = statements_sent(backend, conn)
        with pytest.raises(ConfigurationError, match="plain identifier"):
            enqueue(conn, "x", 1, job_table=name)
        with pytest.raises(ValueError, match="plain identifier"):
            enqueue_many(conn, [("x", 1)], job_table=name)
        with pytest.raises(ValueError, match="plain identifier"):
            install_schema(conn, name)
        after = statements_sent(backend, conn)
        if backend.name == "postgresql":
            assert before == after == psycopg.pq.TransactionStatus.IDLE
        else:
            assert after == before + 1
    with pytest.raises(ValueError, match="plain identifier"):
        schema_sql(backend.name, name)
    with pytest.raises(ValueError, match="plain identifier"):
        create_queue_worker(pool, lambda t, p: None, archived_job_table=name)
    assert backend.jobs() == []
    assert backend.archived() == []


def test_enqueue_many_returns_ids_in_order_and_respects_the_transaction(backend, pool):
    jobs = [("reindex", {"id": n}) for n in range(25)]
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, jobs, queue="bulk")
        conn.rollback()
    assert len(ids) == 25 and len(set(ids)) == 25
    assert backend.jobs() == []
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, jobs, queue="bulk")
        conn.commit()
    seen = []
    while process_next_job(
        pool, lambda job: seen.append(job.job_id), queue="bulk", handler_fn_mode="advanced"
    ):
        pass
    assert sorted(seen) == sorted(ids)


def test_enqueue_many_checks_every_payload_first(backend):
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(PayloadError):
            enqueue_many(conn, [("ok", 1), ("bad", {1, 2})])
        conn.commit()
    assert backend.jobs() == []


def test_custom_serializer_round_trips(backend, pool):
    class Reversed:
        def encode(self, payload):
            return payload[::-1]

        def decode(self, text):
            return text[::-1]

    enqueue_committed(backend, ("x", "hello"), serializer=Reversed())
    assert backend.query(f"SELECT payload FROM {backend.job_table}") == [("olleh",)]
    seen = []
    process_next_job(pool, lambda t, p: seen.append(p), serializer=Reversed())
    assert seen == ["hello"]


def test_utf8_payloads_survive(backend, pool):
    payload = {"name": "Ærøskøbing ✓ 日本 🎉"}
    enqueue_committed(backend, ("x", payload))
    seen = []
    process_next_job(pool, lambda t, p: seen.append(p))
    assert seen == [payload]


@pytest.mark.parametrize("returned", ["bad \udc80 text", b"bytes", None])
def test_a_custom_serializers_output_that_cannot_be_sent_is_a_payload_error(backend, returned):
    class Broken:
        def encode(self, payload):
            return returned

        def decode(self, text):
            return text

    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(PayloadError, match=r"serializer .* (lone surrogate|encode to a str)"):
            enqueue(conn, "x", 1, serializer=Broken())
        with pytest.raises(PayloadError, match="serializer"):
            enqueue_many(conn, [("x", 1)], serializer=Broken())
        enqueue(conn, "after", 1)
        conn.commit()
    assert backend.jobs() == [("after", 0, "default")]


def max_allowed_packet(conn):
    cursor = conn.cursor()
    cursor.execute("SELECT @@SESSION.max_allowed_packet")
    return cursor.fetchone()[0]


def test_mysql_a_payload_past_max_allowed_packet_is_an_error_and_the_transaction_goes_on(
    mysql_backend,
):
    """The server drops the connection on a statement of max_allowed_packet bytes or more
    (error 1153), taking the caller's transaction with it: it is refused before it is sent."""
    mysql_backend.reset()
    with contextlib.closing(mysql_backend.connect()) as conn:
        limit = max_allowed_packet(conn)
        earlier = enqueue(conn, "earlier", {"n": 1})
        too_big = "x" * limit
        message = rf"would be a \d+-byte packet, and max_allowed_packet is {limit}"
        with pytest.raises(PayloadError, match=f"max_allowed_packet is {limit}"):
            enqueue(conn, "big", too_big)
        with pytest.raises(PayloadError, match="max_allowed_packet"):
            enqueue(conn, "big", too_big, unique_key="big")
        with pytest.raises(PayloadError, match=message):
            enqueue_many(conn, [("small", 1), ("big", too_big)])
        assert max_allowed_packet(conn) == limit, "the connection is alive"
        conn.commit()
    assert [
        as_uuid(row[0])
        for row in mysql_backend.query(f"SELECT job_id FROM {mysql_backend.job_table}")
    ] == [earlier]


def test_mysql_the_largest_payload_that_fits_max_allowed_packet_is_enqueued(mysql_backend):
    """The count is the server's: a packet one byte under max_allowed_packet is taken, on
    its own and in a batch; one more byte is refused."""
    mysql_backend.reset()
    with contextlib.closing(mysql_backend.connect()) as conn:
        limit = max_allowed_packet(conn)
        with pytest.raises(PayloadError) as raised:
            enqueue(conn, "near", "y" * limit)
        size = int(re.search(r"(\d+)-byte packet", str(raised.value)).group(1))
        fits = "y" * (limit - (size - (limit - 1)))
        ids = [enqueue(conn, "near", fits), *enqueue_many(conn, [("near", fits), ("b", 1)])]
        with pytest.raises(PayloadError, match=f"would be a {limit}-byte packet"):
            enqueue(conn, "near", fits + "y")
        conn.commit()
    stored = mysql_backend.query(f"SELECT job_id, LENGTH(payload) FROM {mysql_backend.job_table}")
    assert {as_uuid(job_id) for job_id, _ in stored} == set(ids)
    assert sorted(length for _, length in stored) == [1, len(fits) + 2, len(fits) + 2]


def test_job_ids_made_in_one_millisecond_keep_their_order() -> None:
    """UUIDv7 ids from four threads at once: all distinct, every thread's in the order it
    made them (most share a millisecond), version 7 with the RFC's variant."""
    made: dict[int, list[uuid.UUID]] = {}

    def make(n: int) -> None:
        made[n] = [uuid7() for _ in range(20_000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for ids in made.values() for job_id in ids]
    assert len(set(every)) == len(every) == 80_000
    assert all(ids == sorted(ids) for ids in made.values())
    assert {(i.version, i.variant) for i in every} == {(7, uuid.RFC_4122)}
    assert len({i.int >> 80 for i in every}) < len(every) / 10  # many in one millisecond
