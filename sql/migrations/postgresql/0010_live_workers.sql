-- proletarian-di schema, step 10 (live workers) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

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
