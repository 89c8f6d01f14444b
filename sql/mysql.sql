-- proletarian-di schema (version 21) for MySQL 8.0.1+ and MariaDB 10.6+ (safe to run twice).
-- Rendered from proletarian_di/schema/; `proletarian-di schema print` renders
-- it for other table names.
-- The /*M! and /*!80017 comments pick a binary NO PAD collation (MariaDB and
-- MySQL 8.0.17+ respectively); on MySQL 8.0.1-8.0.16 replace both with
-- COLLATE utf8mb4_bin (install_schema does).

CREATE DATABASE IF NOT EXISTS proletarian;

CREATE TABLE IF NOT EXISTS proletarian.job (
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
    UNIQUE INDEX job_queue_unique_key (unique_key, queue),
    -- the claim's order, the job id breaking ties (see step 13); attempts and leased_by let
    -- the dashboard count without the rows
    INDEX job_queue_priority_process_at (queue, priority_rank, process_at, job_id, attempts, leased_by),
    INDEX job_enqueued_at (enqueued_at, job_id), -- the listings' order, newest first
    INDEX job_queue_group_key (queue, group_key, priority_rank, process_at, job_id) -- fair claims
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.archived_job (
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
    INDEX archived_job_finished_at (finished_at, queue, status), -- the archive by time (dashboard)
    INDEX archived_job_enqueued_at (enqueued_at, job_id) -- the listings' order
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_periodic (
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
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_paused (
    queue       VARCHAR(255) PRIMARY KEY, -- a paused queue: its workers claim none of its jobs
    paused_at   DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      BINARY(16) PRIMARY KEY,   -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL          -- its claims, committed apart from its transaction
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS proletarian.job_attempt (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    job_id      BINARY(16) NOT NULL,      -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,         -- the attempt's number, from 1
    started_at  DATETIME(6) NULL,         -- UTC; NULL: unknown (its lease ran out)
    finished_at DATETIME(6) NOT NULL,     -- UTC; when it ended, or was found to have ended
    worker      VARCHAR(255) NULL,        -- who ran it: host:pid thread
    error       TEXT NULL,                -- its error (type, message, trace)
    INDEX job_attempt_job_id (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_workers (
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
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_hourly_outcomes (
    hour        DATETIME(6) NOT NULL,     -- UTC; a clock hour's start, over when written
    queue       VARCHAR(255) NOT NULL,    -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,          -- archived as success in the hour
    failed      BIGINT NOT NULL,          -- archived as failure in the hour
    archived    BIGINT NOT NULL,          -- every archived row of the hour, whatever its status
    checked_at  DATETIME(6) NULL,         -- UTC; on the '' row: when the sums last matched
    PRIMARY KEY (hour, queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_rate_slots (
    bucket      VARCHAR(255) NOT NULL,    -- what is limited: the queue
    slot        INTEGER NOT NULL,         -- 0 to the limit - 1: a start may use it once a period
    used_at     DATETIME(6) NOT NULL,     -- UTC; the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,          -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_results (
    job_id       BINARY(16) PRIMARY KEY,   -- an archived job's id
    status       VARCHAR(16) NOT NULL,     -- success (the Django backend writes its own)
    return_value MEDIUMTEXT NULL,          -- the handler's return value, JSON
    errors       MEDIUMTEXT NULL,          -- the Django backend's errors, JSON
    attempts     INTEGER NOT NULL,
    worker_id    VARCHAR(255) NULL,        -- who ran it: host:pid thread
    started_at   DATETIME(6) NULL,         -- UTC
    finished_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
CREATE TABLE IF NOT EXISTS proletarian.job_dependencies (
    parent_id     BINARY(16) NOT NULL,      -- the job waited on
    job_id        BINARY(16) NOT NULL,      -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL,     -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16) NULL,         -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id),
    INDEX job_dependencies_job_id_status (job_id, parent_status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_blocked (
    job_id      BINARY(16) PRIMARY KEY,   -- a job waiting on others (process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,     -- as its dependencies' wait_for
    blocked_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

CREATE TABLE IF NOT EXISTS proletarian.job_workflows (
    job_id      BINARY(16) PRIMARY KEY,   -- a job of a workflow
    workflow_id BINARY(16) NOT NULL,      -- the workflow's id (`Workflow.enqueue`)
    name        VARCHAR(255) NOT NULL,    -- the workflow's name
    INDEX job_workflows_workflow_id (workflow_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;

-- the schema's version, recorded on upgrade
CREATE TABLE IF NOT EXISTS proletarian.job_schema_version (job_table VARCHAR(255) PRIMARY KEY, version INTEGER NOT NULL, upgraded_at DATETIME(6) NOT NULL) ENGINE=InnoDB;
