-- proletarian-di schema, step 1 (proletarian) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE SCHEMA IF NOT EXISTS proletarian;

CREATE TABLE IF NOT EXISTS proletarian.job (
    job_id      UUID PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    process_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS proletarian.archived_job (
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

DROP INDEX IF EXISTS proletarian.job_queue_process_at;
CREATE INDEX job_queue_process_at ON proletarian.job (queue, process_at);
