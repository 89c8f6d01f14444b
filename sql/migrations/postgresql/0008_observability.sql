-- proletarian-di schema, step 8 (observability) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN trace_context TEXT;
CREATE INDEX IF NOT EXISTS archived_job_finished_at ON proletarian.archived_job (finished_at, queue, status);
