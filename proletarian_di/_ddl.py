"""The schema's SQL, per database: the full current schema and the numbered steps to it.

Templates take {schema}, {job_table}, {archived_job_table}, {index}, {claim_index},
{unique_index}, {finished_index}, {version_table}, {periodic_table}, {paused_table},
{claims_table} and, on MySQL, {collation} (a `COLLATE` clause that each server reads for
itself). Step 1 is Proletarian's own schema, exactly as its docs give it, so a database
created by Proletarian (Clojure) is at version 1.
"""

from __future__ import annotations

POSTGRESQL = """\
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      UUID PRIMARY KEY,     -- generated and returned by enqueue()
    queue       TEXT NOT NULL,        -- queue name
    job_type    TEXT NOT NULL,        -- job type
    payload     TEXT NOT NULL,        -- serialized job data (JSON by default)
    attempts    INTEGER NOT NULL,     -- finished attempts: 0 at enqueue, +1 per retry
    enqueued_at TIMESTAMPTZ NOT NULL, -- when the job was enqueued (never changes)
    process_at  TIMESTAMPTZ NOT NULL, -- when the job should run (moves on every retry)
    last_error  TEXT,                 -- the last failed attempt's error (type, message, trace)
    unique_key  TEXT,                 -- at most one job per queue and key (NULL: no key)
    priority    INTEGER NOT NULL DEFAULT 0, -- higher runs first among due jobs of its queue
    leased_by   TEXT,                 -- lease mode: the claim running it (NULL: none)
    trace_context TEXT                -- the enqueuer's trace context, JSON (NULL: none)
);

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      UUID PRIMARY KEY,     -- copied from the job row
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,     -- the number of the last attempt
    enqueued_at TIMESTAMPTZ NOT NULL,
    process_at  TIMESTAMPTZ NOT NULL, -- data for the last run only
    status      TEXT NOT NULL,        -- success / failure / cancelled
    finished_at TIMESTAMPTZ NOT NULL, -- when the job finished (success or failure)
    last_error  TEXT,                 -- a failure's error; the last failed attempt's otherwise
    priority    INTEGER NOT NULL DEFAULT 0
);

-- the archive by time (the dashboard's overview)
CREATE INDEX IF NOT EXISTS {finished_index} ON {archived_job_table} (finished_at, queue, status);

-- the claim's order: priority (higher first), then process_at
CREATE INDEX IF NOT EXISTS {claim_index} ON {job_table} (queue, (-priority), process_at);

CREATE UNIQUE INDEX IF NOT EXISTS {unique_index} ON {job_table} (queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {periodic_table} (
    name        TEXT PRIMARY KEY,     -- the schedule's name (PeriodicJob.name)
    cron        TEXT NOT NULL,        -- its cron expression, as declared
    timezone    TEXT NOT NULL,        -- the IANA time zone the expression is read in
    job_type    TEXT NOT NULL,
    queue       TEXT NOT NULL,
    last_tick   TIMESTAMPTZ NOT NULL, -- the newest tick enqueued or passed over; later ones are due
    updated_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS {paused_table} (
    queue       TEXT PRIMARY KEY,     -- a paused queue: its workers claim none of its jobs
    paused_at   TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS {claims_table} (
    job_id      UUID PRIMARY KEY,     -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL      -- its claims, committed apart from its transaction
);
"""

MYSQL = """\
CREATE DATABASE IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      BINARY(16) PRIMARY KEY, -- generated and returned by enqueue()
    queue       VARCHAR(255) NOT NULL,  -- queue name
    job_type    VARCHAR(255) NOT NULL,  -- job type
    payload     LONGTEXT NOT NULL,      -- serialized job data (JSON by default)
    attempts    INTEGER NOT NULL,       -- finished attempts: 0 at enqueue, +1 per retry
    enqueued_at DATETIME(6) NOT NULL,   -- UTC; when the job was enqueued (never changes)
    process_at  DATETIME(6) NOT NULL,   -- UTC; when the job should run (moves on every retry)
    last_error  TEXT NULL,              -- the last failed attempt's error (type, message, trace)
    unique_key  VARCHAR(255) NULL,      -- at most one job per queue and key (NULL: no key)
    priority    INTEGER NOT NULL DEFAULT 0, -- higher runs first among due jobs of its queue
    priority_rank INTEGER AS (-priority) VIRTUAL, -- the claim's order: lower first
    leased_by   VARCHAR(255) NULL,      -- lease mode: the claim running it (NULL: none)
    trace_context TEXT NULL,            -- the enqueuer's trace context, JSON (NULL: none)
    UNIQUE INDEX {unique_index} (queue, unique_key),
    -- the claim's order; attempts and leased_by let the dashboard count without the rows
    INDEX {claim_index} (queue, priority_rank, process_at, attempts, leased_by)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      BINARY(16) PRIMARY KEY, -- copied from the job row
    queue       VARCHAR(255) NOT NULL,
    job_type    VARCHAR(255) NOT NULL,
    payload     LONGTEXT NOT NULL,
    attempts    INTEGER NOT NULL,       -- the number of the last attempt
    enqueued_at DATETIME(6) NOT NULL,
    process_at  DATETIME(6) NOT NULL,   -- data for the last run only
    status      VARCHAR(16) NOT NULL,   -- success / failure / cancelled
    finished_at DATETIME(6) NOT NULL,   -- UTC; when the job finished (success or failure)
    last_error  TEXT NULL,              -- a failure's error; the last failed attempt's otherwise
    priority    INTEGER NOT NULL DEFAULT 0,
    INDEX {finished_index} (finished_at, queue, status) -- the archive by time (dashboard)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {periodic_table} (
    name        VARCHAR(255) PRIMARY KEY, -- the schedule's name (PeriodicJob.name)
    cron        VARCHAR(255) NOT NULL,    -- its cron expression, as declared
    timezone    VARCHAR(64) NOT NULL,     -- the IANA time zone the expression is read in
    job_type    VARCHAR(255) NOT NULL,
    queue       VARCHAR(255) NOT NULL,
    last_tick   DATETIME(6) NOT NULL,     -- UTC; the newest tick enqueued or passed over
    updated_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {paused_table} (
    queue       VARCHAR(255) PRIMARY KEY, -- a paused queue: its workers claim none of its jobs
    paused_at   DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {claims_table} (
    job_id      BINARY(16) PRIMARY KEY,   -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL          -- its claims, committed apart from its transaction
) ENGINE=InnoDB;
"""


