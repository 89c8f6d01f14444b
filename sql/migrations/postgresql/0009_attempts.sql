-- proletarian-di schema, step 9 (attempts) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.archived_job') AND attname = 'started_at' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.archived_job ADD COLUMN started_at TIMESTAMPTZ;
    END IF;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('proletarian.archived_job') AND attname = 'worker' AND NOT attisdropped) THEN
        ALTER TABLE proletarian.archived_job ADD COLUMN worker TEXT;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS proletarian.job_attempt (
    id          BIGSERIAL PRIMARY KEY,
    job_id      UUID NOT NULL,        -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,     -- the attempt's number, from 1
    started_at  TIMESTAMPTZ,          -- NULL: unknown (its lease ran out)
    finished_at TIMESTAMPTZ NOT NULL, -- when it ended, or was found to have ended
    worker      TEXT,                 -- who ran it: host:pid thread
    error       TEXT                  -- its error (type, message, trace)
);
CREATE INDEX IF NOT EXISTS job_attempt_job_id ON proletarian.job_attempt (job_id);
