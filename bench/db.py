"""The databases under test: `proletarian_di.testing.QueueDatabase` on the benchmark's tables,
with what only the benchmark needs (server versions, planner statistics, warm pools).

The benchmark uses its own tables (`proletarian_bench.job`, `…archived_job`)
so it never touches the tables of tests running against the same server.
"""

from __future__ import annotations

import contextlib
from typing import Any

from proletarian_di.testing import MySQLQueueDatabase, PostgresQueueDatabase, QueueDatabase

JOB_TABLE = "proletarian_bench.job"
ARCHIVED_JOB_TABLE = "proletarian_bench.archived_job"
TABLES = {"job_table": JOB_TABLE, "archived_job_table": ARCHIVED_JOB_TABLE}
QUEUE = "default"
COLUMNS = "job_id, queue, job_type, payload, attempts, enqueued_at, process_at"


class Database(QueueDatabase):
    """One server, seen through the benchmark's tables."""

    label = ""
    driver_args: dict[str, Any] = {}

    def __init__(self, url: str) -> None:
        super().__init__(url, **TABLES, connect_args=self.driver_args)

    def pool(self, size: int = 4, *, warm: bool = True) -> Any:
        """A pool with all its connections open, so no measurement pays for connecting."""
        return super().pool(size, warm=warm)

    def clean(self) -> None:
        """Empty both tables, leaving no dead rows behind."""
        self.clear(truncate=True)

    def version(self) -> str:
        """The server's version, for the report."""
        raise NotImplementedError

    def analyze(self) -> None:
        """Fresh planner statistics for the job table (PostgreSQL only)."""

    def waiting(self) -> int:
        """How many jobs wait in the job table."""
        return int(self.query(f"SELECT COUNT(*) FROM {JOB_TABLE}")[0][0])


class Postgres(Database, PostgresQueueDatabase):
    """PostgreSQL through psycopg."""

    label = "PostgreSQL"

    def version(self) -> str:
        """The server's version, for the report."""
        return str(self.query("SHOW server_version")[0][0]).split()[0]

    def analyze(self) -> None:
        """Fresh planner statistics for the job table."""
        with contextlib.closing(self.connect()) as conn:
            conn.autocommit = True
            conn.execute(f"ANALYZE {JOB_TABLE}")


class MySQL(Database, MySQLQueueDatabase):
    """MariaDB or MySQL through PyMySQL; `version()` tells which for the label."""

    label = "MariaDB"
    driver_args = {"connect_timeout": 5, "read_timeout": 1800}  # loading 10M rows

    def version(self) -> str:
        """The server's version, for the report; sets the label to MariaDB or MySQL."""
        text = str(self.query("SELECT VERSION()")[0][0])
        self.label = "MariaDB" if "mariadb" in text.lower() else "MySQL"
        return text.split("-")[0]


def database(kind: str, url: str) -> Database:
    """The benchmark's database of `kind` ('postgresql' or 'mysql') at `url`."""
    return MySQL(url) if kind == "mysql" else Postgres(url)
