"""The schema's SQL, per database: the full current schema and the numbered steps to it.

Templates take {schema}, {job_table}, {archived_job_table}, {index}, {claim_index},
{unique_index}, {finished_index}, {version_table}, {periodic_table}, {paused_table},
{claims_table}, {attempt_table}, {attempt_index}, {workers_table}, {outcomes_table}, {rate_table},
{enqueued_index}, {archived_enqueued_index}, {fair_index}, {results_table}, {dependencies_table},
{dependencies_index}, {blocked_table}, {workflows_table}, {workflows_index}, each table's name
without its schema ({job_table_name}, ...) and, on MySQL, {db} (the tables' database as an SQL
value) and {collation} (a `COLLATE` clause that each server reads for itself). Step 1 is
Proletarian's own schema, exactly as its docs give it, so a database created by Proletarian
(Clojure) is at version 1.
"""

from __future__ import annotations

from collections.abc import Callable

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
    trace_context TEXT,               -- the enqueuer's trace context, JSON (NULL: none)
    group_key   TEXT NOT NULL DEFAULT '' -- a tenant, say: fair claims take turns by it
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
    priority    INTEGER NOT NULL DEFAULT 0,
    started_at  TIMESTAMPTZ,          -- when the last attempt started (NULL: it never ran)
    worker      TEXT                  -- who ran the last attempt: host:pid thread
);

-- the archive by time (the dashboard's overview)
CREATE INDEX IF NOT EXISTS {finished_index} ON {archived_job_table} (finished_at, queue, status);

-- the claim's order: priority (higher first), then process_at
CREATE INDEX IF NOT EXISTS {claim_index} ON {job_table} (queue, (-priority), process_at);

-- the listings' order, newest first (admin.list_jobs, the dashboard's pages of jobs)
CREATE INDEX IF NOT EXISTS {enqueued_index} ON {job_table} (enqueued_at, job_id);

-- fair claims (fair=True) take turns by group key; jobs without one are not in it
CREATE INDEX IF NOT EXISTS {fair_index} ON {job_table} (queue, group_key, (-priority), process_at)
    WHERE group_key <> '';
CREATE INDEX IF NOT EXISTS {archived_enqueued_index} ON {archived_job_table} (enqueued_at, job_id);

