-- proletarian-di schema, step 4 (unique jobs) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN unique_key TEXT;
CREATE UNIQUE INDEX job_queue_unique_key ON proletarian.job (queue, unique_key)
    WHERE unique_key IS NOT NULL;
