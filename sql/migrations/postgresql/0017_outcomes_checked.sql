-- proletarian-di schema, step 17 (outcomes checked) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job_hourly_outcomes') AND attname = 'checked_at' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job_hourly_outcomes ADD COLUMN checked_at TIMESTAMPTZ;
    END IF;
END $$;
