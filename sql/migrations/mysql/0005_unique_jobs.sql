-- proletarian-di schema, step 5 (unique jobs) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job
    ADD COLUMN unique_key VARCHAR(255) NULL,
    ADD UNIQUE INDEX job_queue_unique_key (queue, unique_key);
