-- proletarian-di schema, step 3 (periodic jobs) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_periodic (
    name        TEXT PRIMARY KEY,     -- the schedule's name (PeriodicJob.name)
    cron        TEXT NOT NULL,        -- its cron expression, as declared
    timezone    TEXT NOT NULL,        -- the IANA time zone the expression is read in
    job_type    TEXT NOT NULL,
    queue       TEXT NOT NULL,
    last_tick   TIMESTAMPTZ NOT NULL, -- the newest tick enqueued or passed over; later ones are due
    updated_at  TIMESTAMPTZ NOT NULL
);