# Proletarian's schema for PostgreSQL, from its installation page.
POSTGRESQL_1 = """\
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      UUID PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    process_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      UUID PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    process_at  TIMESTAMPTZ NOT NULL,
    status      TEXT NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL
);

DROP INDEX IF EXISTS {schema}.{index};
CREATE INDEX {index} ON {job_table} (queue, process_at);
"""

POSTGRESQL_2 = """\
ALTER TABLE {job_table} ADD COLUMN last_error TEXT;
ALTER TABLE {archived_job_table} ADD COLUMN last_error TEXT;
"""

# Proletarian's schema for MySQL, from its installation page.
MYSQL_1 = """\
CREATE DATABASE IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      BINARY(16) PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMP NOT NULL,
    process_at  TIMESTAMP NOT NULL,
    INDEX (queue(256), process_at)
);

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      BINARY(16) PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMP NOT NULL,
    process_at  TIMESTAMP NOT NULL,
    status      TEXT NOT NULL,
    finished_at TIMESTAMP NOT NULL
);
"""

# proletarian-di's column types: UTC DATETIME(6) (TIMESTAMP converts through the session's
# time zone and ends in 2038), whole-column VARCHAR index, LONGTEXT payloads, NO PAD collation.
MYSQL_2 = """\
SET time_zone = '+00:00'; -- TIMESTAMP values become UTC DATETIME values

ALTER TABLE {job_table}
    DROP INDEX queue, -- Proletarian's unnamed INDEX (queue(256), process_at)
    CONVERT TO CHARACTER SET utf8mb4 {collation},
    MODIFY queue       VARCHAR(255) NOT NULL,
    MODIFY job_type    VARCHAR(255) NOT NULL,
    MODIFY payload     LONGTEXT NOT NULL,
    MODIFY enqueued_at DATETIME(6) NOT NULL,
    MODIFY process_at  DATETIME(6) NOT NULL,
    ADD INDEX {index} (queue, process_at);

ALTER TABLE {archived_job_table}
    CONVERT TO CHARACTER SET utf8mb4 {collation},
    MODIFY queue       VARCHAR(255) NOT NULL,
    MODIFY job_type    VARCHAR(255) NOT NULL,
    MODIFY payload     LONGTEXT NOT NULL,
    MODIFY enqueued_at DATETIME(6) NOT NULL,
    MODIFY process_at  DATETIME(6) NOT NULL,
    MODIFY status      VARCHAR(16) NOT NULL,
    MODIFY finished_at DATETIME(6) NOT NULL;
"""

MYSQL_3 = """\
ALTER TABLE {job_table} ADD COLUMN last_error TEXT NULL;
ALTER TABLE {archived_job_table} ADD COLUMN last_error TEXT NULL;
"""


def _statement(schema: str, start: str) -> str:
    """The full schema's statement that begins with `start`, as a step of its own."""
    begin = schema.index(start)
    return schema[begin : schema.index(";\n", begin) + 2]


# The periodic table: the step is the full schema's own statement.
POSTGRESQL_3 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {periodic_table}")
MYSQL_4 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {periodic_table}")

POSTGRESQL_4 = """\
ALTER TABLE {job_table} ADD COLUMN unique_key TEXT;
CREATE UNIQUE INDEX {unique_index} ON {job_table} (queue, unique_key)
    WHERE unique_key IS NOT NULL;
"""

