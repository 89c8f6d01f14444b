"""Testing support: run the due jobs now, in the calling thread, with no worker threads."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ._common.types import DataSource, Handler, WorkerOptions
from ._engine.options import worker_settings
from ._engine.runner import JobRunner
from ._store.datasource import connection_factory
from ._store.secrets import mask, parse_mysql_url
from ._store.tables import (
    DEFAULT_ARCHIVED_JOB_TABLE,
    DEFAULT_JOB_TABLE,
    DEFAULT_TABLES,
    Tables,
    attempt_table,
    blocked_table,
    check_table_name,
    claims_table,
    dependencies_table,
    outcomes_table,
    paused_table,
    periodic_table,
    rate_table,
    results_table,
    version_table,
    workers_table,
    workflows_table,
)
from ._store.urls import url_dialect
from .admin import MAX_LIMIT, JobInfo, list_jobs
from .errors import ConfigurationError
from .schema import check_schema, install_schema
from .serializers import Serializer, SerializerName

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_MAX_JOBS = 10_000


class FakeClock:
    """A clock for tests: stands still until moved. Pass it as `clock=` to `enqueue` and the
    worker options, and `advance_clock=True` to `run_due_jobs` to let retries fall due."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(timezone.utc)
        if self.now.tzinfo is None:
            raise ConfigurationError(f"FakeClock needs an aware datetime, got {self.now!r}")

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta | int) -> datetime:
        """Move forward by a timedelta or a number of milliseconds; the new now."""
        self.now += by if isinstance(by, timedelta) else timedelta(milliseconds=by)
        return self.now


def run_due_jobs(
    data_source: DataSource,
    handler: Handler,
    *,
    max_jobs: int = DEFAULT_MAX_JOBS,
    advance_clock: bool = False,
    **options: Unpack[WorkerOptions],
) -> int:
    """Run every due job of the queue in this thread, one transaction each; return how many ran.

    Takes the same options as `create_queue_worker` (queue, retry_strategy_fn,
    failed_job_fn, handler_fn_mode, job_table, clock, ...). A retried attempt
    counts as a run; a retry falls due at the clock's time plus its delay, so it
    waits, unless `advance_clock` (with a `FakeClock` as `clock`) moves the clock
    to the next waiting job whenever none is due, until the queue is empty. Stops
    after `max_jobs` runs so a handler that keeps enqueueing cannot loop forever.
    """
    if not isinstance(max_jobs, int) or max_jobs < 0:
        raise ConfigurationError(f"max_jobs must be a non-negative int, got {max_jobs!r}")
    clock = options.get("clock")
    if advance_clock and not isinstance(clock, FakeClock):
        raise ConfigurationError("advance_clock=True needs clock=FakeClock(...) to move")
    runner = JobRunner(handler, worker_settings(**options))
    connect = runner.recording_connection = connection_factory(data_source)
    ran = 0
    try:
        with connect() as conn:
            check_schema(conn, runner.options.job_table, runner.options.archived_job_table)
            while ran < max_jobs:
                if runner.run_next(conn) is not None:
                    ran += 1
                elif not (
                    isinstance(clock, FakeClock) and advance_clock and _advance(conn, runner, clock)
                ):
                    break
    finally:
        runner.loops.close()
    return ran


def _advance(conn: Any, runner: JobRunner, clock: FakeClock) -> bool:
    """Move the clock to the next waiting job of the queue; False if none waits, or if one is
    due already (held by someone else: waiting longer would not help)."""
    dialect = runner.dialect(conn)
    sql = f"SELECT MIN(process_at) FROM {runner.options.job_table} WHERE queue = %s"
    try:
        (due,) = dialect.fetchone(conn, sql, (runner.options.queue,))
    finally:
        dialect.rollback(conn)
    if due is None:
        return False
    due = dialect.decode_time(due)
    if due <= clock():
        return False
    clock.now = due
    return True


def enqueued_jobs(
    conn: Any,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
) -> list[JobInfo]:
    """The jobs waiting in the job table as `conn` sees them (its own uncommitted ones too),
    oldest first, of one queue and job type if given: what the code under test enqueued,
    to assert on without SQL. Like `enqueue`, it leaves the transaction to the caller."""
    jobs = list_jobs(
        conn,
        queue=queue,
        job_type=job_type,
        limit=MAX_LIMIT,
        tables=tables,
        serializer=serializer,
    )
    return [job for job in reversed(jobs) if job.finished_at is None]


