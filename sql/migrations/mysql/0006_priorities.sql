-- proletarian-di schema, step 6 (priorities) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND column_name = 'priority'),
       NULL, 'ADD COLUMN priority INTEGER NOT NULL DEFAULT 0'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND column_name = 'priority_rank'),
       NULL, 'ADD COLUMN priority_rank INTEGER AS (-priority) VIRTUAL'),
    IF(EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_priority_process_at'),
       NULL, 'ADD INDEX job_queue_priority_process_at (queue, priority_rank, process_at)'),
    IF(NOT EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_process_at'),
       NULL, 'DROP INDEX job_queue_process_at'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'archived_job' AND column_name = 'priority'),
       NULL, 'ADD COLUMN priority INTEGER NOT NULL DEFAULT 0'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.archived_job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
