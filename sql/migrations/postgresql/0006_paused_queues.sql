-- proletarian-di schema, step 6 (paused queues) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_paused (
    queue       TEXT PRIMARY KEY,     -- a paused queue: its workers claim none of its jobs
    paused_at   TIMESTAMPTZ NOT NULL
);
