"""A Python worker and Proletarian (Clojure) on the same tables, on both databases.

Rows are written here exactly as Proletarian's `proletarian.job/enqueue!` writes them
(`db/enqueue!`: the seven columns, `(str queue)`, `(str job-type)`, the Transit payload,
attempts 0, enqueued_at = process_at = now, and on MySQL the `mysql-uuid-strategy`'s
16 bytes), and run by a Python worker with `serializer=TransitSerializer()` and
`job_type_style="keyword"`; jobs enqueued from Python with those options are read back
from their row as a Clojure worker reads it. transit-js (see test_transit.py) checks the
payload texts; without it those tests skip, or fail when CI is set.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_transit import Oracle, canonical, oracle_process

from proletarian_di import JobRouter, Workflow, enqueue, enqueue_many, process_next_job
from proletarian_di._common.checks import job_type_from_keyword, keyword_job_type
from proletarian_di._engine.options import worker_settings
from proletarian_di.errors import ConfigurationError
from proletarian_di.jobs import Job
from proletarian_di.schema import LATEST, schema_version
from proletarian_di.serializers import Keyword, TransitSerializer
from proletarian_di.testing import run_due_jobs

from backends import Backend, connection

PROLETARIAN_DEFAULT_QUEUE = ":proletarian/default"
CLOJURE = {
    "serializer": TransitSerializer(),
    "job_type_style": "keyword",
    "queue": PROLETARIAN_DEFAULT_QUEUE,
}
"""The worker and enqueue options of a Python side that shares Proletarian's queue."""

SENT_AT = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
CLOJURE_PAYLOAD = (
    '["^ ","~:email","ada@example.com","~:user-id",42,"~:kind","~:welcome",'
    '"~:plan","~:plan/pro","~:tags",["~#set",["new"]],"~:sent-at","~m1714979289123",'
    '"~:items",[["^ ","~:sku","a-1","~:qty",1],["^ ","^:","b-2","^;",2]]]'
)
"""What transit-clj writes for
`{:email "ada@example.com" :user-id 42 :kind :welcome :plan :plan/pro :tags #{"new"}
  :sent-at #inst "2024-05-06T07:08:09.123Z" :items [{:sku "a-1" :qty 1} {:sku "b-2" :qty 2}]}`
(the last two keys come from the write cache: `^:` and `^;` are its 11th and 12th codes)."""

PYTHON_PAYLOAD = {
    "email": "ada@example.com",
    "user-id": 42,
    "kind": Keyword("welcome"),
    "plan": Keyword("plan/pro"),
    "tags": frozenset({"new"}),
    "sent-at": SENT_AT,
    "items": [{"sku": "a-1", "qty": 1}, {"sku": "b-2", "qty": 2}],
}
"""The same payload as a handler gets it, and as Python enqueues it."""


def _kw(text: str) -> dict[str, str]:
    return {"t": "kw", "v": text}


def _map(**entries: dict[str, Any]) -> dict[str, Any]:
    """A map with keyword keys (`user_id` is `:user-id`), as transit-js describes it."""
    return {
        "t": "map",
        "v": [[_kw(key.replace("_", "-")), value] for key, value in entries.items()],
    }


def _str(text: str) -> dict[str, str]:
    return {"t": "str", "v": text}


def _num(n: int) -> dict[str, Any]:
    return {"t": "num", "v": n}


CLOJURE_DESCRIPTION = _map(
    email=_str("ada@example.com"),
    user_id=_num(42),
    kind=_kw("welcome"),
    plan=_kw("plan/pro"),
    tags={"t": "set", "v": [_str("new")]},
    sent_at={"t": "inst", "v": "1714979289123"},
    items={
        "t": "vec",
        "v": [_map(sku=_str("a-1"), qty=_num(1)), _map(sku=_str("b-2"), qty=_num(2))],
    },
)
"""The payload as transit-js describes it: the map a Clojure handler gets (keyword keys,
keyword values, a set, an instant, a vector of maps)."""


def mysql_uuid_strategy_bytes(job_id: uuid.UUID) -> bytes:
    """Proletarian's `->mysql-uuid-strategy` encode-id: `ByteBuffer.putLong(msb).putLong(lsb)`."""
    msb, lsb = job_id.int >> 64, job_id.int & (2**64 - 1)
    return struct.pack(">qq", *(part - 2**64 if part >= 2**63 else part for part in (msb, lsb)))


