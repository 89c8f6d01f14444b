-- proletarian-di schema, step 2 (stored errors) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN last_error TEXT;
ALTER TABLE proletarian.archived_job ADD COLUMN last_error TEXT;
