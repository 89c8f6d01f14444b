"""libpq multi-host URLs for failover: `target_session_attrs=read-write` picks the writable
server of a list wherever a database URL is taken.

The list's first server is a second embedded PostgreSQL made read-only
(`default_transaction_read_only`, which libpq reads as a standby's), the second the
session's own; the CLI, a worker's pool and the admin functions all end up on the second.
Without the parameter the CLI names the read-only server's refusal (both databases).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from cli_fixtures.cli_db import ARCHIVE, ENV, JOB, TABLES, CliDB
from psycopg_pool import ConnectionPool
from test_cli import one_line
from typer.testing import CliRunner

from proletarian_di import admin, process_next_job
from proletarian_di._store.dialects import is_read_only
from proletarian_di._store.secrets import libpq_url, mask
from proletarian_di._store.urls import url_dialect
from proletarian_di.cli import app
from proletarian_di.embedded import embedded_postgres

from backends import Backend, PostgresBackend, as_uuid

pytestmark = pytest.mark.db


def _where(url: str) -> tuple[str, str, str]:
    """(host or socket folder, port, database) of a PostgreSQL URL, as the server says."""
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.info.host, str(conn.info.port), conn.info.dbname


@pytest.fixture(scope="module")
def read_only(postgresql_backend: Backend) -> Iterator[str]:
    """A second server holding the CLI's tables in a database of the session's database's
    name, then made read-only."""
    _, _, dbname = _where(postgresql_backend.url)
    with embedded_postgres() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,))
            if not exists.fetchone():
                name = psycopg.sql.Identifier(dbname)
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(name))
        own = urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))
        PostgresBackend(own).install(JOB, ARCHIVE)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")
        yield url


def both(read_only: str, primary: str, **attrs: str) -> str:
    """One URL naming the read-only server first, then the primary (libpq's `host` and
    `port` lists), with `attrs` among its parameters."""
    servers = [_where(read_only), _where(primary)]
    user = urlsplit(primary).username or "postgres"
    params = dict(parse_qsl(urlsplit(primary).query))
    params.update(
        host=",".join(host for host, _, _ in servers),
        port=",".join(port for _, port, _ in servers),
        **attrs,
    )
    return f"postgresql://{user}@/{servers[1][2]}?{urlencode(params, safe='/,')}"


@pytest.fixture
def db(pg: Backend) -> CliDB:
    return CliDB(pg)


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"DATABASE_URL": None, **ENV})


def test_the_cli_enqueues_and_reads_on_the_writable_server(db, read_only):
    url = both(read_only, db.url, target_session_attrs="read-write")
    enqueued = cli("enqueue", "email", '{"to": "a@example.com"}', "--database-url", url)
    assert enqueued.exit_code == 0, enqueued.output
    job_id = enqueued.stdout.strip()
    assert [str(as_uuid(row[0])) for row in db.backend.query(f"SELECT job_id FROM {JOB}")] == [
        job_id
    ]
    stats = cli("stats", "--json", "--database-url", url)
    assert stats.exit_code == 0, stats.output
    assert "email" in stats.stdout or json.loads(stats.stdout)


def test_a_worker_pool_on_the_url_runs_the_job(db, read_only):
    url = both(read_only, db.url, target_session_attrs="read-write")
    (job_id,) = db.enqueue(("email", {"n": 1}))
    ran = []
    with ConnectionPool(libpq_url(url), min_size=1, max_size=2) as pool:
        assert process_next_job(pool, lambda t, p: ran.append(p), **TABLES) is True
        with pool.connection() as conn:
            info = admin.get_job(conn, job_id, tables=admin.Tables(*TABLES.values()))
    assert ran == [{"n": 1}]
    assert info is not None and info.state == "succeeded"


def test_without_the_attribute_the_read_only_server_is_refused_by_name(db, read_only):
    url = both(read_only, db.url)
    enqueued = cli("enqueue", "email", "--database-url", url)
    assert enqueued.exit_code == 5
    line = one_line(enqueued.stderr)
    assert "database is read-only" in line and "target_session_attrs=read-write" in line
    assert db.backend.query(f"SELECT job_id FROM {JOB}") == []


def test_a_multi_host_url_with_a_password_is_masked_and_taken_as_it_is():
    url = "postgresql://app:s3cret@db1:5432,db2:5433/app?target_session_attrs=read-write"
    assert url_dialect(url) == "postgresql"
    assert mask(url) == "postgresql://app:***@db1:5432,db2:5433/app?target_session_attrs=read-write"
    with contextlib.suppress(psycopg.ProgrammingError):
        assert psycopg.conninfo.conninfo_to_dict(libpq_url(url))["host"] == "db1,db2"


def test_a_read_only_refusal_is_told_from_other_errors_on_both_databases(backend):
    """What the CLI calls "database is read-only": the server's refusal to write in a
    read-only transaction (as on a standby or a read-only replica), and nothing else."""
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        cursor.execute("START TRANSACTION READ ONLY")
        with pytest.raises(Exception) as refused:
            cursor.execute(f"DELETE FROM {backend.job_table}")
        conn.rollback()
        with pytest.raises(Exception) as other:
            cursor.execute("SELECT * FROM proletarian.no_such_table")
        conn.rollback()
    assert is_read_only(refused.value)
    assert not is_read_only(other.value)
