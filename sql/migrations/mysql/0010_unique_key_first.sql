-- proletarian-di schema, step 10 (unique key first) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_unique_key' AND column_name = 'unique_key' AND seq_in_index = 1),
       NULL, 'DROP INDEX job_queue_unique_key, ADD UNIQUE INDEX job_queue_unique_key (unique_key, queue)'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