MYSQL_5 = """\
ALTER TABLE {job_table}
    ADD COLUMN unique_key VARCHAR(255) NULL,
    ADD UNIQUE INDEX {unique_index} (queue, unique_key);
"""

# Priorities: the claim's index orders a queue's jobs by priority, higher first, then by
# process_at; it replaces the (queue, process_at) index.
POSTGRESQL_5 = """\
ALTER TABLE {job_table} ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {archived_job_table} ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
CREATE INDEX {claim_index} ON {job_table} (queue, (-priority), process_at);
DROP INDEX IF EXISTS {schema}.{index};
"""

MYSQL_6 = """\
ALTER TABLE {job_table}
    ADD COLUMN priority INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN priority_rank INTEGER AS (-priority) VIRTUAL,
    ADD INDEX {claim_index} (queue, priority_rank, process_at),
    DROP INDEX {index};
ALTER TABLE {archived_job_table} ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
"""

# Paused queues: one row per paused queue, which workers read once per polling interval.
POSTGRESQL_6 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {paused_table}")
MYSQL_7 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {paused_table}")

# Long jobs: lease mode's holder of a running job, and the claim counts that bound crash
# loops in the held-transaction mode (max_crashes).
POSTGRESQL_7 = "ALTER TABLE {job_table} ADD COLUMN leased_by TEXT;\n" + _statement(
    POSTGRESQL, "CREATE TABLE IF NOT EXISTS {claims_table}"
)
MYSQL_8 = "ALTER TABLE {job_table} ADD COLUMN leased_by VARCHAR(255) NULL;\n" + _statement(
    MYSQL, "CREATE TABLE IF NOT EXISTS {claims_table}"
)

# Observability: the trace context captured at enqueue (tracing links a job's run to the
# request that enqueued it), and the archive by time for the dashboard's overview. IF NOT
# EXISTS: on a large archive, build the index beforehand with CREATE INDEX CONCURRENTLY.
POSTGRESQL_8 = """\
ALTER TABLE {job_table} ADD COLUMN trace_context TEXT;
CREATE INDEX IF NOT EXISTS {finished_index} ON {archived_job_table} (finished_at, queue, status);
"""

# On MySQL the claim index also gains attempts and leased_by, so the overview counts a
# queue's jobs by state from the index alone rather than from every row.
MYSQL_9 = """\
ALTER TABLE {job_table}
    ADD COLUMN trace_context TEXT NULL,
    DROP INDEX {claim_index},
    ADD INDEX {claim_index} (queue, priority_rank, process_at, attempts, leased_by);
ALTER TABLE {archived_job_table} ADD INDEX {finished_index} (finished_at, queue, status);
"""

STEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "postgresql": (
        ("proletarian", POSTGRESQL_1),
        ("stored_errors", POSTGRESQL_2),
        ("periodic_jobs", POSTGRESQL_3),
        ("unique_jobs", POSTGRESQL_4),
        ("priorities", POSTGRESQL_5),
        ("paused_queues", POSTGRESQL_6),
        ("long_jobs", POSTGRESQL_7),
        ("observability", POSTGRESQL_8),
    ),
    "mysql": (
        ("proletarian", MYSQL_1),
        ("proletarian_di_types", MYSQL_2),
        ("stored_errors", MYSQL_3),
        ("periodic_jobs", MYSQL_4),
        ("unique_jobs", MYSQL_5),
        ("priorities", MYSQL_6),
        ("paused_queues", MYSQL_7),
        ("long_jobs", MYSQL_8),
        ("observability", MYSQL_9),
    ),
}
"""Each database's migrations in order: (name, template); the version is the position + 1."""

VERSION_TABLE = {
    "postgresql": (
        "CREATE TABLE IF NOT EXISTS {version_table} (job_table TEXT PRIMARY KEY, "
        "version INTEGER NOT NULL, upgraded_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    ),
    "mysql": (
        "CREATE TABLE IF NOT EXISTS {version_table} (job_table VARCHAR(255) PRIMARY KEY, "
        "version INTEGER NOT NULL, upgraded_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
    ),
}
RECORD_VERSION = {
    "postgresql": (
        "INSERT INTO {version_table} (job_table, version) VALUES (%s, %s) "
        "ON CONFLICT (job_table) DO UPDATE SET version = EXCLUDED.version, upgraded_at = now()"
    ),
    "mysql": (
        "INSERT INTO {version_table} (job_table, version, upgraded_at) "
        "VALUES (%s, %s, UTC_TIMESTAMP(6)) "
        "ON DUPLICATE KEY UPDATE version = VALUES(version), upgraded_at = VALUES(upgraded_at)"
    ),
}

FULL = {
    dialect: f"{tables}\n-- the schema's version, recorded on upgrade\n{VERSION_TABLE[dialect]};\n"
    for dialect, tables in (("postgresql", POSTGRESQL), ("mysql", MYSQL))
}
"""The full current schema of each database, for a fresh install."""
