-- proletarian-di schema, step 18 (schedule controls) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job_periodic') AND attname = 'paused_at' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job_periodic ADD COLUMN paused_at TIMESTAMPTZ;
    END IF;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job_periodic') AND attname = 'run_requested_at' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job_periodic ADD COLUMN run_requested_at TIMESTAMPTZ;
    END IF;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job_periodic') AND attname = 'recent_runs' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job_periodic ADD COLUMN recent_runs TEXT;
    END IF;
END $$;
