-- proletarian-di schema, step 6 (priorities) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job
    ADD COLUMN priority INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN priority_rank INTEGER AS (-priority) VIRTUAL,
    ADD INDEX job_queue_priority_process_at (queue, priority_rank, process_at),
    DROP INDEX job_queue_process_at;
ALTER TABLE proletarian.archived_job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
