-- proletarian-di schema, step 2 (stored errors) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'last_error' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN last_error TEXT;
    END IF;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.archived_job') AND attname = 'last_error' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.archived_job ADD COLUMN last_error TEXT;
    END IF;
END $$;
