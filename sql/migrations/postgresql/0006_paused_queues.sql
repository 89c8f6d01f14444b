-- proletarian-di schema, step 6 (paused queues) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

CREATE TABLE IF NOT EXISTS proletarian.job_paused (
    queue       TEXT PRIMARY KEY,     -- a paused queue: its workers claim none of its jobs
    paused_at   TIMESTAMPTZ NOT NULL
);
