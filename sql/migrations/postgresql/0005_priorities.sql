-- proletarian-di schema, step 5 (priorities) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE proletarian.archived_job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
CREATE INDEX job_queue_priority_process_at ON proletarian.job (queue, (-priority), process_at);
DROP INDEX IF EXISTS proletarian.job_queue_process_at;
