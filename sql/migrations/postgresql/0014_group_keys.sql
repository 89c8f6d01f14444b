-- proletarian-di schema, step 14 (group keys) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'group_key' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN group_key TEXT NOT NULL DEFAULT '';
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS job_queue_group_key ON proletarian.job (queue, group_key, (-priority), process_at)
    WHERE group_key <> '';
