-- proletarian-di schema, step 9 (observability) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job
    ADD COLUMN trace_context TEXT NULL,
    DROP INDEX job_queue_priority_process_at,
    ADD INDEX job_queue_priority_process_at (queue, priority_rank, process_at, attempts, leased_by);
ALTER TABLE proletarian.archived_job ADD INDEX archived_job_finished_at (finished_at, queue, status);
