-- proletarian-di schema, step 15 (results) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

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
