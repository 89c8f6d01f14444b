-- proletarian-di schema, step 7 (long jobs) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.job') AND attname = 'leased_by' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.job ADD COLUMN leased_by TEXT;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      UUID PRIMARY KEY,     -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL      -- its claims, committed apart from its transaction
);
