-- proletarian-di schema, step 17 (group keys) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND column_name = 'group_key'),
       NULL, 'ADD COLUMN group_key VARCHAR(255) NOT NULL DEFAULT '''''),
    IF(EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_group_key'),
       NULL, 'ADD INDEX job_queue_group_key (queue, group_key, priority_rank, process_at, job_id)'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
