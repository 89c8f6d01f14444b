-- proletarian-di schema, step 13 (rate limits) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_rate_slots (
    bucket      TEXT NOT NULL,        -- what is limited: the queue
    slot        INTEGER NOT NULL,     -- 0 to the limit - 1: a start may use it once a period
    used_at     TIMESTAMPTZ NOT NULL, -- the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,      -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
);