CREATE UNIQUE INDEX IF NOT EXISTS {unique_index} ON {job_table} (queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {periodic_table} (
    name        TEXT PRIMARY KEY,     -- the schedule's name (PeriodicJob.name)
    cron        TEXT NOT NULL,        -- its cron expression, as declared
    timezone    TEXT NOT NULL,        -- the IANA time zone the expression is read in
    job_type    TEXT NOT NULL,
    queue       TEXT NOT NULL,
    last_tick   TIMESTAMPTZ NOT NULL, -- the newest tick enqueued or passed over; later ones are due
    updated_at  TIMESTAMPTZ NOT NULL,
    paused_at   TIMESTAMPTZ,          -- disabled since (NULL: enabled): no tick is enqueued
    run_requested_at TIMESTAMPTZ,     -- an operator asked for a run now (NULL: none asked)
    recent_runs TEXT                  -- JSON: the newest jobs it enqueued (id, tick, requested)
);

CREATE TABLE IF NOT EXISTS {paused_table} (
    queue       TEXT PRIMARY KEY,     -- a paused queue: its workers claim none of its jobs
    paused_at   TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS {claims_table} (
    job_id      UUID PRIMARY KEY,     -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL      -- its claims, committed apart from its transaction
);

CREATE TABLE IF NOT EXISTS {attempt_table} (
    id          BIGSERIAL PRIMARY KEY,
    job_id      UUID NOT NULL,        -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,     -- the attempt's number, from 1
    started_at  TIMESTAMPTZ,          -- NULL: unknown (its lease ran out)
    finished_at TIMESTAMPTZ NOT NULL, -- when it ended, or was found to have ended
    worker      TEXT,                 -- who ran it: host:pid thread
    error       TEXT                  -- its error (type, message, trace)
);

CREATE INDEX IF NOT EXISTS {attempt_index} ON {attempt_table} (job_id);

CREATE TABLE IF NOT EXISTS {workers_table} (
    worker_id   TEXT PRIMARY KEY,     -- one running QueueWorker (host:pid:random)
    queue       TEXT NOT NULL,
    queue_worker_id TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    threads     INTEGER NOT NULL,     -- its worker_threads
    state       TEXT NOT NULL,        -- running / stopping
    started_at  TIMESTAMPTZ NOT NULL, -- by the database's clock
    seen_at     TIMESTAMPTZ NOT NULL, -- its last heartbeat, by the database's clock
    activity    TEXT NOT NULL         -- JSON: what each thread does (its job), for how long
);

CREATE TABLE IF NOT EXISTS {outcomes_table} (
    hour        TIMESTAMPTZ NOT NULL, -- a clock hour's start, over for a while when written
    queue       TEXT NOT NULL,        -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,      -- archived as success in the hour
    failed      BIGINT NOT NULL,      -- archived as failure in the hour
    archived    BIGINT NOT NULL,      -- every archived row of the hour, whatever its status
    checked_at  TIMESTAMPTZ,          -- on the '' row: when the sums last matched the archive
    PRIMARY KEY (hour, queue)
);
CREATE TABLE IF NOT EXISTS {rate_table} (
    bucket      TEXT NOT NULL,        -- what is limited: the queue
    slot        INTEGER NOT NULL,     -- 0 to the limit - 1: a start may use it once a period
    used_at     TIMESTAMPTZ NOT NULL, -- the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,      -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
);
CREATE TABLE IF NOT EXISTS {results_table} (
    job_id       UUID PRIMARY KEY,     -- an archived job's id
    status       VARCHAR(16) NOT NULL, -- success (the Django backend writes its own statuses)
    return_value TEXT,                 -- the handler's return value, JSON
    errors       TEXT,                 -- the Django backend's errors, JSON
    attempts     INTEGER NOT NULL,
    worker_id    VARCHAR(255),         -- who ran it: host:pid thread
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS {dependencies_table} (
    parent_id     UUID NOT NULL,        -- the job waited on
    job_id        UUID NOT NULL,        -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL, -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16),          -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id)
);
CREATE INDEX IF NOT EXISTS {dependencies_index} ON {dependencies_table} (job_id, parent_status);
CREATE TABLE IF NOT EXISTS {blocked_table} (
    job_id      UUID PRIMARY KEY,       -- a job waiting on others (its process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,   -- as its dependencies' wait_for
    blocked_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS {workflows_table} (
    job_id      UUID PRIMARY KEY,       -- a job of a workflow
    workflow_id UUID NOT NULL,          -- the workflow's id (`Workflow.enqueue`)
    name        TEXT NOT NULL           -- the workflow's name
);
CREATE INDEX IF NOT EXISTS {workflows_index} ON {workflows_table} (workflow_id);
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
    group_key   VARCHAR(255) NOT NULL DEFAULT '', -- a tenant, say: fair claims take turns by it
    -- the key first: a job with no key (NULL) never sits beside a key in it (see step 10)
    UNIQUE INDEX {unique_index} (unique_key, queue),
    -- the claim's order, the job id breaking ties (see step 13); attempts and leased_by let
    -- the dashboard count without the rows
    INDEX {claim_index} (queue, priority_rank, process_at, job_id, attempts, leased_by),
    INDEX {enqueued_index} (enqueued_at, job_id), -- the listings' order, newest first
    INDEX {fair_index} (queue, group_key, priority_rank, process_at, job_id) -- fair claims
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
    started_at  DATETIME(6) NULL,       -- UTC; when the last attempt started (NULL: it never ran)
    worker      VARCHAR(255) NULL,      -- who ran the last attempt: host:pid thread
    INDEX {finished_index} (finished_at, queue, status), -- the archive by time (dashboard)
    INDEX {archived_enqueued_index} (enqueued_at, job_id) -- the listings' order
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {periodic_table} (
    name        VARCHAR(255) PRIMARY KEY, -- the schedule's name (PeriodicJob.name)
    cron        VARCHAR(255) NOT NULL,    -- its cron expression, as declared
    timezone    VARCHAR(64) NOT NULL,     -- the IANA time zone the expression is read in
    job_type    VARCHAR(255) NOT NULL,
    queue       VARCHAR(255) NOT NULL,
    last_tick   DATETIME(6) NOT NULL,     -- UTC; the newest tick enqueued or passed over
    updated_at  DATETIME(6) NOT NULL,     -- UTC
    paused_at   DATETIME(6) NULL,         -- UTC; disabled since (NULL: enabled)
    run_requested_at DATETIME(6) NULL,    -- UTC; an operator asked for a run now
    recent_runs TEXT NULL                 -- JSON: the newest jobs it enqueued (id, tick, requested)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {paused_table} (
    queue       VARCHAR(255) PRIMARY KEY, -- a paused queue: its workers claim none of its jobs
    paused_at   DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {claims_table} (
    job_id      BINARY(16) PRIMARY KEY,   -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL          -- its claims, committed apart from its transaction
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS {attempt_table} (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    job_id      BINARY(16) NOT NULL,      -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,         -- the attempt's number, from 1
    started_at  DATETIME(6) NULL,         -- UTC; NULL: unknown (its lease ran out)
    finished_at DATETIME(6) NOT NULL,     -- UTC; when it ended, or was found to have ended
    worker      VARCHAR(255) NULL,        -- who ran it: host:pid thread
    error       TEXT NULL,                -- its error (type, message, trace)
    INDEX {attempt_index} (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {workers_table} (
    worker_id   VARCHAR(255) PRIMARY KEY, -- one running QueueWorker (host:pid:random)
    queue       VARCHAR(255) NOT NULL,
    queue_worker_id VARCHAR(255) NOT NULL,
    host        VARCHAR(255) NOT NULL,
    pid         INTEGER NOT NULL,
    threads     INTEGER NOT NULL,         -- its worker_threads
    state       VARCHAR(16) NOT NULL,     -- running / stopping
    started_at  DATETIME(6) NOT NULL,     -- UTC, by the database's clock
    seen_at     DATETIME(6) NOT NULL,     -- UTC; its last heartbeat, by the database's clock
    activity    MEDIUMTEXT NOT NULL       -- JSON: what each thread does (its job), for how long
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {outcomes_table} (
    hour        DATETIME(6) NOT NULL,     -- UTC; a clock hour's start, over when written
    queue       VARCHAR(255) NOT NULL,    -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,          -- archived as success in the hour
    failed      BIGINT NOT NULL,          -- archived as failure in the hour
    archived    BIGINT NOT NULL,          -- every archived row of the hour, whatever its status
    checked_at  DATETIME(6) NULL,         -- UTC; on the '' row: when the sums last matched
    PRIMARY KEY (hour, queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {rate_table} (
    bucket      VARCHAR(255) NOT NULL,    -- what is limited: the queue
    slot        INTEGER NOT NULL,         -- 0 to the limit - 1: a start may use it once a period
    used_at     DATETIME(6) NOT NULL,     -- UTC; the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,          -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {results_table} (
    job_id       BINARY(16) PRIMARY KEY,   -- an archived job's id
    status       VARCHAR(16) NOT NULL,     -- success (the Django backend writes its own)
    return_value MEDIUMTEXT NULL,          -- the handler's return value, JSON
    errors       MEDIUMTEXT NULL,          -- the Django backend's errors, JSON
    attempts     INTEGER NOT NULL,
    worker_id    VARCHAR(255) NULL,        -- who ran it: host:pid thread
    started_at   DATETIME(6) NULL,         -- UTC
    finished_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};
CREATE TABLE IF NOT EXISTS {dependencies_table} (
    parent_id     BINARY(16) NOT NULL,      -- the job waited on
    job_id        BINARY(16) NOT NULL,      -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL,     -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16) NULL,         -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id),
    INDEX {dependencies_index} (job_id, parent_status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {blocked_table} (
    job_id      BINARY(16) PRIMARY KEY,   -- a job waiting on others (process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,     -- as its dependencies' wait_for
    blocked_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {workflows_table} (
    job_id      BINARY(16) PRIMARY KEY,   -- a job of a workflow
    workflow_id BINARY(16) NOT NULL,      -- the workflow's id (`Workflow.enqueue`)
    name        VARCHAR(255) NOT NULL,    -- the workflow's name
    INDEX {workflows_index} (workflow_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};
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

# Each later step is safe to run again after an interruption at any statement (MySQL commits
# every DDL statement, and a file run by hand stops where it failed): a change is made only
# when the catalog shows it missing. A condition below is true once a change is in place.


def _pg_column(table: str, column: str) -> str:
    return (
        "EXISTS (SELECT 1 FROM pg_attribute\n"
        f"        WHERE attrelid = to_regclass('{{{table}}}') "
        f"AND attname = '{column}' AND NOT attisdropped)"
    )


def _pg_table(table: str) -> str:
    return f"to_regclass('{{{table}}}') IS NOT NULL"


def _pg_index(table: str, name: str) -> str:
    return (
        "EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        f"WHERE i.indrelid = to_regclass('{{{table}}}') AND c.relname = '{name}')"
    )


def _pg_add_column(table: str, definition: str) -> str:
    """ADD COLUMN unless the column is there (ADD COLUMN IF NOT EXISTS needs 9.6)."""
    done = _pg_column(table, definition.split()[0])
    return (
        f"DO $$ BEGIN\n    IF NOT {done} THEN\n"
        f"        ALTER TABLE {{{table}}} ADD COLUMN {definition};\n    END IF;\nEND $$;\n"
    )


def _my_where(table: str) -> str:
    return f"\n        WHERE table_schema = {{db}} AND table_name = '{{{table}_name}}'"


def _my_column(table: str, column: str) -> str:
    return (
        f"EXISTS (SELECT 1 FROM information_schema.columns{_my_where(table)} "
        f"AND column_name = '{column}')"
    )


def _my_table(table: str) -> str:
    return f"EXISTS (SELECT 1 FROM information_schema.tables{_my_where(table)})"


def _my_index(table: str, name: str, column: str | None = None, seq: int | None = None) -> str:
    """The index exists (and includes `column`, as its `seq`th column if given)."""
    including = f" AND column_name = '{column}'" if column else ""
    including += f" AND seq_in_index = {seq}" if seq else ""
    return (
        f"EXISTS (SELECT 1 FROM information_schema.statistics{_my_where(table)} "
        f"AND index_name = '{name}'{including})"
    )


def _my_converted(table: str) -> str:
    """The table has proletarian-di's column types (Proletarian's process_at is a TIMESTAMP)."""
    return (
        f"NOT EXISTS (SELECT 1 FROM information_schema.columns{_my_where(table)} "
        "AND column_name = 'process_at' AND data_type = 'timestamp')"
    )


def _my_alter(table: str, *changes: tuple[str, str]) -> str:
    """ALTER TABLE with those of its (done, clause) changes not done yet, in one statement (one
    rebuild, one wait for the table's lock); nothing when all are. Prepared, as MySQL has no
    IF NOT EXISTS for columns and indexes."""
    for _, clause in changes:
        if any(mark in clause for mark in (";", "--")):
            raise ValueError(f"a clause, quoted in a string, holds ; or --: {clause!r}")
    parts = ",\n    ".join(
        "IF({},\n       NULL, '{}')".format(done, clause.replace("'", "''"))
        for done, clause in changes
    )
    return (
        f"SET @ddl = CONCAT_WS(', ',\n    {parts});\n"
        f"SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE {{{table}}} ', @ddl));\n"
        "PREPARE ddl FROM @ddl;\nEXECUTE ddl;\nDEALLOCATE PREPARE ddl;\n"
    )


def _statement(schema: str, start: str) -> str:
    """The full schema's statement that begins with `start`, as a step of its own."""
    begin = schema.index(start)
    return schema[begin : schema.index(";\n", begin) + 2]


def _before(statement: str, *later: str) -> str:
    """A full schema's CREATE TABLE as an earlier step wrote it: without the columns (named
    in `later`) that later steps add."""
    lines = statement.splitlines(keepends=True)
    return "".join(line for line in lines if not line.lstrip().startswith(later))


POSTGRESQL_2 = _pg_add_column("job_table", "last_error TEXT") + _pg_add_column(
    "archived_job_table", "last_error TEXT"
)

# The periodic table: the step is the full schema's own statement.
POSTGRESQL_3 = _before(
    _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {periodic_table}"),
    "paused_at ",
    "run_requested_at ",
    "recent_runs ",
).replace("updated_at  TIMESTAMPTZ NOT NULL,", "updated_at  TIMESTAMPTZ NOT NULL")

POSTGRESQL_4 = (
    _pg_add_column("job_table", "unique_key TEXT")
    + """\
CREATE UNIQUE INDEX IF NOT EXISTS {unique_index} ON {job_table} (queue, unique_key)
    WHERE unique_key IS NOT NULL;
"""
)

# Priorities: the claim's index orders a queue's jobs by priority, higher first, then by
# process_at; it replaces the (queue, process_at) index.
POSTGRESQL_5 = (
    _pg_add_column("job_table", "priority INTEGER NOT NULL DEFAULT 0")
    + _pg_add_column("archived_job_table", "priority INTEGER NOT NULL DEFAULT 0")
    + """\
CREATE INDEX IF NOT EXISTS {claim_index} ON {job_table} (queue, (-priority), process_at);
DROP INDEX IF EXISTS {schema}.{index};
"""
)

# Paused queues: one row per paused queue, which workers read once per polling interval.
POSTGRESQL_6 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {paused_table}")

# Long jobs: lease mode's holder of a running job, and the claim counts that bound crash
# loops in the held-transaction mode (max_crashes).
POSTGRESQL_7 = _pg_add_column("job_table", "leased_by TEXT") + _statement(
    POSTGRESQL, "CREATE TABLE IF NOT EXISTS {claims_table}"
)

# Observability: the trace context captured at enqueue (tracing links a job's run to the
# request that enqueued it), and the archive by time for the dashboard's overview. On a
# large archive, build the index beforehand with CREATE INDEX CONCURRENTLY.
POSTGRESQL_8 = (
    _pg_add_column("job_table", "trace_context TEXT")
    + """\
CREATE INDEX IF NOT EXISTS {finished_index} ON {archived_job_table} (finished_at, queue, status);
"""
)

# Attempts: the archive keeps when the last attempt started and who ran it (the run's own
# statement writes them), and every failed attempt gets a row of the attempt table.
POSTGRESQL_9 = (
    _pg_add_column("archived_job_table", "started_at TIMESTAMPTZ")
    + _pg_add_column("archived_job_table", "worker TEXT")
    + _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {attempt_table}")
    + _statement(POSTGRESQL, "CREATE INDEX IF NOT EXISTS {attempt_index}")
)

# Live workers: one row per running QueueWorker, refreshed by its heartbeat (see _registry).
POSTGRESQL_10 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {workers_table}")

# The archive's outcomes per clock hour and queue, summed up by workers once an hour is over
# (see _outcomes), so that the overview and `stats` read a day of them instead of a day of
# the archive. Readers read the archive for hours not summed up: nothing needs the step.
POSTGRESQL_11 = _before(
    _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {outcomes_table}"), "checked_at "
)

# The listings' order, newest first: a page of jobs reads its rows from both tables' indexes
# instead of sorting them (a second at ten million archived jobs). On a large archive, build
# the indexes beforehand with CREATE INDEX CONCURRENTLY: CREATE INDEX holds up the workers'
# archive inserts while it runs.
POSTGRESQL_12 = _statement(POSTGRESQL, "CREATE INDEX IF NOT EXISTS {enqueued_index}") + _statement(
    POSTGRESQL, "CREATE INDEX IF NOT EXISTS {archived_enqueued_index}"
)

# Rate limits (`rate_limit`): a start of a job of a limited queue takes one of its `limit`
# slots whose last start is a period old, in the claim's transaction (see _rates).
POSTGRESQL_13 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {rate_table}")

# Fair claims (`fair=True`) and group keys (`enqueue(group_key=...)`): a claim takes turns
# across a queue's group keys, in the order of an index of its own (partial: jobs without a
# key cost it nothing).
POSTGRESQL_14 = _pg_add_column("job_table", "group_key TEXT NOT NULL DEFAULT ''") + _statement(
    POSTGRESQL, "CREATE INDEX IF NOT EXISTS {fair_index}"
)

# Results: a handler's return value, kept with its archived job (and the Django backend's
# task results, in the table it created before this step).
POSTGRESQL_15 = _statement(POSTGRESQL, "CREATE TABLE IF NOT EXISTS {results_table}")

# Dependencies and workflows: a job blocked until the jobs it depends on have ended (see
# _dependencies), and the workflows that enqueue such graphs.
POSTGRESQL_16 = "".join(
    _statement(POSTGRESQL, start)
    for start in (
        "CREATE TABLE IF NOT EXISTS {dependencies_table}",
        "CREATE INDEX IF NOT EXISTS {dependencies_index}",
        "CREATE TABLE IF NOT EXISTS {blocked_table}",
        "CREATE TABLE IF NOT EXISTS {workflows_table}",
        "CREATE INDEX IF NOT EXISTS {workflows_index}",
    )
)

# When each summed hour last matched the archive: workers count the hours again, one at a
# time, and replace the sums of one that changed behind their back (see _outcomes.recheck).
# Without it the sums are kept as summed.
POSTGRESQL_17 = _pg_add_column("outcomes_table", "checked_at TIMESTAMPTZ")

# Schedules an operator controls: disabled since (no tick is enqueued while it is set), a run
# asked for now (enqueued once by a scheduler, which clears it), and the newest jobs each
# schedule enqueued. Schedulers on an older schema run the schedules as before.
POSTGRESQL_18 = (
    _pg_add_column("periodic_table", "paused_at TIMESTAMPTZ")
    + _pg_add_column("periodic_table", "run_requested_at TIMESTAMPTZ")
    + _pg_add_column("periodic_table", "recent_runs TEXT")
)

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
_MY_TYPES = (
    "CONVERT TO CHARACTER SET utf8mb4 {collation}, "
    "MODIFY queue VARCHAR(255) NOT NULL, MODIFY job_type VARCHAR(255) NOT NULL, "
    "MODIFY payload LONGTEXT NOT NULL, MODIFY enqueued_at DATETIME(6) NOT NULL, "
    "MODIFY process_at DATETIME(6) NOT NULL"
)
MYSQL_2 = (
    "SET time_zone = '+00:00'; -- TIMESTAMP values become UTC DATETIME values\n\n"
    + _my_alter(
        "job_table",
        # Proletarian's unnamed INDEX (queue(256), process_at) is called queue
        (f"NOT {_my_index('job_table', 'queue')}", "DROP INDEX queue"),
        (_my_converted("job_table"), _MY_TYPES),
        (_my_index("job_table", "{index}"), "ADD INDEX {index} (queue, process_at)"),
    )
    + _my_alter(
        "archived_job_table",
        (
            _my_converted("archived_job_table"),
            f"{_MY_TYPES}, MODIFY status VARCHAR(16) NOT NULL, "
            "MODIFY finished_at DATETIME(6) NOT NULL",
        ),
    )
)

MYSQL_3 = _my_alter(
    "job_table", (_my_column("job_table", "last_error"), "ADD COLUMN last_error TEXT NULL")
) + _my_alter(
    "archived_job_table",
    (_my_column("archived_job_table", "last_error"), "ADD COLUMN last_error TEXT NULL"),
)

MYSQL_4 = _before(
    _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {periodic_table}"),
    "paused_at ",
    "run_requested_at ",
    "recent_runs ",
).replace(
    "updated_at  DATETIME(6) NOT NULL,     -- UTC", "updated_at  DATETIME(6) NOT NULL      -- UTC"
)

MYSQL_5 = _my_alter(
    "job_table",
    (_my_column("job_table", "unique_key"), "ADD COLUMN unique_key VARCHAR(255) NULL"),
    (
        _my_index("job_table", "{unique_index}"),
        "ADD UNIQUE INDEX {unique_index} (queue, unique_key)",
    ),
)

MYSQL_6 = _my_alter(
    "job_table",
    (_my_column("job_table", "priority"), "ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"),
    (
        _my_column("job_table", "priority_rank"),
        "ADD COLUMN priority_rank INTEGER AS (-priority) VIRTUAL",
    ),
    (
        _my_index("job_table", "{claim_index}"),
        "ADD INDEX {claim_index} (queue, priority_rank, process_at)",
    ),
    (f"NOT {_my_index('job_table', '{index}')}", "DROP INDEX {index}"),
) + _my_alter(
    "archived_job_table",
    (
        _my_column("archived_job_table", "priority"),
        "ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    ),
)

MYSQL_7 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {paused_table}")

MYSQL_8 = _my_alter(
    "job_table", (_my_column("job_table", "leased_by"), "ADD COLUMN leased_by VARCHAR(255) NULL")
) + _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {claims_table}")

# On MySQL the claim index also gains attempts and leased_by, so the overview counts a
# queue's jobs by state from the index alone rather than from every row.
MYSQL_9 = _my_alter(
    "job_table",
    (_my_column("job_table", "trace_context"), "ADD COLUMN trace_context TEXT NULL"),
    (
        _my_index("job_table", "{claim_index}", "attempts"),
        "DROP INDEX {claim_index}, "
        "ADD INDEX {claim_index} (queue, priority_rank, process_at, attempts, leased_by)",
    ),
) + _my_alter(
    "archived_job_table",
    (
        _my_index("archived_job_table", "{finished_index}"),
        "ADD INDEX {finished_index} (finished_at, queue, status)",
    ),
)

# An enqueuer of a key checks for duplicates by locking the key's index entries and the
# entry after them; with the queue first, that was the next queue's first job without a key,
# perhaps one that another enqueuer's transaction had just written before it waited for the
# key's turn (see MySQLDialect.try_insert_unique): a cycle InnoDB cannot see. With the key
# first, jobs without one sort before every key.
MYSQL_10 = _my_alter(
    "job_table",
    (
        _my_index("job_table", "{unique_index}", "unique_key", seq=1),
        "DROP INDEX {unique_index}, ADD UNIQUE INDEX {unique_index} (unique_key, queue)",
    ),
)

MYSQL_11 = _my_alter(
    "archived_job_table",
    (_my_column("archived_job_table", "started_at"), "ADD COLUMN started_at DATETIME(6) NULL"),
    (_my_column("archived_job_table", "worker"), "ADD COLUMN worker VARCHAR(255) NULL"),
) + _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {attempt_table}")

# Live workers: one row per running QueueWorker, refreshed by its heartbeat (see _registry).
MYSQL_12 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {workers_table}")

# The job id after process_at in the claim index: jobs enqueued together share a process_at,
# and a worker's claim starts past the ones it ran (see MySQLDialect.claim_from) instead of
# walking their entries, which InnoDB keeps until its purge removes them. Workers run
# without it, each claim walking them as before.
MYSQL_13 = _my_alter(
    "job_table",
    (
        _my_index("job_table", "{claim_index}", "job_id", seq=4),
        "DROP INDEX {claim_index}, ADD INDEX {claim_index} "
        "(queue, priority_rank, process_at, job_id, attempts, leased_by)",
    ),
)

# The archive's outcomes per clock hour and queue (POSTGRESQL_11).
MYSQL_14 = _before(_statement(MYSQL, "CREATE TABLE IF NOT EXISTS {outcomes_table}"), "checked_at ")

# The listings' order (POSTGRESQL_12).
MYSQL_15 = _my_alter(
    "job_table",
    (
        _my_index("job_table", "{enqueued_index}"),
        "ADD INDEX {enqueued_index} (enqueued_at, job_id)",
    ),
) + _my_alter(
    "archived_job_table",
    (
        _my_index("archived_job_table", "{archived_enqueued_index}"),
        "ADD INDEX {archived_enqueued_index} (enqueued_at, job_id)",
    ),
)

# Rate limits (POSTGRESQL_13).
MYSQL_16 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {rate_table}")

# Fair claims and group keys (POSTGRESQL_14); MySQL has no partial index.
MYSQL_17 = _my_alter(
    "job_table",
    (_my_column("job_table", "group_key"), "ADD COLUMN group_key VARCHAR(255) NOT NULL DEFAULT ''"),
    (
        _my_index("job_table", "{fair_index}"),
        "ADD INDEX {fair_index} (queue, group_key, priority_rank, process_at, job_id)",
    ),
)

# Results (POSTGRESQL_15).
MYSQL_18 = _statement(MYSQL, "CREATE TABLE IF NOT EXISTS {results_table}")

# Dependencies and workflows (POSTGRESQL_16).
MYSQL_19 = "".join(
    _statement(MYSQL, start)
    for start in (
        "CREATE TABLE IF NOT EXISTS {dependencies_table}",
        "CREATE TABLE IF NOT EXISTS {blocked_table}",
        "CREATE TABLE IF NOT EXISTS {workflows_table}",
    )
)

# When each summed hour last matched the archive (POSTGRESQL_17).
MYSQL_20 = _my_alter(
    "outcomes_table",
    (_my_column("outcomes_table", "checked_at"), "ADD COLUMN checked_at DATETIME(6) NULL"),
)

# Schedules an operator controls (POSTGRESQL_18).
MYSQL_21 = _my_alter(
    "periodic_table",
    (_my_column("periodic_table", "paused_at"), "ADD COLUMN paused_at DATETIME(6) NULL"),
    (
        _my_column("periodic_table", "run_requested_at"),
        "ADD COLUMN run_requested_at DATETIME(6) NULL",
    ),
    (_my_column("periodic_table", "recent_runs"), "ADD COLUMN recent_runs TEXT NULL"),
)


def _both(check: Callable[..., str], *args: str) -> tuple[str, str]:
    """The condition on the job table and on the archive."""
    return check("job_table", *args), check("archived_job_table", *args)


STEPS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "postgresql": (
        (
            "proletarian",
            POSTGRESQL_1,
            # its index, or the claim index that replaces it at step 5
            (
                *_both(_pg_table),
                f"({_pg_index('job_table', '{index}')} OR "
                f"{_pg_index('job_table', '{claim_index}')})",
            ),
        ),
        ("stored_errors", POSTGRESQL_2, _both(_pg_column, "last_error")),
        ("periodic_jobs", POSTGRESQL_3, (_pg_table("periodic_table"),)),
        (
            "unique_jobs",
            POSTGRESQL_4,
            (_pg_column("job_table", "unique_key"), _pg_index("job_table", "{unique_index}")),
        ),
        (
            "priorities",
            POSTGRESQL_5,
            (
                *_both(_pg_column, "priority"),
                _pg_index("job_table", "{claim_index}"),
                f"NOT {_pg_index('job_table', '{index}')}",
            ),
        ),
        ("paused_queues", POSTGRESQL_6, (_pg_table("paused_table"),)),
        (
            "long_jobs",
            POSTGRESQL_7,
            (_pg_column("job_table", "leased_by"), _pg_table("claims_table")),
        ),
        (
            "observability",
            POSTGRESQL_8,
            (
                _pg_column("job_table", "trace_context"),
                _pg_index("archived_job_table", "{finished_index}"),
            ),
        ),
        (
            "attempts",
            POSTGRESQL_9,
            (
                _pg_column("archived_job_table", "started_at"),
                _pg_column("archived_job_table", "worker"),
                _pg_index("attempt_table", "{attempt_index}"),
            ),
        ),
        ("live_workers", POSTGRESQL_10, (_pg_table("workers_table"),)),
        ("hourly_outcomes", POSTGRESQL_11, (_pg_table("outcomes_table"),)),
        (
            "listings",
            POSTGRESQL_12,
            (
                _pg_index("job_table", "{enqueued_index}"),
                _pg_index("archived_job_table", "{archived_enqueued_index}"),
            ),
        ),
        ("rate_limits", POSTGRESQL_13, (_pg_table("rate_table"),)),
        (
            "group_keys",
            POSTGRESQL_14,
            (_pg_column("job_table", "group_key"), _pg_index("job_table", "{fair_index}")),
        ),
        ("results", POSTGRESQL_15, (_pg_table("results_table"),)),
        (
            "workflows",
            POSTGRESQL_16,
            (
                _pg_index("dependencies_table", "{dependencies_index}"),
                _pg_table("blocked_table"),
                _pg_index("workflows_table", "{workflows_index}"),
            ),
        ),
        ("outcomes_checked", POSTGRESQL_17, (_pg_column("outcomes_table", "checked_at"),)),
        (
            "schedule_controls",
            POSTGRESQL_18,
            tuple(
                _pg_column("periodic_table", column)
                for column in ("paused_at", "run_requested_at", "recent_runs")
            ),
        ),
    ),
    "mysql": (
        ("proletarian", MYSQL_1, _both(_my_table)),
        ("proletarian_di_types", MYSQL_2, _both(_my_converted)),
        ("stored_errors", MYSQL_3, _both(_my_column, "last_error")),
        ("periodic_jobs", MYSQL_4, (_my_table("periodic_table"),)),
        (
            "unique_jobs",
            MYSQL_5,
            (_my_column("job_table", "unique_key"), _my_index("job_table", "{unique_index}")),
        ),
        (
            "priorities",
            MYSQL_6,
            (
                *_both(_my_column, "priority"),
                _my_column("job_table", "priority_rank"),
                _my_index("job_table", "{claim_index}"),
                f"NOT {_my_index('job_table', '{index}')}",
            ),
        ),
        ("paused_queues", MYSQL_7, (_my_table("paused_table"),)),
        (
            "long_jobs",
            MYSQL_8,
            (_my_column("job_table", "leased_by"), _my_table("claims_table")),
        ),
        (
            "observability",
            MYSQL_9,
            (
                _my_column("job_table", "trace_context"),
                _my_index("job_table", "{claim_index}", "attempts"),
                _my_index("archived_job_table", "{finished_index}"),
            ),
        ),
        (
            "unique_key_first",
            MYSQL_10,
            (_my_index("job_table", "{unique_index}", "unique_key", seq=1),),
        ),
        (
            "attempts",
            MYSQL_11,
            (
                _my_column("archived_job_table", "started_at"),
                _my_column("archived_job_table", "worker"),
                _my_index("attempt_table", "{attempt_index}"),
            ),
        ),
        ("live_workers", MYSQL_12, (_my_table("workers_table"),)),
        ("claim_ties", MYSQL_13, (_my_index("job_table", "{claim_index}", "job_id", seq=4),)),
        ("hourly_outcomes", MYSQL_14, (_my_table("outcomes_table"),)),
        (
            "listings",
            MYSQL_15,
            (
                _my_index("job_table", "{enqueued_index}"),
                _my_index("archived_job_table", "{archived_enqueued_index}"),
            ),
        ),
        ("rate_limits", MYSQL_16, (_my_table("rate_table"),)),
        (
            "group_keys",
            MYSQL_17,
            (_my_column("job_table", "group_key"), _my_index("job_table", "{fair_index}")),
        ),
        ("results", MYSQL_18, (_my_table("results_table"),)),
        (
            "workflows",
            MYSQL_19,
            (
                _my_table("dependencies_table"),
                _my_table("blocked_table"),
                _my_table("workflows_table"),
            ),
        ),
        ("outcomes_checked", MYSQL_20, (_my_column("outcomes_table", "checked_at"),)),
        (
            "schedule_controls",
            MYSQL_21,
            tuple(
                _my_column("periodic_table", column)
                for column in ("paused_at", "run_requested_at", "recent_runs")
            ),
        ),
    ),
}
"""Each database's migrations in order: (name, template, what it leaves behind: the
conditions, true once it is applied, by which an unrecorded or interrupted schema's version is
read off the catalog); the version is the position + 1."""

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
