-- proletarian-di schema, step 11 (hourly outcomes) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_hourly_outcomes (
    hour        TIMESTAMPTZ NOT NULL, -- a clock hour's start, over for a while when written
    queue       TEXT NOT NULL,        -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,      -- archived as success in the hour
    failed      BIGINT NOT NULL,      -- archived as failure in the hour
    archived    BIGINT NOT NULL,      -- every archived row of the hour, whatever its status
    PRIMARY KEY (hour, queue)
);
