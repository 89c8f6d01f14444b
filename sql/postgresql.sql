-- proletarian-di schema (version 18) for PostgreSQL 9.5+ (safe to run twice).
-- Rendered from proletarian_di/schema/; `proletarian-di schema print` renders
-- it for other table names.

CREATE SCHEMA IF NOT EXISTS proletarian;

CREATE TABLE IF NOT EXISTS proletarian.job (
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

CREATE TABLE IF NOT EXISTS proletarian.archived_job (
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
CREATE INDEX IF NOT EXISTS archived_job_finished_at ON proletarian.archived_job (finished_at, queue, status);

-- the claim's order: priority (higher first), then process_at
CREATE INDEX IF NOT EXISTS job_queue_priority_process_at ON proletarian.job (queue, (-priority), process_at);

-- the listings' order, newest first (admin.list_jobs, the dashboard's pages of jobs)
CREATE INDEX IF NOT EXISTS job_enqueued_at ON proletarian.job (enqueued_at, job_id);

-- fair claims (fair=True) take turns by group key; jobs without one are not in it
CREATE INDEX IF NOT EXISTS job_queue_group_key ON proletarian.job (queue, group_key, (-priority), process_at)
    WHERE group_key <> '';
CREATE INDEX IF NOT EXISTS archived_job_enqueued_at ON proletarian.archived_job (enqueued_at, job_id);

CREATE UNIQUE INDEX IF NOT EXISTS job_queue_unique_key ON proletarian.job (queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS proletarian.job_periodic (
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

CREATE TABLE IF NOT EXISTS proletarian.job_paused (
    queue       TEXT PRIMARY KEY,     -- a paused queue: its workers claim none of its jobs
    paused_at   TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      UUID PRIMARY KEY,     -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL      -- its claims, committed apart from its transaction
);

CREATE TABLE IF NOT EXISTS proletarian.job_attempt (
    id          BIGSERIAL PRIMARY KEY,
    job_id      UUID NOT NULL,        -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,     -- the attempt's number, from 1
    started_at  TIMESTAMPTZ,          -- NULL: unknown (its lease ran out)
    finished_at TIMESTAMPTZ NOT NULL, -- when it ended, or was found to have ended
    worker      TEXT,                 -- who ran it: host:pid thread
    error       TEXT                  -- its error (type, message, trace)
);

CREATE INDEX IF NOT EXISTS job_attempt_job_id ON proletarian.job_attempt (job_id);

CREATE TABLE IF NOT EXISTS proletarian.job_workers (
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

CREATE TABLE IF NOT EXISTS proletarian.job_hourly_outcomes (
    hour        TIMESTAMPTZ NOT NULL, -- a clock hour's start, over for a while when written
    queue       TEXT NOT NULL,        -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,      -- archived as success in the hour
    failed      BIGINT NOT NULL,      -- archived as failure in the hour
    archived    BIGINT NOT NULL,      -- every archived row of the hour, whatever its status
    checked_at  TIMESTAMPTZ,          -- on the '' row: when the sums last matched the archive
    PRIMARY KEY (hour, queue)
);
CREATE TABLE IF NOT EXISTS proletarian.job_rate_slots (
    bucket      TEXT NOT NULL,        -- what is limited: the queue
    slot        INTEGER NOT NULL,     -- 0 to the limit - 1: a start may use it once a period
    used_at     TIMESTAMPTZ NOT NULL, -- the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,      -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
);
CREATE TABLE IF NOT EXISTS proletarian.job_results (
    job_id       UUID PRIMARY KEY,     -- an archived job's id
    status       VARCHAR(16) NOT NULL, -- success (the Django backend writes its own statuses)
    return_value TEXT,                 -- the handler's return value, JSON
    errors       TEXT,                 -- the Django backend's errors, JSON
    attempts     INTEGER NOT NULL,
    worker_id    VARCHAR(255),         -- who ran it: host:pid thread
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS proletarian.job_dependencies (
    parent_id     UUID NOT NULL,        -- the job waited on
    job_id        UUID NOT NULL,        -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL, -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16),          -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id)
);
CREATE INDEX IF NOT EXISTS job_dependencies_job_id_status ON proletarian.job_dependencies (job_id, parent_status);
CREATE TABLE IF NOT EXISTS proletarian.job_blocked (
    job_id      UUID PRIMARY KEY,       -- a job waiting on others (its process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,   -- as its dependencies' wait_for
    blocked_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS proletarian.job_workflows (
    job_id      UUID PRIMARY KEY,       -- a job of a workflow
    workflow_id UUID NOT NULL,          -- the workflow's id (`Workflow.enqueue`)
    name        TEXT NOT NULL           -- the workflow's name
);
CREATE INDEX IF NOT EXISTS job_workflows_workflow_id ON proletarian.job_workflows (workflow_id);

-- the schema's version, recorded on upgrade
CREATE TABLE IF NOT EXISTS proletarian.job_schema_version (job_table TEXT PRIMARY KEY, version INTEGER NOT NULL, upgraded_at TIMESTAMPTZ NOT NULL DEFAULT now());
