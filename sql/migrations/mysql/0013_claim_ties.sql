-- proletarian-di schema, step 13 (claim ties) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_priority_process_at' AND column_name = 'job_id' AND seq_in_index = 4),
       NULL, 'DROP INDEX job_queue_priority_process_at, ADD INDEX job_queue_priority_process_at (queue, priority_rank, process_at, job_id, attempts, leased_by)'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
