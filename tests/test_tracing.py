"""OpenTelemetry traces: the trace context kept at enqueue, and a span per job run in the
enqueuer's trace (`proletarian_di.contrib.opentelemetry`), on both databases."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proletarian_di import (
    Cancel,
    RetrySpec,
    SchemaError,
    Snooze,
    create_queue_worker,
    enqueue,
    enqueue_async,
    enqueue_many,
    process_next_job,
)
from proletarian_di._store.dialects import MySQLDialect, PostgresDialect
from proletarian_di.contrib.opentelemetry import TracingObserver, tracing
from proletarian_di.schema import MIGRATIONS, schema_version, statements, upgrade_schema
from proletarian_di.testing import run_due_jobs

from backends import Backend, connection, wait_until


class Traces:
    """A test's own tracer provider, exporting finished spans to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def observer(self) -> TracingObserver:
        return TracingObserver(self.provider)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span


@pytest.fixture
def traces() -> Iterator[Traces]:
    traced = Traces()
    yield traced
    traced.provider.shutdown()


def enqueue_in_span(
    backend: Backend, traces: Traces, *jobs: tuple[str, Any], **options: Any
) -> tuple[trace.SpanContext, list[uuid.UUID]]:
    """Enqueue and commit inside a span of the test's tracer: (its context, the job ids)."""
    with traces.tracer.start_as_current_span("request") as span, connection(backend) as conn:
        ids = [enqueue(conn, job_type, payload, **options) for job_type, payload in jobs]
        conn.commit()
    return span.get_span_context(), ids


