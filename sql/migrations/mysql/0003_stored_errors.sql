-- proletarian-di schema, step 3 (stored errors) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN last_error TEXT NULL;
ALTER TABLE proletarian.archived_job ADD COLUMN last_error TEXT NULL;