def proletarian_enqueue(
    backend: Backend, job_type: str, payload_text: str, queue: str = PROLETARIAN_DEFAULT_QUEUE
) -> uuid.UUID:
    """Insert a job as Proletarian's `enqueue!` does: a random UUID, `(str queue)`,
    `(str job-type)`, the serializer's text, attempts 0, and now (UTC, to the millisecond,
    as an `Instant` through a UTC calendar) for both times."""
    job_id = uuid.uuid4()
    now = datetime.now(timezone.utc)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if backend.name == "mysql":
        raw_id: Any = mysql_uuid_strategy_bytes(job_id)
        moment: Any = now.replace(tzinfo=None)
    else:
        raw_id, moment = job_id, now
    backend.execute(
        f"INSERT INTO {backend.job_table} "
        "(job_id, queue, job_type, payload, attempts, enqueued_at, process_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (raw_id, queue, job_type, payload_text, 0, moment, moment),
    )
    return job_id


def as_job_id(backend: Backend, raw: Any) -> uuid.UUID:
    """A job_id column's value as Proletarian's strategy for the database decodes it."""
    if backend.name == "mysql":
        msb, lsb = struct.unpack(">qq", bytes(raw))
        return uuid.UUID(int=((msb % 2**64) << 64) | (lsb % 2**64))
    assert isinstance(raw, uuid.UUID)
    return raw


def job_row(backend: Backend, job_id: uuid.UUID) -> tuple[Any, ...]:
    """The seven columns Proletarian reads, of a waiting job."""
    raw = job_id.bytes if backend.name == "mysql" else job_id
    rows = backend.query(
        "SELECT job_id, queue, job_type, payload, attempts, enqueued_at, process_at "
        f"FROM {backend.job_table} WHERE job_id = %s",
        (raw,),
    )
    assert len(rows) == 1, rows
    return rows[0]


def archived_rows(backend: Backend) -> list[tuple[Any, ...]]:
    return backend.query(
        f"SELECT job_id, queue, job_type, status, attempts FROM {backend.archived_job_table}"
    )


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with oracle_process() as process:
        yield process


# Proletarian's rows, run by a Python worker ----------------------------------------------


def test_a_job_proletarian_enqueued_runs_on_a_python_worker(backend: Backend, pool: Any) -> None:
    job_id = proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
    calls: list[tuple[str, Any]] = []

    outcome = process_next_job(pool, lambda t, p: calls.append((t, p)), **CLOJURE)  # type: ignore[arg-type]

    assert outcome is True
    assert calls == [("app.jobs/send-email", PYTHON_PAYLOAD)]
    payload = calls[0][1]
    assert all(type(key) is str for key in payload)
    assert type(payload["kind"]) is Keyword and payload["sent-at"].tzinfo is not None
    [(raw_id, queue, job_type, status, attempts)] = archived_rows(backend)
    assert as_job_id(backend, raw_id) == job_id
    assert (queue, job_type, status, attempts) == (
        PROLETARIAN_DEFAULT_QUEUE,
        ":app.jobs/send-email",
        "success",
        1,
    )


def test_an_advanced_handler_gets_the_keyword_type_and_the_queue_as_stored(
    backend: Backend, pool: Any
) -> None:
    job_id = proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
    jobs: list[Job] = []

    ran = run_due_jobs(pool, jobs.append, handler_fn_mode="advanced", **CLOJURE)  # type: ignore[arg-type]

    assert ran == 1
    [job] = jobs
    assert (job.job_id, job.job_type, job.queue, job.attempts) == (
        job_id,
        "app.jobs/send-email",
        PROLETARIAN_DEFAULT_QUEUE,
        1,
    )
    assert job.payload == PYTHON_PAYLOAD


def test_a_router_routes_keyword_types_registered_in_either_spelling(
    backend: Backend, pool: Any
) -> None:
    proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
    proletarian_enqueue(backend, ":app.billing/charge", '["^ ","~:cents",995]')
    seen: list[tuple[str, Any]] = []
    router = JobRouter()
    router.register("app.jobs/send-email", lambda t, p: seen.append((t, p["email"])))
    router.register(":app.billing/charge", lambda t, p: seen.append((t, p["cents"])))

    assert run_due_jobs(pool, router, **CLOJURE) == 2  # type: ignore[arg-type]

    assert sorted(seen) == [("app.billing/charge", 995), ("app.jobs/send-email", "ada@example.com")]
    assert sorted(row[3] for row in archived_rows(backend)) == ["success", "success"]