def stored_contexts(backend: Backend) -> list[str | None]:
    return [row[0] for row in backend.query(f"SELECT trace_context FROM {backend.job_table}")]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_job_enqueued_in_a_span_runs_in_a_child_span_of_it(backend, pool, traces):
    request, (job_id,) = enqueue_in_span(backend, traces, ("send_email", {"to": "a"}), queue="mail")
    (stored,) = stored_contexts(backend)
    assert stored is not None
    assert json.loads(stored)["traceparent"].split("-")[1] == format(request.trace_id, "032x")
    seen: list[str | None] = []

    def handler(job: Any) -> None:
        seen.append(job.trace_context)

    observers = [traces.observer()]
    ran = run_due_jobs(pool, handler, queue="mail", handler_fn_mode="advanced", observers=observers)

    assert ran == 1
    assert seen == [stored]
    span = traces.one("process send_email")
    assert span.kind is SpanKind.CONSUMER
    assert span.context.trace_id == request.trace_id
    assert span.parent is not None and span.parent.span_id == request.span_id
    assert [link.context.span_id for link in span.links] == [request.span_id]
    assert attributes(span) == {
        "messaging.system": "proletarian",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(job_id),
        "proletarian.job_type": "send_email",
        "proletarian.attempt": 1,
        "proletarian.outcome": "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()


def test_a_failing_attempt_records_its_exception_and_a_retry_has_a_span_of_its_own(
    backend, pool, traces
):
    request, _ = enqueue_in_span(backend, traces, ("flaky", None))

    def handler(job_type: str, payload: Any) -> None:
        raise RuntimeError("boom")

    ran = run_due_jobs(
        pool,
        handler,
        retry_strategy_fn=lambda job, exc: RetrySpec(retries=1),
        observers=[tracing(traces.provider)],
    )

    assert ran == 2
    spans = sorted(
        traces.named("process flaky"), key=lambda s: attributes(s)["proletarian.attempt"]
    )
    assert [attributes(s)["proletarian.attempt"] for s in spans] == [1, 2]
    for span in spans:
        assert span.context.trace_id == request.trace_id
        assert span.parent is not None and span.parent.span_id == request.span_id
        assert attributes(span)["proletarian.outcome"] == "failed"
        assert attributes(span)["error.type"] == "RuntimeError"
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "RuntimeError: boom"
        (event,) = span.events
        assert event.name == "exception"
        assert dict(event.attributes or {})["exception.type"] == "RuntimeError"
        assert dict(event.attributes or {})["exception.message"] == "boom"
    assert backend.archived() == [("flaky", "failure", 2)]


def test_a_snooze_and_a_cancel_end_their_spans_with_their_outcome_not_as_errors(
    backend, pool, traces
):
    enqueue_in_span(backend, traces, ("nap", None), ("drop", None))
    naps = []

    def handler(job_type: str, payload: Any) -> Any:
        if job_type == "drop":
            raise Cancel("not wanted")
        naps.append(1)
        return Snooze(0) if len(naps) == 1 else None

    assert run_due_jobs(pool, handler, observers=[tracing(traces.provider)]) == 3
    outcomes = sorted(
        (
            span.name,
            attributes(span)["proletarian.outcome"],
            attributes(span).get("proletarian.reason"),
        )
        for span in traces.spans()
        if span.name.startswith("process ")
    )
    assert outcomes == [
        ("process drop", "cancelled", "not wanted"),
        ("process nap", "snoozed", "snoozed for 0 ms"),
        ("process nap", "succeeded", None),
    ]
    for span in traces.spans():
        assert span.status.status_code is not StatusCode.ERROR and not span.events


def test_a_job_enqueued_outside_a_span_stores_nothing_and_starts_its_own_trace(
    backend, pool, traces
):
    with connection(backend) as conn:
        enqueue(conn, "plain", None)
        conn.commit()
    assert stored_contexts(backend) == [None]

    with traces.tracer.start_as_current_span("test runner") as runner:
        assert run_due_jobs(pool, lambda t, p: None, observers=[traces.observer()]) == 1

    span = traces.one("process plain")
    assert span.parent is None, "a root span, not a child of whatever the runner's thread holds"
    assert span.context.trace_id != runner.get_span_context().trace_id
    assert span.links == ()
    assert attributes(span)["proletarian.outcome"] == "succeeded"


@pytest.mark.parametrize(
    "garbled",
    ["{not json", "[1, 2]", '{"traceparent": 7}', '{"traceparent": "00-zz-yy-01"}', ""],
)
def test_a_garbled_stored_trace_context_is_ignored_and_the_job_runs(backend, pool, traces, garbled):
    _, (job_id,) = enqueue_in_span(backend, traces, ("garbled", 1))
    raw = job_id.bytes if backend.name == "mysql" else job_id
    backend.execute(
        f"UPDATE {backend.job_table} SET trace_context = %s WHERE job_id = %s", (garbled, raw)
    )
    ran: list[Any] = []

    assert run_due_jobs(pool, lambda t, p: ran.append(p), observers=[traces.observer()]) == 1

    assert ran == [1]
    span = traces.one("process garbled")
    assert span.parent is None
    assert attributes(span)["proletarian.outcome"] == "succeeded"
    assert backend.archived() == [("garbled", "success", 1)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_spans_the_handler_starts_are_children_of_the_jobs_span(backend, pool, traces, kind):
    request, _ = enqueue_in_span(backend, traces, ("nested", None))

    def handler(job_type: str, payload: Any) -> None:
        with traces.tracer.start_as_current_span("send"):
            pass

    async def async_handler(job_type: str, payload: Any) -> None:
        await asyncio.sleep(0)
        handler(job_type, payload)

    chosen = handler if kind == "sync" else async_handler
    assert run_due_jobs(pool, chosen, observers=[traces.observer()]) == 1

    job, child = traces.one("process nested"), traces.one("send")
    assert child.parent is not None and child.parent.span_id == job.context.span_id
    assert child.context.trace_id == job.context.trace_id == request.trace_id
    assert trace.get_current_span() is trace.INVALID_SPAN, "the job's context was detached"


def test_lease_mode_runs_are_traced_too(backend, pool, traces):
    request, _ = enqueue_in_span(backend, traces, ("leased", None))
    worker = create_queue_worker(
        pool,
        lambda t, p: None,
        lease_ms=30_000,
        polling_interval_ms=10,
        observers=[traces.observer()],
    )
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 1)

    span = traces.one("process leased")
    assert span.parent is not None and span.parent.span_id == request.span_id
    assert span.context.trace_id == request.trace_id
    assert attributes(span)["proletarian.outcome"] == "succeeded"


def test_a_sync_handler_given_up_at_its_timeout_ends_its_span_as_timed_out(backend, pool, traces):
    enqueue_in_span(backend, traces, ("slow", None))
    release = threading.Event()
    worker = create_queue_worker(
        pool,
        lambda t, p: release.wait(60),
        job_timeout_ms=100,
        polling_interval_ms=10,
        observers=[traces.observer()],
    )
    with worker:
        try:
            wait_until(lambda: backend.archived() == [("slow", "failure", 1)])
        finally:
            release.set()  # only now: the attempt is recorded before the handler returns
        wait_until(lambda: traces.named("process slow"))

    span = traces.one("process slow")
    assert attributes(span)["proletarian.outcome"] == "timed_out"
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["proletarian.timed_out"]


def test_worker_threads_trace_concurrent_jobs_each_in_its_own_trace(backend, pool, traces):
    requests = [enqueue_in_span(backend, traces, ("many", n))[0] for n in range(6)]
    worker = create_queue_worker(
        pool,
        lambda t, p: None,
        worker_threads=3,
        polling_interval_ms=10,
        observers=[traces.observer()],
    )
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 6)

    spans = traces.named("process many")
    assert sorted(s.parent.span_id for s in spans if s.parent) == sorted(
        r.span_id for r in requests
    )
    assert {s.context.trace_id for s in spans} == {r.trace_id for r in requests}