class QueueDatabase:
    """A database holding the queue's two tables: fresh connections, a pool, the schema and
    the rows, for tests (yours too) and benchmarks. `QueueDatabase.from_url` picks the variant."""

    name = ""

    def __init__(
        self,
        url: str,
        *,
        job_table: str = DEFAULT_JOB_TABLE,
        archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
        connect_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.job_table = check_table_name(job_table, "job_table")
        self.archived_job_table = check_table_name(archived_job_table, "archived_job_table")
        self.connect_args: dict[str, Any] = {"connect_timeout": 10, **(connect_args or {})}
        self.created_schemas: list[str] = []
        """The schemas (MySQL: databases) that `install` or `will_create` found missing, in
        order, shared with every `with_tables` view: what `drop_created_schemas` drops."""

    @staticmethod
    def from_url(url: str, **options: Any) -> QueueDatabase:
        """The PostgreSQL or the MySQL/MariaDB variant, as the URL's scheme says."""
        variant = MySQLQueueDatabase if url_dialect(url) == "mysql" else PostgresQueueDatabase
        return variant(url, **options)

    def with_tables(self, job_table: str, archived_job_table: str) -> QueueDatabase:
        """The same database seen through other queue tables (a test's own, say)."""
        other = copy.copy(self)
        other.job_table = check_table_name(job_table, "job_table")
        other.archived_job_table = check_table_name(archived_job_table, "archived_job_table")
        return other

    def connect(self) -> Any:
        """A new driver connection, not in autocommit mode; the caller closes it."""
        raise NotImplementedError

    def pool(self, size: int = 4, *, warm: bool = False) -> Any:
        """A pool of up to `size` connections for workers and `run_due_jobs`, all opened
        before it is returned when `warm`; the caller closes it."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement, run and committed on a connection of its own."""
        with contextlib.closing(self.connect()) as conn:
            cursor = conn.cursor()
            cursor.execute(sql, params)
            rows = list(cursor.fetchall()) if cursor.description else []
            conn.commit()
            return rows

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run and commit one statement on a connection of its own."""
        self.query(sql, params)

    def install(self) -> None:
        """Create the schema, both tables and the index where missing (`install_schema`); a
        schema it creates is noted in `created_schemas`."""
        for table in (self.job_table, self.archived_job_table):
            schema, dot, _ = table.rpartition(".")
            if dot:
                self.will_create(schema)
        with contextlib.closing(self.connect()) as conn:
            install_schema(conn, self.job_table, self.archived_job_table)

    def will_create(self, schema: str) -> None:
        """Note `schema` (MySQL: a database) in `created_schemas` if it does not exist yet:
        call it before something else (a subprocess, a command) creates it, so that
        `drop_created_schemas` drops it too."""
        schema = check_table_name(schema, "schema")
        if schema not in self.created_schemas and not self.schema_exists(schema):
            self.created_schemas.append(schema)

    @contextlib.contextmanager
    def creating_schemas(self) -> Iterator[None]:
        """Note in `created_schemas` the schemas (MySQL: databases) that appear while the
        block runs: for code that names its own (a documentation sample, a subprocess)."""
        before = self.schemas()
        try:
            yield
        finally:
            for schema in sorted(self.schemas() - before):
                if schema not in self.created_schemas:
                    self.created_schemas.append(schema)

    def schema_exists(self, schema: str) -> bool:
        """Whether the schema (MySQL: the database) exists."""
        raise NotImplementedError

    def schemas(self) -> set[str]:
        """Every schema (MySQL: database) but the server's own."""
        raise NotImplementedError

    def drop_schema(self, schema: str) -> None:
        """Drop the schema (MySQL: the database) and all it holds, if it exists."""
        raise NotImplementedError

    def drop_created_schemas(self) -> list[str]:
        """Drop every schema in `created_schemas`, newest first, and forget them: what a test
        session created is gone at its end, while what it found is left. The dropped ones."""
        dropped = list(reversed(self.created_schemas))
        for schema in dropped:
            self.drop_schema(schema)
        self.created_schemas.clear()
        return dropped

    def recreate(self) -> None:
        """Drop the queue's tables and install them again: a server kept from an earlier run
        may hold the tables of another version's schema."""
        self.execute(f"DROP TABLE IF EXISTS {self.job_table}")
        self.execute(f"DROP TABLE IF EXISTS {self.archived_job_table}")
        self.execute(f"DROP TABLE IF EXISTS {periodic_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {paused_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {claims_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {attempt_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {workers_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {outcomes_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {rate_table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {results_table(self.job_table)}")
        for table in (dependencies_table, blocked_table, workflows_table):
            self.execute(f"DROP TABLE IF EXISTS {table(self.job_table)}")
        self.execute(f"DROP TABLE IF EXISTS {version_table(self.job_table)}")
        self.install()

    def clear(self, *, truncate: bool = False) -> None:
        """Delete every job, waiting or archived, and resume every paused queue; `truncate`
        also leaves no dead rows behind (for measurements), at the cost of being slower on
        small tables."""
        statement = "TRUNCATE TABLE" if truncate else "DELETE FROM"
        self.execute(f"{statement} {self.job_table}")
        self.execute(f"{statement} {self.archived_job_table}")
        self.execute(f"{statement} {attempt_table(self.job_table)}")
        self.execute(f"DELETE FROM {outcomes_table(self.job_table)}")
        self.execute(f"DELETE FROM {rate_table(self.job_table)}")
        self.execute(f"DELETE FROM {results_table(self.job_table)}")
        self.execute(f"DELETE FROM {paused_table(self.job_table)}")
        for table in (dependencies_table, blocked_table, workflows_table):
            self.execute(f"DELETE FROM {table(self.job_table)}")

    def jobs(self) -> list[tuple[Any, ...]]:
        """The waiting jobs as (job_type, attempts, queue), the first due first."""
        return self.query(
            f"SELECT job_type, attempts, queue FROM {self.job_table} ORDER BY process_at"
        )

    def archived(self) -> list[tuple[Any, ...]]:
        """The archived jobs as (job_type, status, attempts), the first enqueued first."""
        return self.query(
            f"SELECT job_type, status, attempts FROM {self.archived_job_table} "
            "ORDER BY enqueued_at, finished_at"
        )


class PostgresQueueDatabase(QueueDatabase):
    """PostgreSQL through psycopg 3 and psycopg_pool (the `postgres` extra)."""

    name = "postgresql"

    def connect(self) -> Any:
        """A new psycopg connection, not in autocommit mode; the caller closes it."""
        import psycopg

        return psycopg.connect(self.url, **self.connect_args)

    def pool(self, size: int = 4, *, warm: bool = False) -> Any:
        """A psycopg_pool `ConnectionPool` of up to `size` connections; the caller closes it."""
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(
            self.url,
            min_size=size if warm else 1,
            max_size=size,
            kwargs=dict(self.connect_args),
            open=True,
        )
        if warm:
            pool.wait(timeout=30)
        return pool

    def schema_exists(self, schema: str) -> bool:
        """Whether the schema exists in the database."""
        return bool(self.query("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)))

    def schemas(self) -> set[str]:
        """Every schema but PostgreSQL's own (`pg_*`, `information_schema`, `public`)."""
        rows = self.query("SELECT nspname FROM pg_namespace")
        return {
            name
            for (name,) in rows
            if not name.startswith("pg_") and name not in ("information_schema", "public")
        }

    def drop_schema(self, schema: str) -> None:
        """`DROP SCHEMA IF EXISTS schema CASCADE`."""
        self.execute(f"DROP SCHEMA IF EXISTS {check_table_name(schema, 'schema')} CASCADE")


class MySQLQueueDatabase(QueueDatabase):
    """MySQL or MariaDB through PyMySQL and `MySQLDataSource` (the `mysql` extra)."""

    name = "mysql"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.options = parse_mysql_url(url)

    def connect(self) -> Any:
        """A new PyMySQL connection, not in autocommit mode; the caller closes it."""
        import pymysql

        return pymysql.connect(**self.options, autocommit=False, **self.connect_args)

    def pool(self, size: int = 4, *, warm: bool = False) -> Any:
        """A `MySQLDataSource` of up to `size` connections; the caller closes it."""
        from .mysql import MySQLDataSource

        return MySQLDataSource(
            self.url, max_connections=size, min_cached=size if warm else 0, **self.connect_args
        )

    def schema_exists(self, schema: str) -> bool:
        """Whether the database exists on the server."""
        sql = "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s"
        return bool(self.query(sql, (schema,)))

    def schemas(self) -> set[str]:
        """Every database but the server's own (`mysql`, `sys`, the `*_schema` ones)."""
        own = {"mysql", "sys", "information_schema", "performance_schema"}
        return {name for (name,) in self.query("SHOW DATABASES") if name not in own}

    def drop_schema(self, schema: str) -> None:
        """`DROP DATABASE IF EXISTS schema`."""
        self.execute(f"DROP DATABASE IF EXISTS {check_table_name(schema, 'schema')}")


def mysql_unreachable_reason(url: str, timeout: int = 3) -> str | None:
    """None when a MySQL/MariaDB server lets us in at `url`, else why not (to skip tests)."""
    try:
        import pymysql

        pymysql.connect(**parse_mysql_url(url), connect_timeout=timeout).close()
    except Exception as exc:
        return f"no MySQL/MariaDB server reachable at {mask(url)} ({type(exc).__name__}: {exc})"
    return None