def test_proletarians_default_queue_is_not_the_python_default(backend: Backend, pool: Any) -> None:
    proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
    options = {key: value for key, value in CLOJURE.items() if key != "queue"}

    assert process_next_job(pool, lambda t, p: None, **options) is None  # type: ignore[arg-type]
    assert process_next_job(pool, lambda t, p: None, queue=":proletarian/default") is not None


def test_a_plain_style_worker_hands_over_the_stored_text(backend: Backend, pool: Any) -> None:
    proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
    calls: list[str] = []

    process_next_job(
        pool,
        lambda t, p: calls.append(t),
        serializer=TransitSerializer(),
        queue=PROLETARIAN_DEFAULT_QUEUE,
    )

    assert calls == [":app.jobs/send-email"]


def test_a_keyword_worker_hands_over_a_type_stored_without_a_colon_as_stored(
    backend: Backend, pool: Any
) -> None:
    """A producer without job_type_style="keyword" (or Clojure's `enqueue!` given a
    string) stores no colon: the keyword worker runs the job with the text unchanged."""
    proletarian_enqueue(backend, "send_email", CLOJURE_PAYLOAD)
    proletarian_enqueue(backend, "::app/doubled", CLOJURE_PAYLOAD)
    calls: list[str] = []

    assert run_due_jobs(pool, lambda t, p: calls.append(t), **CLOJURE) == 2  # type: ignore[arg-type]

    assert sorted(calls) == [":app/doubled", "send_email"]


# Python's jobs, as Proletarian reads them ------------------------------------------------