def test_enqueue_many_unique_keys_and_priorities_keep_the_context(backend, pool, traces):
    with traces.tracer.start_as_current_span("request") as span, connection(backend) as conn:
        enqueue_many(conn, [("batch", 1), ("batch", 2)])
        enqueue_many(conn, [("batch", 3)], priority=5)
        enqueue(conn, "keyed", None, unique_key="k", priority=2)
        enqueue(conn, "keyed", None, unique_key="k")  # a duplicate: nothing written
        conn.commit()
    request = span.get_span_context()
    assert len(set(stored_contexts(backend))) == 1
    assert None not in stored_contexts(backend)

    assert run_due_jobs(pool, lambda t, p: None, observers=[traces.observer()]) == 4

    spans = traces.named("process batch") + traces.named("process keyed")
    assert len(spans) == 4
    assert all(s.parent is not None and s.parent.span_id == request.span_id for s in spans)


def test_process_next_job_is_traced(backend, pool, traces):
    request, _ = enqueue_in_span(backend, traces, ("once", None))
    assert process_next_job(pool, lambda t, p: None, observers=[traces.observer()]) is True
    span = traces.one("process once")
    assert span.parent is not None and span.parent.span_id == request.span_id


def test_enqueue_async_keeps_the_context_on_postgresql(pg, traces):
    import asyncpg
    import psycopg

    async def scenario() -> trace.SpanContext:
        with traces.tracer.start_as_current_span("async request") as span:
            async with await psycopg.AsyncConnection.connect(pg.url) as aconn:
                await enqueue_async(aconn, "from_psycopg", None)
                await aconn.commit()
            conn = await asyncpg.connect(pg.url)
            try:
                async with conn.transaction():
                    await enqueue_async(conn, "from_asyncpg", None)
            finally:
                await conn.close()
        return span.get_span_context()

    request = asyncio.run(scenario())
    source = pg.pool(2)
    try:
        assert run_due_jobs(source, lambda t, p: None, observers=[traces.observer()]) == 2
    finally:
        source.close()
    for name in ("process from_psycopg", "process from_asyncpg"):
        span = traces.one(name)
        assert span.parent is not None and span.parent.span_id == request.span_id


