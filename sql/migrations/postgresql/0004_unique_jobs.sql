-- proletarian-di schema, step 4 (unique jobs) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'unique_key' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN unique_key TEXT;
    END IF;
END $$;
CREATE UNIQUE INDEX IF NOT EXISTS job_queue_unique_key ON proletarian.job (queue, unique_key)
    WHERE unique_key IS NOT NULL;