def test_python_enqueue_writes_the_row_proletarian_writes(backend: Backend) -> None:
    with connection(backend) as conn:
        job_id = enqueue(conn, "app.jobs/send-email", PYTHON_PAYLOAD, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()

    raw_id, queue, job_type, payload, attempts, enqueued_at, process_at = job_row(backend, job_id)

    assert as_job_id(backend, raw_id) == job_id
    if backend.name == "mysql":
        assert bytes(raw_id) == mysql_uuid_strategy_bytes(job_id)
    assert (queue, job_type, attempts) == (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/send-email", 0)
    assert payload == CLOJURE_PAYLOAD
    assert enqueued_at == process_at
    moment = enqueued_at if enqueued_at.tzinfo else enqueued_at.replace(tzinfo=timezone.utc)
    assert abs(datetime.now(timezone.utc) - moment) < timedelta(minutes=1)


def test_enqueue_many_writes_keyword_types_too(backend: Backend, pool: Any) -> None:
    with connection(backend) as conn:
        ids = enqueue_many(
            conn,
            [("app.jobs/send-email", {"n": 1}), ("app.billing/charge", {"n": 2})],
            **CLOJURE,  # type: ignore[arg-type]
        )
        conn.commit()

    assert [job_row(backend, job_id)[1:4] for job_id in ids] == [
        (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/send-email", '["^ ","~:n",1]'),
        (PROLETARIAN_DEFAULT_QUEUE, ":app.billing/charge", '["^ ","~:n",2]'),
    ]
    seen: list[tuple[str, Any]] = []
    assert run_due_jobs(pool, lambda t, p: seen.append((t, p)), **CLOJURE) == 2  # type: ignore[arg-type]
    assert sorted(seen) == [("app.billing/charge", {"n": 2}), ("app.jobs/send-email", {"n": 1})]


def test_transit_js_reads_the_python_payload_as_a_clojure_worker_would(
    backend: Backend, oracle: Oracle
) -> None:
    with connection(backend) as conn:
        job_id = enqueue(conn, "app.jobs/send-email", PYTHON_PAYLOAD, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()

    payload = job_row(backend, job_id)[3]

    assert canonical(oracle.decode(payload)) == canonical(CLOJURE_DESCRIPTION)


def test_transit_js_writes_the_clojure_payload_text_byte_for_byte(oracle: Oracle) -> None:
    assert oracle.encode(CLOJURE_DESCRIPTION) == CLOJURE_PAYLOAD


def test_a_workflows_jobs_take_the_keyword_style_too(backend: Backend, pool: Any) -> None:
    flow = Workflow("signup")
    account = flow.add("app.jobs/create-account", {"n": 1}, **CLOJURE)  # type: ignore[arg-type]
    flow.add("app.jobs/send-email", {"n": 2}, after=[account], **CLOJURE)  # type: ignore[arg-type]
    with connection(backend) as conn:
        flow.enqueue(conn)
        conn.commit()

    stored = backend.query(f"SELECT queue, job_type FROM {backend.job_table} ORDER BY job_type")
    assert [tuple(row) for row in stored] == [
        (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/create-account"),
        (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/send-email"),
    ]
    seen: list[str] = []
    assert run_due_jobs(pool, lambda t, p: seen.append(t), **CLOJURE) == 2  # type: ignore[arg-type]
    assert seen == ["app.jobs/create-account", "app.jobs/send-email"]


# Proletarian's poll on proletarian-di's schema -------------------------------------------

PROLETARIAN_POLL = (
    "SELECT job_id, queue, job_type, payload, attempts, enqueued_at, process_at FROM {table} "
    "WHERE queue = %s AND process_at <= %s ORDER BY process_at ASC LIMIT 1 "
    "FOR UPDATE SKIP LOCKED"
)
"""Proletarian's `get-next-job-sql`, with JDBC's `?` as the drivers' `%s`."""


def test_proletarians_worker_statements_run_on_proletarian_dis_schema(backend: Backend) -> None:
    """A Clojure worker's poll, retry, archive and delete (db.clj), on the current schema,
    for a job Python enqueued: the columns proletarian-di added all have defaults."""
    with connection(backend) as conn:
        job_id = enqueue(conn, "app.jobs/send-email", PYTHON_PAYLOAD, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()
    raw_id = job_id.bytes if backend.name == "mysql" else job_id

    def moment(delta: timedelta) -> Any:
        at = datetime.now(timezone.utc) + delta
        return at.replace(tzinfo=None) if backend.name == "mysql" else at

    table, archive = backend.job_table, backend.archived_job_table
    with connection(backend) as conn, conn.cursor() as cursor:
        cursor.execute(
            PROLETARIAN_POLL.format(table=table), (PROLETARIAN_DEFAULT_QUEUE, moment(timedelta()))
        )
        [row] = cursor.fetchall()
        assert (as_job_id(backend, row[0]), row[2], row[4]) == (job_id, ":app.jobs/send-email", 0)
        cursor.execute(
            f"UPDATE {table} SET process_at = %s, attempts = attempts + 1 WHERE job_id = %s",
            (moment(timedelta(seconds=-1)), raw_id),
        )
        cursor.execute(
            f"INSERT INTO {archive} (job_id, queue, job_type, payload, attempts, status, "
            "enqueued_at, process_at, finished_at) "
            "SELECT job_id, queue, job_type, payload, attempts + 1, %s, enqueued_at, "
            f"process_at, %s FROM {table} WHERE job_id = %s",
            (":success", moment(timedelta()), raw_id),
        )
        cursor.execute(f"DELETE FROM {table} WHERE job_id = %s", (raw_id,))
        conn.commit()

    assert backend.jobs() == []
    [(archived_id, queue, job_type, status, attempts)] = archived_rows(backend)
    assert as_job_id(backend, archived_id) == job_id
    assert (queue, job_type, status, attempts) == (
        PROLETARIAN_DEFAULT_QUEUE,
        ":app.jobs/send-email",
        ":success",
        2,
    )


def test_with_the_clojure_poll_index_two_clojure_polls_take_two_jobs(
    backend: Backend, pool: Any
) -> None:
    """docs/clojure.md's index for Clojure workers: each poll locks only the job it takes,
    and proletarian-di's schema check and workers do not mind it."""
    drop = (
        f"DROP INDEX job_clojure_poll ON {backend.job_table}"
        if backend.name == "mysql"
        else f"DROP INDEX {backend.job_table.rpartition('.')[0]}.job_clojure_poll"
    )
    backend.execute(f"CREATE INDEX job_clojure_poll ON {backend.job_table} (queue, process_at)")
    try:
        for _ in range(3):
            proletarian_enqueue(backend, ":app.jobs/send-email", CLOJURE_PAYLOAD)
        now = datetime.now(timezone.utc) + timedelta(seconds=1)
        param = now.replace(tzinfo=None) if backend.name == "mysql" else now
        sql = PROLETARIAN_POLL.format(table=backend.job_table)
        first, second = backend.connect(), backend.connect()
        try:
            taken = []
            for conn in (first, second):
                with conn.cursor() as cursor:
                    cursor.execute(sql, (PROLETARIAN_DEFAULT_QUEUE, param))
                    taken.append(cursor.fetchall())
            assert [len(rows) for rows in taken] == [1, 1]
            assert taken[0][0][0] != taken[1][0][0]
        finally:
            for conn in (first, second):
                conn.rollback()
                conn.close()
        with connection(backend) as conn:
            assert schema_version(conn) == LATEST[backend.name]
        assert run_due_jobs(pool, lambda t, p: None, **CLOJURE) == 3  # type: ignore[arg-type]
    finally:
        backend.execute(drop)


# The option and its checks ---------------------------------------------------------------


@pytest.mark.parametrize("style", ["Keyword", "keywords", "clojure", "", 1, True])
def test_a_bad_job_type_style_is_refused_naming_it(style: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"job_type_style must be 'plain' or 'keyword'"):
        worker_settings(job_type_style=style)
    with pytest.raises(ConfigurationError, match=re.escape(f"got {style!r}")):
        worker_settings(job_type_style=style)


def test_enqueue_refuses_a_bad_job_type_style_before_writing(backend: Backend) -> None:
    with connection(backend) as conn:
        for style in ("Keyword", None):
            with pytest.raises(ConfigurationError, match=f"job_type_style .* got {style!r}"):
                enqueue(conn, "x", None, job_type_style=style)  # type: ignore[arg-type]
        conn.commit()
    assert backend.jobs() == []


def test_the_styles_default_is_plain() -> None:
    assert worker_settings().job_type_style == "plain"
    assert worker_settings(job_type_style=None).job_type_style == "plain"
    assert worker_settings().handed_job_type(":a/b") == ":a/b"
    assert worker_settings(job_type_style="keyword").handed_job_type(":a/b") == "a/b"


@pytest.mark.parametrize(
    ("job_type", "stored"),
    [
        ("app.jobs/send-email", ":app.jobs/send-email"),
        ("send_email", ":send_email"),
        ("proletarian/default", ":proletarian/default"),
        ("a/b/c", ":a/b/c"),
        ("/", ":/"),
        ("really?", ":really?"),
        ("x" * 254, ":" + "x" * 254),
    ],
)
def test_keyword_types_are_stored_with_a_colon_and_read_back(job_type: str, stored: str) -> None:
    assert keyword_job_type(job_type) == stored
    assert job_type_from_keyword(stored) == job_type


@pytest.mark.parametrize(
    ("job_type", "message"),
    [
        (":app.jobs/send-email", "starts with ':'; .* give it without the colon"),
        ("send email", "the character ' '"),
        ("send,email", "the character ','"),
        ("(send)", "the character '\\('"),
        ("a::b", "a misplaced ':' or '/'"),
        ("send:", "a misplaced ':' or '/'"),
        ("app:/send", "a misplaced ':' or '/'"),
        ("app/", "a misplaced ':' or '/'"),
        ("x" * 255, "at most 255 characters"),
    ],
)
def test_a_type_clojure_would_not_read_back_is_refused(job_type: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        keyword_job_type(job_type)


def test_enqueue_refuses_a_type_with_a_colon_under_keyword_style(backend: Backend) -> None:
    with connection(backend) as conn:
        with pytest.raises(ConfigurationError, match="without the colon"):
            enqueue(conn, ":app.jobs/send-email", None, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()
    assert backend.jobs() == []


def test_a_router_keys_both_spellings_as_one_job_type() -> None:
    router = JobRouter()
    router.register(":app.jobs/send-email", lambda t, p: ("sent", t))

    assert "app.jobs/send-email" in router and ":app.jobs/send-email" in router
    assert router("app.jobs/send-email", None) == ("sent", "app.jobs/send-email")
    assert router(":app.jobs/send-email", None) == ("sent", ":app.jobs/send-email")
    assert router.job_types == ("app.jobs/send-email",)
    with pytest.raises(ConfigurationError, match="already has a handler"):
        router.register("app.jobs/send-email", lambda t, p: None)
    with pytest.raises(ConfigurationError, match="non-empty string"):
        router.register(":", lambda t, p: None)
    assert 42 not in router