def test_a_sqlalchemy_session_keeps_the_context(backend, pool, traces):
    import sqlalchemy as sa
    from sqlalchemy.orm import Session

    driver = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}[backend.name]
    engine = sa.create_engine(f"{driver}://{backend.url.partition('://')[2]}")
    try:
        with traces.tracer.start_as_current_span("request") as span, Session(engine) as session:
            enqueue(session, "from_session", None)
            session.commit()
    finally:
        engine.dispose()

    assert run_due_jobs(pool, lambda t, p: None, observers=[traces.observer()]) == 1
    job = traces.one("process from_session")
    assert job.parent is not None and job.parent.span_id == span.get_span_context().span_id


def test_the_core_does_not_import_opentelemetry(backend):
    code = (
        "import sys\n"
        "from proletarian_di import enqueue\n"
        "from proletarian_di.testing import QueueDatabase\n"
        "conn = QueueDatabase.from_url(sys.argv[1]).connect()\n"
        "enqueue(conn, 'untraced', None)\n"
        "conn.rollback()\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'opentelemetry'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, backend.url], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_an_untraced_enqueue_runs_the_statement_it_always_ran():
    now = datetime.now(timezone.utc)
    for dialect in (
        PostgresDialect("proletarian.job", "proletarian.archived_job"),
        MySQLDialect("proletarian.job", "proletarian.archived_job"),
    ):
        row = (uuid.uuid4(), "q", "t", "{}", now, now, 0, None)
        assert dialect.insert_statement(row)[0] == dialect.insert_sql
        context = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
        sql, params = dialect.insert_statement((*row[:7], context))
        assert sql == dialect.insert_sql.replace(
            "process_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            "process_at, trace_context) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        )
        assert params[7] == context


# The test: one trace from a FastAPI request through enqueue to the job's run ------


class TracedRequests:
    """ASGI middleware: each HTTP request in a SERVER span of `tracer`, as OpenTelemetry's
    FastAPI instrumentation would make it."""

    def __init__(self, app: Any, tracer: trace.Tracer) -> None:
        self.app, self.tracer = app, tracer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = f"{scope['method']} {scope['path']}"
        with self.tracer.start_as_current_span(name, kind=SpanKind.SERVER):
            await self.app(scope, receive, send)


def test_one_trace_from_a_fastapi_request_through_enqueue_to_the_jobs_run(backend, pool, traces):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI()
    app.add_middleware(TracedRequests, tracer=traces.tracer)
    backend.execute("DROP TABLE IF EXISTS proletarian.signups")
    backend.execute("CREATE TABLE proletarian.signups (email VARCHAR(100))")

    @app.post("/signup")
    def signup(email: str) -> dict[str, str]:
        with connection(backend) as conn:
            cursor = conn.cursor()
            cursor.execute("INSERT INTO proletarian.signups VALUES (%s)", (email,))
            cursor.close()
            job_id = enqueue(conn, "welcome_email", {"email": email})
            conn.commit()
        return {"job_id": str(job_id)}

    sent: list[str] = []

    def handler(job_type: str, payload: Any) -> None:
        with traces.tracer.start_as_current_span("smtp send"):
            sent.append(payload["email"])

    try:
        with TestClient(app) as client:
            response = client.post("/signup", params={"email": "a@example.com"})
        assert response.status_code == 200
        worker = create_queue_worker(
            pool, handler, polling_interval_ms=10, observers=[TracingObserver(traces.provider)]
        )
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 1)
    finally:
        backend.execute("DROP TABLE proletarian.signups")

    assert sent == ["a@example.com"]
    request = traces.one("POST /signup")
    job = traces.one("process welcome_email")
    smtp = traces.one("smtp send")
    assert {span.context.trace_id for span in traces.spans()} == {request.context.trace_id}
    assert request.parent is None and request.kind is SpanKind.SERVER
    assert job.parent is not None and job.parent.span_id == request.context.span_id
    assert smtp.parent is not None and smtp.parent.span_id == job.context.span_id
    assert attributes(job)["messaging.message.id"] == response.json()["job_id"]


# The schema step ------------------------------------------------------------------------

SCRATCH = "proletarian_traced"


