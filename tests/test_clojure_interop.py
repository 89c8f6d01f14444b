"""A Python worker and Proletarian (Clojure) on the same tables, on both databases.

The real Proletarian is the oracle (tests/proletarian_oracle.py: ../shared/clojure-oracle,
Proletarian v1.0.109-alpha on a JVM). On each database one JVM call writes the rows these
tests use (`written_by_proletarian`): its `enqueue!` enqueues jobs that a Python worker
with `serializer=TransitSerializer()` and `job_type_style="keyword"` then runs, and its
worker runs jobs that Python enqueued with those options; each test writes the rows it
needs back as Proletarian wrote them. Without the oracle these tests skip, or fail under
PROLETARIAN_REQUIRE_CLOJURE_ORACLE=1 (CI).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from proletarian_oracle import (
    CLOJURE_EDN,
    FROM_PYTHON_QUEUE,
    KEYWORD_TYPES,
    PROLETARIAN_DEFAULT_QUEUE,
    PYTHON_PAYLOAD,
    Written,
    db_ids,
    jdbc_url,
    oracle,
    written_by_proletarian,
)

from proletarian_di import JobRouter, Workflow, enqueue, enqueue_many, process_next_job
from proletarian_di._common.checks import job_type_from_keyword, keyword_job_type
from proletarian_di._engine.options import worker_settings
from proletarian_di.errors import ConfigurationError
from proletarian_di.jobs import Job
from proletarian_di.schema import LATEST, schema_version, upgrade_schema
from proletarian_di.serializers import Keyword, TransitSerializer
from proletarian_di.testing import run_due_jobs

from backends import Backend, connection

pytestmark = pytest.mark.xdist_group("clojure")
"""One test process runs every test of the oracle, so that it writes `written_by_proletarian`'s
rows once per database."""

CLOJURE = {
    "serializer": TransitSerializer(),
    "job_type_style": "keyword",
    "queue": PROLETARIAN_DEFAULT_QUEUE,
}
"""The worker and enqueue options of a Python side that shares Proletarian's queue."""

CLOJURE_PAYLOAD = (
    '["^ ","~:email","ada@example.com","~:user-id",42,"~:kind","~:welcome",'
    '"~:plan","~:plan/pro","~:tags",["~#set",["new"]],"~:sent-at","~m1714979289123",'
    '"~:items",[["^ ","~:sku","a-1","~:qty",1],["^ ","^:","b-2","^;",2]]]'
)
"""What Proletarian writes for the payload of `CLOJURE_JOBS`' "send-email" (the last two
keys come from the write cache: `^:` and `^;` are its 11th and 12th codes)."""


@pytest.fixture
def proletarian(backend: Backend) -> Written:
    """The rows Proletarian wrote on this database (see `written_by_proletarian`); both
    tables empty."""
    return written_by_proletarian(backend)


def archived_rows(backend: Backend) -> list[tuple[Any, ...]]:
    return backend.query(
        f"SELECT job_id, queue, job_type, status, attempts FROM {backend.archived_job_table}"
    )


# Proletarian's rows, run by a Python worker ----------------------------------------------


