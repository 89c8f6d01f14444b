-- proletarian-di schema, step 5 (priorities) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'priority' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    END IF;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.archived_job') AND attname = 'priority' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.archived_job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS job_queue_priority_process_at ON proletarian.job (queue, (-priority), process_at);
DROP INDEX IF EXISTS proletarian.job_queue_process_at;