@pytest.fixture
def older(backend: Backend) -> Iterator[Any]:
    """Tables in a schema of their own, one step before the observability step."""
    drop = (
        f"DROP DATABASE IF EXISTS {SCRATCH}"
        if backend.name == "mysql"
        else f"DROP SCHEMA IF EXISTS {SCRATCH} CASCADE"
    )
    backend.execute(drop)
    step = next(m.version for m in MIGRATIONS[backend.name] if m.name == "observability")
    scratch = backend.with_tables(f"{SCRATCH}.job", f"{SCRATCH}.archived_job")
    with contextlib.closing(scratch.connect()) as conn:
        cursor = conn.cursor()
        for migration in MIGRATIONS[backend.name][: step - 1]:
            for statement in statements(
                migration.sql(scratch.job_table, scratch.archived_job_table)
            ):
                cursor.execute(statement)
        conn.commit()
    yield scratch
    backend.execute(drop)


def columns_and_indexes(db: Any) -> tuple[list[str], list[tuple[str, ...]]]:
    """The job table's columns, and the archive's indexes other than its primary key."""
    if db.name == "mysql":
        columns = db.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'job'",
            (SCRATCH,),
        )
        indexes = db.query(
            "SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM "
            "information_schema.statistics WHERE table_schema = %s AND table_name = "
            "'archived_job' AND index_name <> 'PRIMARY' GROUP BY index_name",
            (SCRATCH,),
        )
    else:
        columns = db.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'job'",
            (SCRATCH,),
        )
        indexes = db.query(
            "SELECT indexname, regexp_replace(indexdef, '.*\\((.*)\\)', '\\1') FROM pg_indexes "
            "WHERE schemaname = %s AND tablename = 'archived_job' AND indexname NOT LIKE '%%pkey'",
            (SCRATCH,),
        )
    return [str(row[0]).lower() for row in columns], [
        (str(name), str(cols).replace(" ", "")) for name, cols in indexes
    ]


def test_the_observability_step_adds_the_column_and_the_archives_index(older, traces):
    names = {"job_table": older.job_table, "archived_job_table": older.archived_job_table}
    columns, indexes = columns_and_indexes(older)
    assert "trace_context" not in columns and indexes == []
    with traces.tracer.start_as_current_span("request"), connection(older) as conn:
        with pytest.raises(SchemaError) as error:
            enqueue(conn, "traced", None, job_table=older.job_table)
        conn.rollback()
    message = str(error.value)
    assert f"{SCRATCH}.job.trace_context" in message
    assert "proletarian-di schema upgrade" in message
    assert older.query(f"SELECT COUNT(*) FROM {older.job_table}") == [(0,)], "nothing written"
    with connection(older) as conn:
        enqueue(conn, "untraced", None, job_table=older.job_table)  # no span: no column needed
        conn.commit()

    with contextlib.closing(older.connect()) as conn:
        applied = upgrade_schema(conn, **names)
        assert applied[0].name == "observability"  # and the steps after it
        assert schema_version(conn, **names) == applied[-1].version

    columns, indexes = columns_and_indexes(older)
    assert "trace_context" in columns
    assert ("archived_job_finished_at", "finished_at,queue,status") in indexes  # and later ones
    request, _ = enqueue_in_span(older, traces, ("traced", None), job_table=older.job_table)
    source = older.pool(2)
    try:
        ran = run_due_jobs(source, lambda t, p: None, observers=[traces.observer()], **names)
    finally:
        source.close()
    assert ran == 2
    assert traces.one("process untraced").parent is None
    traced = traces.one("process traced")
    assert traced.parent is not None and traced.parent.span_id == request.span_id


def test_a_traced_enqueue_many_on_an_older_schema_is_a_schema_error(older, traces):
    with traces.tracer.start_as_current_span("request"), connection(older) as conn:
        with pytest.raises(SchemaError, match="proletarian-di schema upgrade"):
            enqueue_many(conn, [("a", 1), ("b", 2)], job_table=older.job_table)
        conn.rollback()
    assert older.query(f"SELECT COUNT(*) FROM {older.job_table}") == [(0,)]