def test_a_job_proletarian_enqueued_runs_on_a_python_worker(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    [job_id] = proletarian.restore(backend, "send-email")
    calls: list[tuple[str, Any]] = []

    outcome = process_next_job(pool, lambda t, p: calls.append((t, p)), **CLOJURE)  # type: ignore[arg-type]

    assert outcome is True
    assert calls == [("app.jobs/send-email", PYTHON_PAYLOAD)]
    payload = calls[0][1]
    assert all(type(key) is str for key in payload)
    assert type(payload["kind"]) is Keyword and payload["sent-at"].tzinfo is not None
    [(raw_id, queue, job_type, status, attempts)] = archived_rows(backend)
    assert db_ids(backend)(raw_id) == job_id
    assert (queue, job_type, status, attempts) == (
        PROLETARIAN_DEFAULT_QUEUE,
        ":app.jobs/send-email",
        "success",
        1,
    )


def test_proletarian_writes_the_payload_text_python_writes(proletarian: Written) -> None:
    row = proletarian.jobs[proletarian.ids["send-email"]]
    [enqueued] = [r for r in proletarian.of_kind("enqueued") if r["tag"] == "send-email"]

    assert row[3] == enqueued["payload_transit"] == CLOJURE_PAYLOAD
    assert TransitSerializer().encode(PYTHON_PAYLOAD) == CLOJURE_PAYLOAD


def test_an_advanced_handler_gets_the_keyword_type_and_the_queue_as_stored(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    [job_id] = proletarian.restore(backend, "send-email")
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
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    proletarian.restore(backend, "send-email", "charge")
    seen: list[tuple[str, Any]] = []
    router = JobRouter()
    router.register("app.jobs/send-email", lambda t, p: seen.append((t, p["email"])))
    router.register(":app.billing/charge", lambda t, p: seen.append((t, p["cents"])))

    assert run_due_jobs(pool, router, **CLOJURE) == 2  # type: ignore[arg-type]

    assert sorted(seen) == [("app.billing/charge", 995), ("app.jobs/send-email", "ada@example.com")]
    assert sorted(row[3] for row in archived_rows(backend)) == ["success", "success"]


def test_proletarians_default_queue_is_not_the_python_default(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    proletarian.restore(backend, "send-email")
    options = {key: value for key, value in CLOJURE.items() if key != "queue"}

    assert process_next_job(pool, lambda t, p: None, **options) is None  # type: ignore[arg-type]
    assert process_next_job(pool, lambda t, p: None, queue=":proletarian/default") is not None


def test_a_plain_style_worker_hands_over_the_stored_text(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    proletarian.restore(backend, "send-email")
    calls: list[str] = []

    process_next_job(
        pool,
        lambda t, p: calls.append(t),
        serializer=TransitSerializer(),
        queue=PROLETARIAN_DEFAULT_QUEUE,
    )

    assert calls == [":app.jobs/send-email"]


def test_a_keyword_worker_hands_over_a_type_stored_without_a_colon_as_stored(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    """Clojure's `enqueue!` given a string (or a producer without job_type_style="keyword")
    stores no colon: the keyword worker runs the job with the text unchanged."""
    proletarian.restore(backend, "string-type")
    calls: list[str] = []

    assert run_due_jobs(pool, lambda t, p: calls.append(t), **CLOJURE) == 1  # type: ignore[arg-type]

    assert calls == ["send_email"]


# Python's jobs, run by a Clojure worker ----------------------------------------------------


def test_python_enqueue_writes_the_row_proletarian_writes(
    backend: Backend, proletarian: Written
) -> None:
    with connection(backend) as conn:
        job_id = enqueue(conn, "app.jobs/send-email", PYTHON_PAYLOAD, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()
    proletarians = proletarian.jobs[proletarian.ids["send-email"]]

    [row] = backend.query(
        f"SELECT job_id, queue, job_type, payload, attempts, enqueued_at, process_at "
        f"FROM {backend.job_table}"
    )

    assert db_ids(backend)(row[0]) == job_id
    assert row[1:5] == proletarians[1:5]
    assert row[5] == row[6]
    moment = row[5] if row[5].tzinfo else row[5].replace(tzinfo=timezone.utc)
    assert abs(datetime.now(timezone.utc) - moment) < timedelta(minutes=1)


def test_a_clojure_worker_runs_the_jobs_python_enqueued(proletarian: Written) -> None:
    """Proletarian's worker polls, reads, runs and archives Python's jobs on proletarian-di's
    schema: the payload equal to what Clojure enqueues, the job type a keyword, each one
    of KEYWORD_TYPES too."""
    ran = {r["job_id"]: r for r in proletarian.of_kind("job") if r["queue"] == FROM_PYTHON_QUEUE}
    python_ids = [job_id for job_id in proletarian.archived if str(job_id) in ran]

    assert len(python_ids) == len(ran) == 1 + len(KEYWORD_TYPES)
    assert sorted(r["job_type"] for r in ran.values()) == sorted(
        [":app.jobs/send-email", *(":" + job_type for job_type in KEYWORD_TYPES)]
    )
    assert {r["job_type_class"] for r in ran.values()} == {"clojure.lang.Keyword"}
    assert all(r["expected_equal"] and r["attempts"] == 1 for r in ran.values())
    assert {proletarian.archived[job_id][7:8] for job_id in python_ids} == {(":success",)}
    logged = [r for r in proletarian.of_kind("log") if r["worker"] == "from-python"]
    assert logged and not any(r["exception"] for r in logged)


def test_enqueue_many_writes_keyword_types_too(backend: Backend, pool: Any) -> None:
    with connection(backend) as conn:
        ids = enqueue_many(
            conn,
            [("app.jobs/send-email", {"n": 1}), ("app.billing/charge", {"n": 2})],
            **CLOJURE,  # type: ignore[arg-type]
        )
        conn.commit()

    raw = {
        db_ids(backend)(row[0]): tuple(row[1:])
        for row in backend.query(
            f"SELECT job_id, queue, job_type, payload FROM {backend.job_table}"
        )
    }
    assert [raw[job_id] for job_id in ids] == [
        (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/send-email", '["^ ","~:n",1]'),
        (PROLETARIAN_DEFAULT_QUEUE, ":app.billing/charge", '["^ ","~:n",2]'),
    ]
    seen: list[tuple[str, Any]] = []
    assert run_due_jobs(pool, lambda t, p: seen.append((t, p)), **CLOJURE) == 2  # type: ignore[arg-type]
    assert sorted(seen) == [("app.billing/charge", {"n": 2}), ("app.jobs/send-email", {"n": 1})]


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
"""Proletarian's `get-next-job-sql` (db.clj), with JDBC's `?` as the drivers' `%s`: two of
them held open at once, which the oracle's worker does not let a test do."""


def test_with_the_clojure_poll_index_two_clojure_polls_take_two_jobs(
    backend: Backend, pool: Any, proletarian: Written
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
        proletarian.restore(backend, "send-email", "charge", "string-type")
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


def test_proletarians_own_tables_upgrade_with_its_jobs_in_them(backend: Backend) -> None:
    """Proletarian's own `tables.sql` (the oracle installs it) with a job its `enqueue!`
    wrote: `upgrade_schema` brings them to the current schema, times converted (MySQL's
    TIMESTAMP columns), and a Python worker runs the job at once."""
    schema = "clojure_own"
    tables = {"job_table": f"{schema}.job", "archived_job_table": f"{schema}.archived_job"}
    backend.will_create(schema)
    backend.drop_schema(schema)
    try:
        with jdbc_url(backend.url) as url:
            oracle().run(
                {"cmd": "install-schema", "url": url, "schema": schema},
                {
                    "cmd": "enqueue",
                    "url": url,
                    "job_table": tables["job_table"],
                    "jobs": [{"job_type": ":app.jobs/send-email", "payload": CLOJURE_EDN}],
                },
            )
        with connection(backend) as conn:
            before = schema_version(conn, **tables)
            upgrade_schema(conn, **tables)
            conn.commit()
            after = schema_version(conn, **tables)
        jobs: list[Job] = []
        ran = run_due_jobs(
            backend.connect, jobs.append, handler_fn_mode="advanced", **tables, **CLOJURE
        )  # type: ignore[arg-type]

        assert (before, after) == (1, LATEST[backend.name])
        assert ran == 1 and jobs[0].payload == PYTHON_PAYLOAD
        assert jobs[0].job_type == "app.jobs/send-email"
        assert abs(datetime.now(timezone.utc) - jobs[0].enqueued_at) < timedelta(minutes=1)
    finally:
        backend.drop_schema(schema)


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
        ("a//", ":a//"),
        ("really?", ":really?"),
        ("1st", ":1st"),
        ("1/a", ":1/a"),
        ("a/:b", ":a/:b"),
        ("a'b#c", ":a'b#c"),
        ("a\u00a0b", ":a\u00a0b"),
        ("a/b\u0085c", ":a/b\u0085c"),
        ("é/😀", ":é/😀"),
        ("x" * 254, ":" + "x" * 254),
    ],
)
def test_keyword_types_are_stored_with_a_colon_and_read_back(job_type: str, stored: str) -> None:
    assert keyword_job_type(job_type) == stored
    assert job_type_from_keyword(stored) == job_type


def test_a_stored_type_loses_one_colon_only() -> None:
    assert job_type_from_keyword("::app/doubled") == ":app/doubled"
    assert job_type_from_keyword("send_email") == "send_email"


@pytest.mark.parametrize(
    ("job_type", "message"),
    [
        (":app.jobs/send-email", "starts with ':'; .* give it without the colon"),
        ("app.jobs/1st", "a digit right after its last '/'"),
        ("a/b/2", "a digit right after its last '/'"),
        ("/a", "a misplaced ':' or '/'"),
        ("//", "a misplaced ':' or '/'"),
        ("send email", "the character ' '"),
        ("send\u3000email", r"the character '\\u3000'"),
        ("send\x1cemail", r"the character '\\x1c'"),
        ("send,email", "the character ','"),
        ("(send)", "the character '\\('"),
        ("send@home", "the character '@'"),
        ("send~", "the character '~'"),
        ("a::b", "a misplaced ':' or '/'"),
        ("send:", "a misplaced ':' or '/'"),
        ("app:/send", "a misplaced ':' or '/'"),
        ("app/", "a misplaced ':' or '/'"),
        ("a\u0085b/c", "a misplaced ':' or '/'"),
        ("x" * 255, "at most 255 characters"),
        ("", "non-empty string"),
    ],
)
def test_a_type_clojure_would_not_read_back_is_refused(job_type: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        keyword_job_type(job_type)


_ODD_CHARACTERS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x01\x7f\x85\xa0\u1680\u180e\u2007\u2008\u200b"
    "\u2028\u2029\u202f\u205f\u3000\ufeffé٣😀"
)
_PLACES = ("{c}", "a{c}", "{c}a", "a{c}b", "a/{c}", "{c}/a", "a/b{c}", "a{c}/b", "{c}{c}")
_NAMES = [
    *("", ":", "/", "//", "///", "a//", "a//b", "a/b/c", "a/b/", "app.jobs/1st", "/a", "/1"),
    *("a::b", "::a", "a:", "a:/b", "a/:b", "1/a", "a/1", "a/1b", "a/b1", "nil", "a/nil", "1st"),
    *("+1", "-1", ".5", "a.b/c.d", "a\x85b/c", "a/b\x85c", "x" * 254),
]


def keyword_candidates() -> list[str]:
    """Names to try as keyword job types: the names above, and every printable ASCII
    character and some odd others (Java's whitespace and not, controls, line terminators,
    digits of other scripts, a non-BMP character) at the start, the middle, the end, each
    side of a `/`, and doubled."""
    chars = [chr(i) for i in range(0x21, 0x7F)] + list(_ODD_CHARACTERS)
    return list(dict.fromkeys([*_NAMES, *(p.format(c=c) for c in chars for p in _PLACES)]))


def test_keyword_types_are_those_proletarians_edn_reader_reads_back() -> None:
    """Each of about 1,100 names, as `:name`, through the real `edn/read-string` (the
    oracle's EDN reader, then transit-clj writes what it read): keyword_job_type accepts
    exactly those that read back as the keyword whose text they are."""
    names = keyword_candidates()
    records = oracle().run({"cmd": "transit", "encode": [":" + name for name in names]})

    assert [r["edn"] for r in records] == [":" + name for name in names]
    read_back = {
        name: "transit" in r and json.loads(r["transit"]) == ["~#'", "~:" + name]
        for name, r in zip(names, records, strict=True)
    }
    assert sum(read_back.values()) > 500 and not all(read_back.values())
    assert {name: _accepted(name) for name in names} == read_back


def _accepted(job_type: str) -> bool:
    try:
        keyword_job_type(job_type)
    except ConfigurationError:
        return False
    return True


def test_enqueue_refuses_a_type_proletarian_cannot_read_before_writing(backend: Backend) -> None:
    """The issue's two: Proletarian's worker would fail to read them ("Invalid token")
    while it polls, and stop."""
    with connection(backend) as conn:
        for job_type in ("app.jobs/1st", "/a"):
            with pytest.raises(ConfigurationError, match="not the text of a Clojure keyword"):
                enqueue(conn, job_type, None, **CLOJURE)  # type: ignore[arg-type]
        conn.commit()
    assert backend.jobs() == []


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
