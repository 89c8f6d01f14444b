-- proletarian-di schema, step 8 (observability) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'trace_context' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN trace_context TEXT;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS archived_job_finished_at ON proletarian.archived_job (finished_at, queue, status);
