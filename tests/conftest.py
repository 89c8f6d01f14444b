"""Fixtures: every behavioural test runs on PostgreSQL and on MySQL/MariaDB.

PostgreSQL is `DATABASE_URL` or an embedded server started for the session.
MySQL is `MYSQL_URL` (default: the local MariaDB); when none is reachable the
MySQL tests skip, saying why, unless PROLETARIAN_REQUIRE_MYSQL=1 (CI), which
makes them fail instead.

Two tiers: a test that uses a database fixture (or any fixture built on one) is
marked `db` here; a test that reaches a database some other way says so with
`@pytest.mark.db`. `pytest -m "not db"` runs the rest in seconds, with no server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from proletarian_di.embedded import postgres_url
from proletarian_di.testing import mysql_unreachable_reason

from backends import MYSQL_URL, Backend, MySQLBackend, PostgresBackend

DATABASE_FIXTURES = frozenset(
    {"backend", "pg", "pool", "effects", "postgresql_backend", "mysql_backend"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `db` every test whose fixtures, direct or indirect, include a database."""
    for item in items:
        if DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.db)


@pytest.fixture(scope="session")
def postgresql_backend() -> Iterator[Backend]:
    """The session's PostgreSQL (`DATABASE_URL` or embedded), with a fresh schema."""
    with postgres_url() as url:
        backend = PostgresBackend(url)
        backend.recreate()
        yield backend


@pytest.fixture(scope="session")
def mysql_backend() -> Backend:
    """The session's MySQL/MariaDB (`MYSQL_URL`) with a fresh schema, or a skip saying why."""
    reason = mysql_unreachable_reason(MYSQL_URL)
    if reason:
        if os.environ.get("PROLETARIAN_REQUIRE_MYSQL") == "1":
            pytest.fail(f"PROLETARIAN_REQUIRE_MYSQL=1 but {reason}")
        pytest.skip(reason)
    backend = MySQLBackend(MYSQL_URL)
    backend.recreate()
    return backend


@pytest.fixture(params=["postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """A clean database of each kind, with the default schema installed."""
    chosen: Backend = request.getfixturevalue(f"{request.param}_backend")
    chosen.reset()
    return chosen


@pytest.fixture
def pg(postgresql_backend: Backend) -> Backend:
    """PostgreSQL only, for what only PostgreSQL has."""
    postgresql_backend.reset()
    return postgresql_backend


@pytest.fixture
def pool(backend: Backend) -> Iterator[object]:
    """A connection pool (psycopg_pool or DBUtils) on the backend."""
    source = backend.pool(8)
    yield source
    source.close()  # type: ignore[attr-defined]


@pytest.fixture
def effects(backend: Backend) -> Iterator[Callable[[], list[str]]]:
    """A table for handler side effects; returns a function listing its notes."""
    backend.execute("DROP TABLE IF EXISTS proletarian.effects")
    backend.execute("CREATE TABLE proletarian.effects (note VARCHAR(100))")
    yield lambda: [row[0] for row in backend.query("SELECT note FROM proletarian.effects")]
    backend.execute("DROP TABLE proletarian.effects")
